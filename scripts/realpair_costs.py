"""Real-pair cost ratios, one process, components round-robin: a measurement script, not a test.

Measures, per dtype, on the loop's own code (``BatchKV.forward`` + LM head, ``criteria.verify.verify_round``):
  - forward of the target and the draft over n = 1, L+1, 2L+1 new tokens (LM head on every fed position) with
    a KV context of ``--context`` tokens, batch 1; ratio to n = 1 (verify(L+1) / decode);
  - the target's verify forward over ``[B, L+1]`` for each ``--batch`` size (one weight read for B rows);
  - the DropMatch decision overhead: ``verify_round`` with ``dropmatch_js`` / ``dropmatch_naive`` (K heads at
    p_drop) minus ``verify_round`` with ``greedy_match`` (plain head only), as a share of the verify pass
    (target forward over L+1 tokens + plain head + greedy decision, the plain head counted once);
  - the same for ``dropmatch_js`` decided by the sparse variant (``--sparse-top-n``), and for the sparse decision
    audited on a share ``--audit-share`` of its rounds (``criteria.audit.audited_verify_round``: the sparse round
    plus the exact rule on the same masks), amortised: ``(1 - a) * sparse + a * audited``.
Medians over ``--repeats`` after ``--warmup``. Load the real pair only under the machine-wide lock:

    flock /tmp/dropmatch-realpair.lock env PYTHONPATH=$PWD DROPMATCH_THREADS=2 \\
        .venv/bin/python scripts/realpair_costs.py --dtypes float32,bfloat16
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable

import torch


def _pair(dtype: str):
    from omegaconf import OmegaConf

    from runners.models.loader import load_pair
    from runners.paths import REPO_ROOT

    cfg = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf/pair/qwen25coder_0.5b_1.5b.yaml"))
    return load_pair({**cfg, "dtype": dtype})


def _state(model, context: int, B: int = 1):
    from runners.backends.batch_kv import BatchKV
    from runners.backends.kv_state import KVState

    g = torch.Generator().manual_seed(0)
    kv = BatchKV(model)
    ids = torch.randint(100, 20000, (context,), generator=g).tolist()
    st = KVState(model)
    st.prefill(ids)
    for _ in range(B):
        kv.add(st.cache)
    return kv


def _median_ms(fns: dict[str, Callable[[], None]], warmup: int, repeats: int) -> dict[str, float]:
    out: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(warmup + repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if r >= warmup:
                out[k].append(time.perf_counter() - t0)
    return {k: 1e3 * statistics.median(v) for k, v in out.items()}


@torch.inference_mode()
def measure(dtype: str, args) -> None:
    import criteria.rules  # noqa: F401
    from criteria.audit import audited_verify_round
    from criteria.dropout_heads import HeadSpec, LMHead
    from criteria.registry import CRITERIA
    from criteria.verify import verify_round
    from runners.backends.seeding import make_generator

    pair = _pair(dtype)
    L, ctx = args.L, args.context
    fns: dict[str, Callable[[], None]] = {}
    for who, model in (("target", pair.target), ("draft", pair.draft)):
        kv = _state(model, ctx)
        for n in (1, L + 1, 2 * L + 1):

            def fwd(kv=kv, n=n) -> None:
                h = kv.forward(torch.full((1, n), 1000, dtype=torch.long))
                kv.logits(h)
                kv.keep_last(n, torch.zeros(1, dtype=torch.long))

            fns[f"{who} n={n}"] = fwd
    for B in args.batch:
        kv = _state(pair.target, ctx, B)

        def fwd_b(kv=kv, B=B) -> None:
            h = kv.forward(torch.full((B, L + 1), 1000, dtype=torch.long))
            kv.logits(h)
            kv.keep_last(L + 1, torch.zeros(B, dtype=torch.long))

        fns[f"target verify B={B}"] = fwd_b
    # a realistic verify round: real hidden states of the target and real draft probabilities
    tkv, dkv = _state(pair.target, ctx), _state(pair.draft, ctx)
    feed = torch.tensor(
        [[1000, 2000, 3000, 4000, 5000, 6000][: L + 1] + [7000] * max(0, L + 1 - 6)]
    )
    hidden = tkv.forward(feed)
    tkv.keep_last(L + 1, torch.zeros(1, dtype=torch.long))
    draft_probs = torch.softmax(dkv.logits(dkv.forward(feed[:, :L])), dim=-1)  # [1, L, V]
    drafts = draft_probs.argmax(dim=-1)
    head = LMHead(tkv.lm_head_weight, tkv.lm_head_bias)
    gen = make_generator(0, tkv.device)
    heads = HeadSpec(args.K, args.p_drop)
    rules = {
        "greedy": (CRITERIA.get("greedy_match")(), HeadSpec()),
        "dm_js": (CRITERIA.get("dropmatch_js")(), heads),
        "dm_naive": (CRITERIA.get("dropmatch_naive")(), heads),
    }
    fns["lm head"] = lambda tkv=tkv: tkv.logits(hidden)  # the plain head over L+1 positions
    for name, (rule, hs) in rules.items():

        def decide(rule=rule, hs=hs) -> None:
            verify_round(
                hidden,
                head,
                drafts,
                rule,
                hs,
                temperature=0.0,
                generators=[gen],
                draft_probs=draft_probs if rule.needs_draft_probs else None,
            )

        fns[f"decide {name}"] = decide
    sparse = HeadSpec(args.K, args.p_drop, top_n=args.sparse_top_n, audit_share=args.audit_share)
    js = CRITERIA.get("dropmatch_js")()

    def decide_sparse(audit_rows: list[int]) -> Callable[[], None]:
        return lambda: audited_verify_round(
            hidden,
            head,
            drafts,
            js,
            sparse,
            temperature=0.0,
            generators=[gen],
            audit_rows=audit_rows,
            draft_probs=draft_probs,
        )

    fns["decide dm_js_sparse"] = decide_sparse([])
    fns["decide dm_js_sparse_audited"] = decide_sparse([0])
    ms = _median_ms(fns, args.warmup, args.repeats)
    print(
        f"== dtype {dtype} (threads {torch.get_num_threads()}, context {ctx}, L={L}, K={args.K}, "
        f"p_drop={args.p_drop}, median of {args.repeats})"
    )
    for who in ("target", "draft"):
        base = ms[f"{who} n=1"]
        print(
            "  "
            + who
            + ": "
            + ", ".join(
                f"n={n} {ms[f'{who} n={n}']:.1f} ms ({ms[f'{who} n={n}'] / base:.2f}x)"
                for n in (1, L + 1, 2 * L + 1)
            )
        )
    b1 = ms[f"target verify B={args.batch[0]}"]
    print(
        "  target verify [B, L+1]: "
        + ", ".join(
            f"B={B} {ms[f'target verify B={B}']:.1f} ms ({ms[f'target verify B={B}'] / b1:.2f}x)"
            for B in args.batch
        )
    )
    # verify pass = target forward over L+1 tokens + plain head + greedy decision (verify_round computes the plain
    # head itself, so the forward's own head is counted once)
    verify_pass = ms[f"target n={L + 1}"] + ms["decide greedy"] - ms["lm head"]
    print(f"  plain LM head over L+1 positions: {ms['lm head']:.1f} ms")
    for name in ("dm_js", "dm_naive"):
        extra = ms[f"decide {name}"] - ms["decide greedy"]
        print(
            f"  decision {name}: {ms[f'decide {name}']:.1f} ms vs greedy {ms['decide greedy']:.1f} ms: "
            f"overhead {extra:.1f} ms = {100 * extra / verify_pass:.1f}% of the verify pass ({verify_pass:.1f} ms)"
        )
    a, sd = args.audit_share, ms["decide greedy"]
    sp, au = ms["decide dm_js_sparse"], ms["decide dm_js_sparse_audited"]
    amortised = (1 - a) * sp + a * au - sd
    print(
        f"  decision dm_js sparse top-{args.sparse_top_n}: {sp:.1f} ms: overhead {sp - sd:.1f} ms = "
        f"{100 * (sp - sd) / verify_pass:.1f}% of the verify pass; an audited round {au:.1f} ms"
    )
    print(
        f"  decision dm_js sparse + exact audit of {100 * a:g}% of rounds, amortised: overhead {amortised:.1f} ms "
        f"= {100 * amortised / verify_pass:.1f}% of the verify pass"
    )
    del pair, tkv, dkv, fns
    from runners.models import loader

    loader._LOADED.clear()
    gc.collect()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--L", type=int, default=5)
    ap.add_argument("--K", type=int, default=5)
    ap.add_argument("--p-drop", type=float, default=0.3)
    ap.add_argument("--batch", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 8])
    ap.add_argument("--sparse-top-n", type=int, default=64)
    ap.add_argument("--audit-share", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=8)
    args = ap.parse_args()
    from runners.paths import cpu_threads

    torch.set_num_threads(cpu_threads())
    for dtype in args.dtypes.split(","):
        measure(dtype, args)


if __name__ == "__main__":
    main()
