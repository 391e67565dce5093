"""The sparse DropMatch JS test with and without ``dropmatch.sparse_escape``, against the exact rule, on real-pair
rounds: not a test.

Decodes ``--n`` items of each of ``--datasets`` with the sparse ``dropmatch_js`` rule (greedy, L=5, K=5,
p_drop=0.3, top-64, bf16, batch ``--batch``), keeps every row-round's verify inputs (the target's hidden states,
the drafts, the draft probabilities), then decides them again in batches of ``--batch`` rows with ``--seeds`` mask
seeds: exactly, sparsely (``lumped``), sparsely with the escape (``escape``: the tail sampled, then a wider
exact top and more samples, then the exact heads where unsure, ``criteria.dropmatch_js.TAIL_LADDER``), with the
escape going straight to the exact heads (``straight``) and with each of ``--ladders`` in the ladder's place. Prints, per
variant, the drafted positions whose test agrees with the exact rule's up to its first rejection, and the decision
time per batch round (the plain head's matmul included, so compare differences), and each row's first disagreement
by kind (Eq. 7's verdict or Eq. 6's, with both sides of Eq. 6). ``--rungs`` also prints where the escape's time
goes: each rung of the ladder's positions, calls and milliseconds per batch round, beside the greedy rule's whole
decision (the plain head and its argmax: what SD pays too) on the same rounds, and, for rounds captured in this
process, the ladder's share of the loop's verify forwards (per row-round). ``--cache DIR`` keeps the captured rounds (about
2.7 GB for the defaults) for the next call. Load the real pair only under the
machine-wide lock:

    flock /tmp/dropmatch-realpair.lock env PYTHONPATH=$PWD DROPMATCH_THREADS=2 \\
        .venv/bin/python scripts/realpair_escape.py --n 10 --batch 10 --seeds 2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import torch


def capture(pair, dataset: str, n: int, batch: int, max_new: int, verify_s: list) -> list:
    """Every row-round's ``(hidden [1, L+1, d], drafts [1, L], draft_probs [1, L, V])`` of a sparse DM decode; each
    batch round's ``(rows, verify-forward seconds)`` is appended to ``verify_s``."""
    from omegaconf import OmegaConf

    import runners.datasets  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends import decide, hf_loop
    from runners.backends.base import DecodingConfig
    from runners.paths import REPO_ROOT
    from runners.registry import DATASETS, build

    dcfg = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / f"conf/dataset/{dataset}.yaml"))
    data = build(DATASETS, {**dcfg, "limit": n})
    rounds, real = [], decide.verify_round

    def keep(hidden, lm_head, drafts, rule, heads, **kw):
        for i in range(drafts.shape[0] if drafts.shape[1] > 0 else 0):
            rounds.append(
                (
                    hidden[i : i + 1].clone(),
                    drafts[i : i + 1].clone(),
                    kw["draft_probs"][i : i + 1].clone(),
                )
            )
        return real(hidden, lm_head, drafts, rule, heads, **kw)

    decide.verify_round = keep  # the loop decides every round through runners.backends.decide
    be = hf_loop.HFLoopBackend(pair, batch_size=batch)
    real_round = be._round

    def timed_round(*a, **kw):
        parts = real_round(*a, **kw)
        # the round's rows (fewer as items finish) and its target verify forward
        verify_s.append((len(a[0]), parts["verify"]))
        return parts

    be._round = timed_round
    try:
        dec = DecodingConfig(
            num_speculative_tokens=5, max_new_tokens=max_new, stop=list(data.stop or [])
        )
        list(
            be.generate(
                data.load(), dec, CRITERIA.get("dropmatch_js")(), HeadSpec(5, 0.3, top_n=64)
            )
        )
    finally:
        decide.verify_round = real
    return rounds


