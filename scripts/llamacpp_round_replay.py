"""One row-round of a llama.cpp run, kept and decided again on each rung of the escape's ladder: not a test.

``capture`` runs ``python -m runners.main`` with the given overrides on llama.cpp and saves, at ``--sample``'s round
``--round``, the row's verify inputs (hidden states, drafts, draft probabilities, the plain logits), its generator
state before the round, the rule, the head spec and the LM head (about 1 GB for the embedded pair). ``replay``
decides that round again with the run's sparse rule, with the exact heads, and with each ladder of ``--ladders``
in ``criteria.dropmatch_js.TAIL_LADDER``'s place, printing each rung's two sides of Eq. (6), their standard error
and z, and, at the first rung of the first of ``--ladders``, each head's tail mass beyond the candidates (exact and as the sample
estimates it) and the plain-head ranks where the heads' tail mass lies. Under the AVX2 stand-in:

    export DROPMATCH_ISA_CAP=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2
    .venv/bin/python scripts/llamacpp_round_replay.py capture --sample ifeval/train/1051 --round 12 \\
        --out /tmp/round.pt experiment=table6 method=dropmatch dataset=ifeval L=5
    .venv/bin/python scripts/llamacpp_round_replay.py replay /tmp/round.pt --ladders '64+64;64+256;512+512'
"""

from __future__ import annotations

import argparse
import runpy
import sys
from dataclasses import replace

import torch


def capture(sample: str, round_index: int, out: str, overrides: list[str]) -> None:
    import runners.backends.llamacpp_loop as loop

    real, done = loop.decide_round, []

    def keep(rows, hidden, head, drafts, rule, heads, *, seed, trace, **round_in):
        hit = [
            i
            for i, r in enumerate(rows)
            if r.sample.sample_id == sample and len(r.accepted) == round_index
        ]
        saved = None
        if hit and not done:
            i = hit[0]
            saved = {
                "state": rows[i].gen.get_state().clone(),
                "hidden": hidden[i : i + 1].clone(),
                "drafts": drafts[i : i + 1].clone(),
                "round_in": {
                    k: v[i : i + 1].clone() if torch.is_tensor(v) else v
                    for k, v in round_in.items()
                },
                "heads": heads,
                "rule": rule,
                "weight": head.weight,
                "bias": head.bias,
                "vocab_size": head.vocab_size,
            }
        res = real(rows, hidden, head, drafts, rule, heads, seed=seed, trace=trace, **round_in)
        if saved is not None:
            torch.save(saved, out)
            done.append(out)
            print(f"[replay] kept {sample} round {round_index} in {out}", file=sys.stderr)
        return res

    loop.decide_round = keep
    sys.argv = ["runners.main", *overrides]
    runpy.run_module("runners.main", run_name="__main__")
    if not done:
        raise SystemExit(f"{sample} never reached round {round_index} on llama.cpp")


def _tail_report(inputs, rows, positions, rung) -> None:
    """Each head's tail mass beyond the rung's exact tokens, exact and as its sample estimates it, and where the
    heads' mass lies by the plain head's rank."""
    heads, ids, w = inputs.exact_heads(rows, positions, rung)
    full = inputs.exact_heads(rows, positions, None)[0].float()  # [m, K, V]
    C = ids.shape[-1] - rung[1]
    for j in range(rows.numel()):
        p = full[j].softmax(-1)
        pi = inputs.target_logits[rows[j], positions[j]].float().softmax(-1)
        tail = torch.ones_like(pi, dtype=torch.bool)
        tail[ids[j, :C]] = False
        print(
            f"  position {int(positions[j])}: {C} exact tokens; plain head's tail mass {float(pi[tail].sum()):.4f}"
        )
        for k in range(p.shape[0]):
            z = (heads[j, k] + w[j].log()).logsumexp(-1)
            est = float(((heads[j, k, C:] + w[j, C:].log()).logsumexp(-1) - z).exp())
            print(
                f"    head {k}: tail mass exact {float(p[k][tail].sum()):.4f}, sampled estimate {est:.4f}"
            )
        order = pi.argsort(descending=True)
        top = p.max(0).values[order]
        bands = ((0, 64), (64, 512), (512, 2048), (2048, 16384), (16384, pi.numel()))
        print(
            "    heads' largest probability summed by plain rank: "
            + ", ".join(
                f"{a}-{b} {float(top[a:b].sum()):.3f} (plain {float(pi[order[a:b]].sum()):.3f})"
                for a, b in bands
            )
        )


def replay(path: str, ladders: str) -> None:
    import criteria.dropmatch_js as djs
    from criteria.dropout_heads import LMHead
    from criteria.verify import verify_round

    kept = torch.load(path, weights_only=False)
    head = LMHead(weight=kept["weight"], bias=kept["bias"], vocab_size=kept["vocab_size"])
    spec = kept["heads"]

    def decide(heads, ladder=None, report=False):
        real, calls, saved = djs.redecide, [], djs.TAIL_LADDER

        def logged(inputs, rows, positions, rung):
            d, h, se = real(inputs, rows, positions, rung)
            calls.append((rung, positions.tolist(), d.tolist(), h.tolist(), se.tolist()))
            if report and rung == djs.TAIL_LADDER[0]:
                _tail_report(inputs, rows, positions, rung)
            return d, h, se

        djs.redecide = logged
        djs.TAIL_LADDER = ladder or saved
        try:
            g = torch.Generator().set_state(kept["state"])
            res = verify_round(
                kept["hidden"],
                head,
                kept["drafts"],
                kept["rule"],
                heads,
                generators=[g],
                **kept["round_in"],
            )
        finally:
            djs.redecide, djs.TAIL_LADDER = real, saved
        return res, calls

    exact, _ = decide(replace(spec, top_n=None, audit_share=0.0, escape=False))
    print(f"{spec}\nexact heads: {int(exact.num_accepted[0])} drafts accepted")
    res, _ = decide(spec)
    print(f"the run's ladder {djs.TAIL_LADDER}: {int(res.num_accepted[0])} accepted")
    for n, text in enumerate(filter(None, ladders.split(";"))):
        first = tuple(int(x) for x in text.split("+")) if "+" in text else (64, int(text))
        ladder = (first, *(r for r in djs.TAIL_LADDER[1:] if r is None or r[0] > first[0]))
        res, calls = decide(
            spec, ladder, report=n == 0
        )  # the tail report at the first ladder's first rung
        steps = " | ".join(
            f"{c[0]} pos {c[1]}: d {c[2][0]:.4f} h {c[3][0]:.4f} se {c[4][0]:.4f} "
            f"z {(c[3][0] - c[2][0]) / max(c[4][0], 1e-12):+.1f}"
            for c in calls
        )
        print(f"first rung {text:>9s}: {int(res.num_accepted[0])} accepted; {steps}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--sample", required=True)
    c.add_argument("--round", type=int, required=True)
    c.add_argument("--out", required=True)
    c.add_argument("overrides", nargs="*")
    r = sub.add_parser("replay")
    r.add_argument("path")
    r.add_argument("--ladders", default="64+64;64+128;64+256;512+512")
    args = ap.parse_args()
    if args.cmd == "capture":
        capture(args.sample, args.round, args.out, args.overrides)
    else:
        replay(args.path, args.ladders)


if __name__ == "__main__":
    main()
