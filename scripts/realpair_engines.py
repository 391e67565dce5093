"""Real-pair engines side by side (llama.cpp on the GGUF vs transformers float32), one process: not a test.

On the first ``--n`` GSM8K test items (8-shot chat prompt, as ``conf/dataset/gsm8k.yaml``), greedy, ``--max-new``
tokens, L = ``--L``:
  1. costs, the target alone after a real prompt (its KV context), medians over ``--repeats``, engines interleaved:
     one decode step (1 token) and one verify pass (L+1 tokens), each with what the loop computes with it
     (llama.cpp: logits + final hidden states; transformers: hidden states + the plain LM head);
     llama.cpp's verify over [B, L+1] for B in ``--batch``;
  2. decoding through the backends: llama.cpp AR, SD (greedy_match) and SD+DM (dropmatch_js, K=5, p_drop=0.3) at
     B = 1 (DM: the default profile's sparse top-64 with a 5% exact audit; ``--dm-exact`` also the exact rule),
     AR at each B of ``--batch`` (aggregate tokens / share seconds), transformers float32 AR (and ``--hf-sd``)
     at B = 1; tokens/s = tokens / generation seconds (prefill excluded), per item and in total;
  3. greedy SD vs AR on llama.cpp token for token; at a first divergence, the engine's top-2 logit gap there
     (a fresh single-sequence decode of prompt + common prefix).
Load the real pair only under the machine-wide lock:

    flock /tmp/dropmatch-realpair.lock env PYTHONPATH=$PWD DROPMATCH_THREADS=2 \\
        .venv/bin/python scripts/realpair_engines.py --n 4 --max-new 64 --batch 1,8
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as runners/main.py: before torch loads OpenMP

import torch  # noqa: E402


def load_samples(n: int):
    from omegaconf import OmegaConf

    import runners.datasets  # noqa: F401
    from runners.paths import REPO_ROOT
    from runners.registry import DATASETS, build

    dcfg = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf/dataset/gsm8k.yaml"))
    dataset = build(DATASETS, {**dcfg, "limit": n})
    return dataset.load(), list(dataset.stop or [])


def pair_cfg() -> dict:
    from omegaconf import OmegaConf

    from runners.paths import REPO_ROOT

    return OmegaConf.to_container(
        OmegaConf.load(REPO_ROOT / "conf/pair/qwen25coder_0.5b_1.5b.yaml")
    )


def rate(results) -> tuple[float, list[float]]:
    """(total tokens / total seconds, per-item tokens/s); seconds = share_s (= wall_s at B = 1)."""
    tok = sum(r.num_output_tokens for r in results)
    sec = sum((r.share_s if r.share_s is not None else r.wall_s) for r in results)
    return tok / sec, [r.num_output_tokens / r.wall_s for r in results]


def median_ms(fns: dict, warmup: int, repeats: int) -> dict[str, float]:
    out: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(warmup + repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if r >= warmup:
                out[k].append(time.perf_counter() - t0)
    return {k: 1e3 * statistics.median(v) for k, v in out.items()}


@torch.inference_mode()
def costs(prompt: list[int], args, hf_pair) -> None:
    from runners.backends.kv_state import KVState
    from runners.backends.llamacpp_context import Feed, GGUFModel, SeqContext
    from runners.models.sources import gguf_file

    L = args.L
    fns = {}
    for repack in args.repack:
        model = GGUFModel.load(gguf_file(pair_cfg()["target"]), repack)
        eng = "llama.cpp" + (" repack" if repack else "")
        for B in sorted(set([1, *args.batch])):
            ctx = SeqContext(model, n_seq=B, n_ctx=len(prompt) + 64, hidden=True)
            ctx.decode([Feed(0, p, t, False) for p, t in enumerate(prompt)], hidden=False)
            for s in range(1, B):  # the same context in every sequence (a KV copy, not B prefills)
                ctx.copy(0, s, len(prompt))
            n0 = len(prompt)
            for n in (1, L + 1) if B == 1 else (L + 1,):

                def step(ctx=ctx, n=n, B=B, n0=n0) -> None:
                    ctx.decode(
                        [Feed(s, n0 + j, 1000 + j, True) for s in range(B) for j in range(n)]
                    )
                    for s in range(B):
                        ctx.truncate(s, n0)

                fns[f"{eng} B={B} n={n}"] = step
    if hf_pair is not None:
        st = KVState(hf_pair.target)
        st.prefill(prompt)
        n0 = st.length
        for n in (1, L + 1):

            def hf_step(n=n, n0=n0) -> None:
                st.logits(st.forward([1000 + j for j in range(n)]))
                st.rollback(n0)

            fns[f"transformers float32 B=1 n={n}"] = hf_step
    ms = median_ms(fns, args.warmup, args.repeats)
    print(f"== costs: target alone, context {len(prompt)} tokens, median of {args.repeats}")
    for eng in ("llama.cpp", "llama.cpp repack", "transformers float32"):
        if f"{eng} B=1 n=1" in ms:
            d, v = ms[f"{eng} B=1 n=1"], ms[f"{eng} B=1 n={L + 1}"]
            print(
                f"  {eng}: decode {d:.1f} ms, verify(L+1={L + 1}) {v:.1f} ms = {v / d:.2f}x decode"
            )
    if "transformers float32 B=1 n=1" in ms:
        r = ms["transformers float32 B=1 n=1"] / ms["llama.cpp B=1 n=1"]
        print(f"  decode step: transformers float32 / llama.cpp = {r:.2f}x")
    for eng in ("llama.cpp", "llama.cpp repack"):
        for B in args.batch:
            if B > 1 and f"{eng} B={B} n={L + 1}" in ms:
                v = ms[f"{eng} B={B} n={L + 1}"]
                print(
                    f"  {eng} verify [B={B}, L+1]: {v:.1f} ms = {v / ms[f'{eng} B=1 n={L + 1}']:.2f}x B=1"
                )


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def engine_gap(ids: list[int]) -> tuple[float, list[int]]:
    """llama.cpp's top-2 logit gap of the target after ``ids`` (fresh single sequence, last token alone)."""
    from runners.backends.llamacpp_context import Feed, GGUFModel, SeqContext
    from runners.models.sources import gguf_file

    ctx = SeqContext(GGUFModel.load(gguf_file(pair_cfg()["target"])), 1, len(ids) + 8)
    ctx.decode([Feed(0, p, t, False) for p, t in enumerate(ids[:-1])])
    logits, _ = ctx.decode([Feed(0, len(ids) - 1, ids[-1], True)])
    top = torch.from_numpy(logits[-1]).topk(2)
    return float(top.values[0] - top.values[1]), top.indices.tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--L", type=int, default=5)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument(
        "--hf", action="store_true", help="also transformers float32 (costs and AR at B = 1)"
    )
    ap.add_argument("--hf-sd", action="store_true", help="also transformers float32 SD at B = 1")
    ap.add_argument("--skip-costs", action="store_true")
    ap.add_argument(
        "--dm-exact", action="store_true", help="also DropMatch's exact rule on llama.cpp"
    )
    ap.add_argument(
        "--repack", default="0", help="llama.cpp weight repacking in the costs: 0, 1 or 0,1"
    )
    ap.add_argument(
        "--repack-decode", action="store_true", help="also AR / SD decoding with repacking on"
    )
    args = ap.parse_args()
    args.batch = [int(b) for b in args.batch.split(",")]
    args.repack = [bool(int(x)) for x in args.repack.split(",")]

    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends.base import DecodingConfig
    from runners.backends.llamacpp_loop import LlamaCppBackend
    from runners.models.dtype import cpu_flags
    from runners.models.loader import load_pair

    flags = cpu_flags()
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    print(f"cpu: {os.cpu_count()} threads, flags {' '.join(isa)}; load {os.getloadavg()}")
    n_max = max([args.n, *args.batch])
    samples, stop = load_samples(n_max)
    lc_pair = load_pair(pair_cfg(), load_weights=False)
    hf_pair = load_pair({**pair_cfg(), "dtype": "float32"}) if (args.hf or args.hf_sd) else None
    be = LlamaCppBackend(lc_pair)
    prompts = {s.sample_id: be.encode(s) for s in samples}
    print(f"GSM8K items: {n_max}; prompt tokens {[len(p) for p in prompts.values()]}")
    if not args.skip_costs:
        costs(prompts[samples[0].sample_id], args, hf_pair)

    AR, SD = CRITERIA.get("autoregressive")(), CRITERIA.get("greedy_match")()
    DM, heads = CRITERIA.get("dropmatch_js")(), HeadSpec(5, 0.3)
    # the default profile's decision: the sparse variant (top-64), 5% of rounds audited by the exact rule
    sparse = HeadSpec(5, 0.3, top_n=64, audit_share=0.05)

    def dec(L: int) -> DecodingConfig:
        return DecodingConfig(num_speculative_tokens=L, max_new_tokens=args.max_new, stop=stop)

    def go(backend, name, L, rule, hs=HeadSpec(), B=1, items=None):
        items = items or samples[: args.n]
        t0 = time.perf_counter()
        out = {r.sample_id: r for r in backend.generate(items, dec(L), rule, hs, batch_size=B)}
        total, per = rate(list(out.values()))
        drafts = sum(r.counters.num_drafts for r in out.values())
        acc = sum(r.counters.num_accepted_tokens for r in out.values())
        tau = 1 + acc / drafts if drafts else 1.0
        crit = sum(r.criterion_s for r in out.values()) / max(
            1e-9, sum(r.verify_s for r in out.values())
        )
        print(
            f"  {name:34s} B={B}: {total:6.2f} tok/s (per item {', '.join(f'{x:.2f}' for x in per)}), "
            f"tau {tau:.2f}, decision/verify {100 * crit:.1f}%, {time.perf_counter() - t0:.0f} s with prefill",
            flush=True,
        )
        return out

    go(be, "warm-up llama.cpp", 0, AR, items=samples[:1])
    print(f"== decoding, {args.n} items, {args.max_new} new tokens max, L={args.L}")
    lc_ar = go(be, "llama.cpp AR", 0, AR)
    lc_sd = go(be, "llama.cpp SD", args.L, SD)
    dm = go(be, "llama.cpp SD+DM sparse-64 + 5% audit", args.L, DM, sparse)
    audit = [r.audit for r in dm.values() if r.audit]
    print(
        f"  audit: {sum(a['rounds'] for a in audit)} rounds audited, same verdict at "
        f"{sum(a['positions_equal'] for a in audit)}/{sum(a['positions'] for a in audit)} positions"
    )
    if args.dm_exact:
        go(be, "llama.cpp SD+DM exact", args.L, DM, heads)
    if args.repack_decode:
        rp = LlamaCppBackend(lc_pair, repack=True)
        go(rp, "warm-up llama.cpp repack", 0, AR, items=samples[:1])
        rp_ar = go(rp, "llama.cpp repack AR", 0, AR)
        rp_sd = go(rp, "llama.cpp repack SD", args.L, SD)
        same = sum(rp_ar[k].output_token_ids == rp_sd[k].output_token_ids for k in rp_ar)
        print(f"  repack: greedy SD == AR on {same}/{len(rp_ar)} items")
    if hf_pair is not None:
        from runners.backends.hf_loop import HFLoopBackend

        hf = HFLoopBackend(hf_pair)
        hf_ar = go(hf, "transformers float32 AR", 0, AR)
        per = [
            lc_ar[k].num_output_tokens / lc_ar[k].wall_s / (v.num_output_tokens / v.wall_s)
            for k, v in hf_ar.items()
        ]
        print(
            f"  llama.cpp AR / transformers float32 AR per item: {', '.join(f'{x:.2f}' for x in per)}"
        )
        if args.hf_sd:
            go(hf, "transformers float32 SD", args.L, SD)
    for B in args.batch:
        if B > 1:
            items = samples[:B]
            one = go(be, "llama.cpp AR (the B items)", 0, AR, items=items)
            many = go(be, "llama.cpp AR", 0, AR, B=B, items=items)
            r1, rB = rate(list(one.values()))[0], rate(list(many.values()))[0]
            same = sum(one[k].output_token_ids == many[k].output_token_ids for k in one)
            print(f"  aggregate B={B} / B=1: {rB / r1:.2f}x; outputs identical {same}/{len(one)}")
    print("== greedy SD vs AR on llama.cpp")
    for k, ar in lc_ar.items():
        i = first_divergence(ar.output_token_ids, lc_sd[k].output_token_ids)
        if i is None:
            print(f"  {k}: identical ({len(ar.output_token_ids)} tokens)")
        else:
            gap, top = engine_gap(prompts[k] + ar.output_token_ids[:i])
            print(f"  {k}: first divergence at token {i}: top-2 logit gap {gap:.4f} (tokens {top})")


if __name__ == "__main__":
    main()
