"""Sparse DropMatch JS with the tail importance-sampled instead of lumped, against the exact rule, on real-pair
rounds: a measurement, not a test. It sized the first rung of ``dropmatch.sparse_escape``'s ladder (S samples beyond
the sparse candidates, ``TAIL_Z``) with the library's estimator, over several settings at once; ladders with a wider
exact top per rung (``criteria.dropmatch_js.TAIL_LADDER``) are compared by ``scripts/realpair_escape.py --ladders``.

Without the escape, the sparse variant (``dropmatch.sparse_top_n``) computes Eq. (6) on the C candidates plus one rest
entry whose logit is the plain head's log-sum-exp outside them, for every head. Per drafted position, the escape:

- the candidates are the library's (:func:`criteria.candidates.candidate_tokens`, top-64 of the plain head and
  of the draft), their terms exact;
- S tail tokens are drawn deterministically (systematic sampling at ``(s + 0.5) / S``) from
  ``rho = 1/2 pi + 1/2 q_tail`` (``pi`` the plain head's distribution outside the candidates, ``q_tail`` the
  draft's), and each head's, the centroid's and the draft's tail terms of JS are estimated as
  ``sum_s f(p_s, c_s) / (S rho_s)``; each head's and the centroid's normaliser likewise;
- the position is unsure when ``|max_i JS_i - JS_draft| <= z SE + 1e-5`` (SE over the samples); an unsure
  position is decided again with ``--wide`` samples, and, still unsure, by the exact rule.

Prints, for each ``(S, wide, z)``: drafted positions whose verdict differs from the exact rule's (up to its first
rejection), the positions that went to the wide sample and to the exact heads, and the batch rounds that needed
the exact heads (each costs one pass over the LM head). The lumped rest entry is printed as the baseline.
Load the real pair only under the machine-wide lock; the rounds come from ``scripts/realpair_escape.py --cache``:

    flock /tmp/dropmatch-realpair.lock env PYTHONPATH=$PWD DROPMATCH_THREADS=2 \\
        .venv/bin/python scripts/realpair_tail_sample.py --cache /tmp/escape_cache --datasets ifeval
"""

from __future__ import annotations

import argparse
import os

import torch

K, P_DROP, TOP_N, FLOOR = 5, 0.3, 64, 1e-5


def sampled_js(heads, q, ids, dup, plain, S):
    """``(js_draft [n], js_heads_max [n], se [n])`` with S tail samples: the library's estimator
    (:func:`criteria.sampled_tail.sampled_js_statistics` on :func:`criteria.sampled_tail.tail_sample`), read off the
    full heads ``[n, K, V]`` instead of gathered LM-head rows."""
    from criteria.sampled_tail import sampled_js_statistics, tail_sample

    n, K_, _ = heads.shape
    tail, w = tail_sample(plain, q, ids, S)  # [n, S]
    every = torch.cat([ids, tail], -1)
    at = heads.gather(-1, every[:, None].expand(n, K_, every.shape[-1]))
    at[..., : ids.shape[-1]] = at[..., : ids.shape[-1]].masked_fill(dup[:, None], float("-inf"))
    qs = q.gather(-1, every)
    qs[:, : ids.shape[-1]] = qs[:, : ids.shape[-1]].masked_fill(dup, 0.0)
    return sampled_js_statistics(at, qs, torch.cat([torch.ones(dup.shape), w], -1), S, 0.0)


def lumped_js(heads, q, ids, dup, plain):
    """The library's coarsened Eq. (6) (one rest entry: the plain head's log-sum-exp outside the candidates)."""
    from criteria.candidates import rest_logsumexp
    from criteria.dropmatch_base import coarsen, js_statistics

    n, K_, _ = heads.shape
    hc = heads.gather(-1, ids[:, None].expand(n, K_, ids.shape[-1])).masked_fill(
        dup[:, None], float("-inf")
    )
    support = torch.cat([hc, rest_logsumexp(plain, ids)[:, None, None].expand(n, K_, 1)], -1)
    d, h = js_statistics(support[:, None], coarsen(q.gather(-1, ids), support)[:, None], 0.0)
    return d[:, 0], h[:, 0]