def miss_kinds(decide, spec, same, counted) -> list[str]:
    """Each first disagreement of a row, named by its kind: ``majority`` (Eq. 7's verdict differs: a head's token
    outside the candidates) or ``js`` (Eq. 6's), with both sides of Eq. (6) exact and as the variant saw them."""
    from criteria.dropout_heads import HeadSpec

    exact, _ = decide(HeadSpec(spec.K, spec.p_drop), trace=True)
    mine, _ = decide(spec, trace=True)
    out = []
    for b, t in (~same & counted).nonzero().tolist():
        if bool((~same[b, :t] & counted[b, :t]).any()):
            continue  # only a row's first disagreement
        e, m = exact.trace, mine.trace
        kind = (
            "majority"
            if bool(e["draft_agrees_majority"][b, t] != m["draft_agrees_majority"][b, t])
            else "js"
        )
        out.append(
            f"{kind} row {b} pos {t}: exact JS {float(e['js_draft'][b, t]):.4f} vs {float(e['js_heads_max'][b, t]):.4f}"
            f", variant {float(m['js_draft'][b, t]):.4f} vs {float(m['js_heads_max'][b, t]):.4f}"
        )
    return out


class Rungs:
    """Positions, calls and seconds of each rung of ``criteria.dropmatch_js.redecide`` while counting is on, and the
    greedy rule's decision seconds on the same batch rounds (``greedy_s``)."""

    def __init__(self, djs) -> None:
        from criteria.sparse_heads import rung_name

        self.real, self.on = djs.redecide, False
        self.stats: dict[str, list] = {}  # rung -> [calls, positions, seconds]
        self.greedy_s = 0.0
        self.verify_s = 0.0  # the verify forwards of the rounds captured in this process
        self.verify_row_rounds = 0

        def redecide(inputs, rows, positions, rung):
            t = time.perf_counter()
            out = self.real(inputs, rows, positions, rung)
            if self.on:
                s = self.stats.setdefault(rung_name(rung, 64), [0, 0, 0.0])
                s[0] += 1
                s[1] += int(rows.numel())
                s[2] += time.perf_counter() - t
            return out

        djs.redecide = redecide

    @contextlib.contextmanager
    def counting(self, on: bool):
        self.on = on
        try:
            yield
        finally:
            self.on = False

    def report(self, batches: int, row_rounds: int) -> None:
        """Milliseconds per batch round of the replay (``batches`` rounds of B rows, ``row_rounds`` in all), and the
        ladder's share of the verify forwards, per row-round on both sides: the loop's own rounds hold fewer rows as
        items finish, so their forwards are counted by the rows they carried."""
        verify = self.verify_s / self.verify_row_rounds if self.verify_row_rounds else float("nan")
        print(
            f"  verify forward: {self.verify_s:.1f} s over {self.verify_row_rounds} row-rounds captured in this"
            f" process (nan: all read from the cache)"
        )
        print(
            f"  greedy rule (plain head + argmax): {1e3 * self.greedy_s / batches:.1f} ms per batch round"
        )
        ladder = 0.0
        for rung, (calls, n, secs) in self.stats.items():
            ladder += secs
            print(
                f"  escape rung {rung:>5s}: {n} positions in {calls} calls, {1e3 * secs / batches:.1f} ms per"
                f" batch round ({1e3 * secs / max(n, 1):.2f} ms per position)"
            )
        print(
            f"  the ladder: {1e3 * ladder / batches:.1f} ms per batch round; per row-round"
            f" {100 * ladder / row_rounds / verify:.1f}% of the verify forward's"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--datasets", default="ifeval,gsm8k,humaneval")
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument(
        "--cache", default="", help="a directory for the captured rounds (reused when there)"
    )
    ap.add_argument(
        "--rungs",
        action="store_true",
        help="time each rung of the escape's ladder and the greedy rule",
    )
    ap.add_argument(
        "--ladders",
        default="",
        help="more ladders to compare, ';'-separated, each rung ','-separated as E+S (the top-E exact, S samples) "
        "or S (the top-64 and S samples), 'exact' last (e.g. '64,4096,32768,exact' or '64,512+512,exact')",
    )
    args = ap.parse_args()

    from omegaconf import OmegaConf

    import criteria.dropmatch_js as djs
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec, LMHead
    from criteria.registry import CRITERIA
    from criteria.verify import verify_round
    from runners.backends.seeding import make_generator
    from runners.models.loader import load_pair
    from runners.paths import REPO_ROOT

    cfg = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf/pair/qwen25coder_0.5b_1.5b.yaml"))
    pair = load_pair({**cfg, "dtype": "bfloat16"})
    W = pair.target.get_output_embeddings().weight
    head, rule, B = LMHead(W), CRITERIA.get("dropmatch_js")(), args.batch
    greedy = CRITERIA.get("greedy_match")()
    ladder = djs.TAIL_LADDER
    variants = {
        "lumped": (HeadSpec(5, 0.3, top_n=64), ladder),
        "escape": (HeadSpec(5, 0.3, top_n=64, escape=True), ladder),
        "straight": (HeadSpec(5, 0.3, top_n=64, escape=True), (None,)),
    }
    for text in filter(None, args.ladders.split(";")):
        steps = tuple(
            None
            if r.strip() == "exact"
            else (int(r.partition("+")[0]) if "+" in r else 64, int(r.rpartition("+")[2]))
            for r in text.split(",")
        )
        if steps[-1] is not None:
            ap.error(f"--ladders {text!r}: the last rung must be 'exact'")
        variants[f"ladder {text}"] = (HeadSpec(5, 0.3, top_n=64, escape=True), steps)
    tally = {v: [0, 0, 0.0] for v in ["exact", *variants]}  # positions agree, positions, seconds
    rungs = Rungs(djs) if args.rungs else None
    kinds = {v: [] for v in variants}
    batches = 0
    for ds in args.datasets.split(","):
        t0 = time.perf_counter()
        path = f"{args.cache}/{ds}-{args.n}-{B}-{args.max_new}.pt" if args.cache else ""
        verify_s: list[tuple[int, float]] = []  # per batch round, when captured in this process
        if path and os.path.exists(path):
            rounds = torch.load(path)
        else:
            rounds = capture(pair, ds, args.n, B, args.max_new, verify_s)
            if path:
                os.makedirs(args.cache, exist_ok=True)
                torch.save(rounds, path)
        if rungs and verify_s:  # the loop's rounds (their rows vary as items finish)
            rungs.verify_s += sum(secs for _, secs in verify_s)
            rungs.verify_row_rounds += sum(rows for rows, _ in verify_s)
        print(
            f"== {ds}: {len(rounds)} row-rounds captured in {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        for i in range(0, len(rounds) - B + 1, B):
            hidden, drafts, q = (torch.cat([r[k] for r in rounds[i : i + B]]) for k in range(3))
            for s in range(args.seeds):

                def decide(spec, s=s, hidden=hidden, drafts=drafts, q=q, trace=False, rule=rule):
                    gens = [make_generator(1000 * s + j, W.device) for j in range(B)]
                    t = time.perf_counter()
                    res = verify_round(
                        hidden,
                        head,
                        drafts,
                        rule,
                        spec,
                        temperature=0.0,
                        generators=gens,
                        draft_probs=q,
                        trace=trace,
                    )
                    return res, time.perf_counter() - t

                exact, secs = decide(HeadSpec(5, 0.3))
                tally["exact"][2] += secs
                if rungs:
                    rungs.greedy_s += decide(HeadSpec(5, 0.3, top_n=64), rule=greedy)[1]
                batches += 1
                upto = (exact.num_accepted + 1).clamp(max=drafts.shape[1])  # [B]
                counted = torch.arange(drafts.shape[1])[None] < upto[:, None]  # [B, L]
                for name, (spec, steps) in variants.items():
                    djs.TAIL_LADDER = steps
                    with rungs.counting(name == "escape") if rungs else contextlib.nullcontext():
                        res, secs = decide(spec)
                    same = (res.accept_mask == exact.accept_mask) & counted
                    tally[name][0] += int(same.sum())
                    tally[name][1] += int(counted.sum())
                    tally[name][2] += secs
                    if not bool(same[counted].all()):
                        kinds[name] += miss_kinds(decide, spec, same, counted)
        djs.TAIL_LADDER = ladder
    for name, (agree, total, secs) in tally.items():
        share = f"{agree}/{total} = {100 * agree / total:.3f}%" if total else "(the reference)"
        print(f"  {name:9s} positions agree {share}; {1e3 * secs / batches:.1f} ms per batch round")
        for kind in kinds.get(name, []):
            print(f"    miss: {kind}")
    if rungs:
        rungs.report(batches, batches * B)


if __name__ == "__main__":
    os.environ.setdefault("DROPMATCH_THREADS", str(os.cpu_count() or 1))
    main()