def count(tally: dict, ctx: tuple, key: str, verdict, rung=None, deep=None) -> None:
    """Add one batch round's verdicts ``[n]`` (and the positions that took the second sample / the exact heads) to
    ``tally[key]``: ``[differ, positions, second sample, exact, rounds with the exact heads, rounds]``."""
    B, L, by_maj, emask, counted, need = ctx
    ok = verdict.view(B, L) | by_maj
    same = (ok.long().cumprod(-1).bool() == emask) & counted
    t = tally.setdefault(key, [0, 0, 0, 0, 0, 0])
    t[0] += int((~same & counted).sum())
    t[1] += int(counted.sum())
    t[2] += 0 if rung is None else int((rung & need).sum())
    t[3] += 0 if deep is None else int((deep & need).sum())
    t[4] += 0 if deep is None else int((deep & need).any())
    t[5] += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, help="scripts/realpair_escape.py --cache directory")
    ap.add_argument("--datasets", default="ifeval,gsm8k,humaneval")
    ap.add_argument(
        "--samples", default="32,64,128", help="S, the tail samples of the first decision"
    )
    ap.add_argument(
        "--wide", default="1024,4096", help="the samples of an unsure position's second decision"
    )
    ap.add_argument("--z", default="3,4", help="band widths in standard errors")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--batches", type=int, default=0, help="batch rounds per dataset (0: all)")
    args = ap.parse_args()

    from omegaconf import OmegaConf

    from criteria.candidates import candidate_tokens
    from criteria.dropmatch_base import js_statistics, majority_vote
    from criteria.round_heads import dropped_inputs
    from runners.backends.seeding import make_generator
    from runners.models.loader import load_pair
    from runners.paths import REPO_ROOT

    cfg = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf/pair/qwen25coder_0.5b_1.5b.yaml"))
    W = (
        load_pair({**cfg, "dtype": "bfloat16"}, need_draft=False)
        .target.get_output_embeddings()
        .weight
    )
    W = W.detach()
    first, wide = (tuple(int(x) for x in a.split(",")) for a in (args.samples, args.wide))
    zs = tuple(float(x) for x in args.z.split(","))
    tally: dict[str, list[int]] = {}
    for ds in args.datasets.split(","):
        rounds, B = torch.load(f"{args.cache}/{ds}-10-{args.batch}-256.pt"), args.batch
        starts = range(0, len(rounds) - B + 1, B)
        for i in starts[: args.batches or None]:
            hidden, drafts, q = (torch.cat([r[k] for r in rounds[i : i + B]]) for k in range(3))
            L = drafts.shape[1]
            n = B * L
            for s in range(args.seeds):
                gens = [make_generator(1000 * s + j, W.device) for j in range(B)]
                dropped = dropped_inputs(hidden, gens, K, P_DROP, L).view(B, L, K, -1)
                heads = torch.nn.functional.linear(dropped, W).float()  # [B, L, K, V]
                plain = torch.nn.functional.linear(hidden[:, :L], W).float()  # [B, L, V]
                qf = q.float()
                jd, jh = js_statistics(heads, qf, 0.0)
                maj, valid = majority_vote(heads.argmax(-1), "strict")
                by_maj = valid & (maj == drafts)
                exact = (jd <= jh) | by_maj  # [B, L]
                emask = exact.long().cumprod(-1).bool()
                counted = torch.arange(L)[None] < (emask.sum(-1) + 1).clamp(max=L)[:, None]
                need = (counted & ~by_maj).view(n)  # where Eq. (6) decides
                ids, dup = (t.view(n, -1) for t in candidate_tokens(plain, qf, TOP_N))
                V = plain.shape[-1]
                heads, plain, qf = heads.view(n, K, V), plain.view(n, V), qf.view(n, V)
                est = {S: sampled_js(heads, qf, ids, dup, plain, S) for S in {*first, *wide}}

                ctx = (B, L, by_maj, emask, counted, need)
                d, h = lumped_js(heads, qf, ids, dup, plain)
                count(tally, ctx, "lumped rest entry (the library's, no escape)", d <= h)
                for S in first:
                    for S1 in wide:
                        for z in zs:
                            d0, h0, se0 = est[S]
                            u0 = (h0 - d0).abs() <= z * se0 + FLOOR
                            d1, h1, se1 = est[S1]
                            u1 = u0 & ((h1 - d1).abs() <= z * se1 + FLOOR)
                            verdict = torch.where(
                                u1, exact.view(n), torch.where(u0, d1 <= h1, d0 <= h0)
                            )
                            count(tally, ctx, f"S={S} -> {S1} -> exact, z={z:g}", verdict, u0, u1)
        print(f"== after {ds}", flush=True)
        for key, (miss, total, rung, deep, rounds_deep, batches) in tally.items():
            print(
                f"  {key:44s} differ {miss:3d} / {total} positions; second sample {rung}, exact {deep} "
                f"positions; rounds with the exact heads {rounds_deep} / {batches}",
                flush=True,
            )


if __name__ == "__main__":
    os.environ.setdefault("DROPMATCH_THREADS", str(os.cpu_count() or 1))
    main()
