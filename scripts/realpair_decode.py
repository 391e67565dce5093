"""Real-pair decoding on GSM8K items, one process: a measurement script, not a test.

For one dtype, on the first ``--n`` GSM8K test items (8-shot chat prompt, as ``conf/dataset/gsm8k.yaml``),
greedy, ``--max-new`` tokens, L = ``--L``:
  - ``--methods``: ``ar`` (L = 0), ``sd`` (greedy_match), ``dm`` (dropmatch_js), ``naive`` (dropmatch_naive), K=5,
    p_drop=0.3, through ``HFLoopBackend`` at each ``--batch`` size; tokens/s = total tokens / total wall
    (prefill excluded) at B = 1, and the aggregate total tokens / total share at B > 1 (``speed.share_s``);
  - SD vs AR token equality per item; at the first divergence, the target's top-2 logit gap at that position
    (one forward over prompt + common prefix, same dtype);
  - ``--hf``: transformers ``generate`` (AR) and assisted generation (``assistant_model`` = the draft,
    ``num_assistant_tokens`` = L, constant schedule) on the same prompts, tokens/s with the same wall definition
    (prefill included there: HF's ``generate`` cannot split it; our rates are also printed with prefill);
  - ``--attention sdpa,grouped``: each arm with PyTorch's SDPA kernel for decode and verify (the loop's
    attention before ``runners.backends.cpu_attention`` computed them as grouped matmuls) and with the grouped
    matmuls, one after the other, so a drifting host affects both alike.
Load the real pair only under the machine-wide lock:

    flock /tmp/dropmatch-realpair.lock env PYTHONPATH=$PWD DROPMATCH_THREADS=2 \\
        .venv/bin/python scripts/realpair_decode.py --dtype bfloat16 --n 3 --max-new 96 --hf
"""

from __future__ import annotations

import argparse
import os
import time

import torch


def load(dtype: str, n: int):
    from omegaconf import OmegaConf

    import runners.datasets  # noqa: F401
    from runners.models.loader import load_pair
    from runners.paths import REPO_ROOT
    from runners.registry import DATASETS, build

    cfg = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf/pair/qwen25coder_0.5b_1.5b.yaml"))
    pair = load_pair({**cfg, "dtype": dtype})
    dcfg = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf/dataset/gsm8k.yaml"))
    dataset = build(DATASETS, {**dcfg, "limit": n})
    samples = dataset.load()
    return (
        pair,
        samples,
        list(dataset.stop or []),
    )  # lm-eval's task builds the stops (as runners.run does)


@torch.inference_mode()
def logit_gap(pair, ids: list[int]) -> tuple[float, list[int]]:
    """Top-2 logit difference of the target after ``ids`` (one full forward), and the top-2 token ids."""
    out = pair.target(input_ids=torch.tensor([ids]))
    top = out.logits[0, -1].float().topk(2)
    return float(top.values[0] - top.values[1]), top.indices.tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--L", type=int, default=5)
    ap.add_argument("--methods", default="ar,sd,dm,naive")
    ap.add_argument("--batch", type=lambda s: [int(x) for x in s.split(",")], default=[1])
    ap.add_argument("--hf", action="store_true")
    ap.add_argument("--sparse-top-n", type=int, default=None)
    ap.add_argument("--attention", default="grouped", help="comma list of sdpa, grouped")
    args = ap.parse_args()

    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from runners.backends import cpu_attention
    from runners.backends.hf_loop import HFLoopBackend

    pair, samples, stops = load(args.dtype, args.n)
    print(
        f"== dtype {pair.dtype}, threads {torch.get_num_threads()}, {len(samples)} GSM8K items, "
        f"max_new_tokens {args.max_new}, L={args.L}, greedy"
    )
    methods = {
        "ar": (0, "autoregressive", HeadSpec()),
        "sd": (args.L, "greedy_match", HeadSpec()),
        "dm": (args.L, "dropmatch_js", HeadSpec(5, 0.3)),
        "naive": (args.L, "dropmatch_naive", HeadSpec(5, 0.3)),
    }
    grouped_max = cpu_attention.GROUPED_MAX_QUERY
    attentions = args.attention.split(",")
    runs: dict[tuple[str, int, str], tuple[dict, float]] = {}
    for B in args.batch:
        for m in args.methods.split(","):
            for a in attentions:  # adjacent, so host drift hits both kernels alike
                cpu_attention.GROUPED_MAX_QUERY = grouped_max if a == "grouped" else 0
                runs[(m, B, a)] = run_arm(pair, samples, stops, args, methods[m], m, B, a)
    cpu_attention.GROUPED_MAX_QUERY = grouped_max
    rates = {k: v[1] for k, v in runs.items()}
    for a in attentions:
        for B in args.batch:
            base = rates.get(("ar", B, a))
            if base:
                print(
                    f"  {a} B={B} ratios to AR: "
                    + ", ".join(
                        f"{m} {rates[(m, B, a)] / base:.2f}x"
                        for m in args.methods.split(",")
                        if (m, B, a) in rates
                    )
                )
            if B != args.batch[0]:
                print(
                    f"  {a} B={B} vs B={args.batch[0]}: "
                    + ", ".join(
                        f"{m} {rates[(m, B, a)] / rates[(m, args.batch[0], a)]:.2f}x"
                        for m in args.methods.split(",")
                    )
                )
    if len(attentions) > 1:
        for B in args.batch:
            print(
                f"  B={B} {attentions[-1]} vs {attentions[0]}: "
                + ", ".join(
                    f"{m} {rates[(m, B, attentions[-1])] / rates[(m, B, attentions[0])]:.2f}x"
                    for m in args.methods.split(",")
                )
            )
    outs = {(m, B): res for (m, B, a), (res, _) in runs.items() if a == attentions[-1]}
    for B in args.batch:
        if ("ar", B) in outs and ("sd", B) in outs:
            for s in samples:
                a, b = (
                    outs[("ar", B)][s.sample_id].output_token_ids,
                    outs[("sd", B)][s.sample_id].output_token_ids,
                )
                if a == b:
                    print(f"  B={B} {s.sample_id}: SD ids == AR ids ({len(a)} tokens)")
                    continue
                i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                prompt = HFLoopBackend(pair).encode(s)
                gap, top2 = logit_gap(pair, prompt + a[:i])
                print(
                    f"  B={B} {s.sample_id}: SD and AR differ first at output token {i} (AR {a[i] if i < len(a) else None},"
                    f" SD {b[i] if i < len(b) else None}); target top-2 logit gap there {gap:.4f} (top-2 ids {top2})"
                )
        if ("ar", 1) in outs and ("ar", B) in outs and B != 1:
            same = sum(
                outs[("ar", 1)][s.sample_id].output_token_ids
                == outs[("ar", B)][s.sample_id].output_token_ids
                for s in samples
            )
            print(f"  AR B={B} vs B=1: {same}/{len(samples)} items token-identical")
    if args.hf:
        hf_generate(pair, samples, args)


def run_arm(pair, samples, stops, args, method, m: str, B: int, a: str) -> tuple[dict, float]:
    """Decode ``samples`` with one method at batch B; print its line; return the results and tok/s."""
    import criteria.rules  # noqa: F401
    from criteria.registry import CRITERIA
    from runners.backends.base import DecodingConfig
    from runners.backends.hf_loop import HFLoopBackend

    L, crit, heads = method
    be = HFLoopBackend(pair, batch_size=B)
    dec = DecodingConfig(num_speculative_tokens=L, max_new_tokens=args.max_new, stop=stops)
    t0 = time.perf_counter()
    res = {r.sample_id: r for r in be.generate(samples, dec, CRITERIA.get(crit)(), heads)}
    total = time.perf_counter() - t0
    tokens = sum(r.num_output_tokens for r in res.values())
    wall = sum(r.wall_s for r in res.values())
    share = sum(r.share_s for r in res.values())
    prefill = sum(r.prefill_s for r in res.values())
    drafts = sum(r.counters.num_drafts for r in res.values())
    acc = sum(r.counters.num_accepted_tokens for r in res.values())
    tau = 1 + acc / drafts if drafts else 1.0
    parts = {
        k: sum(getattr(r, f"{k}_s") for r in res.values()) for k in ("draft", "verify", "criterion")
    }
    print(
        f"  {m:6s} B={B} {a}: {tokens} tokens, tau {tau:.2f}, {tokens / share:.2f} tok/s (tokens / sum share_s"
        f" {share:.1f} s; sum wall_s {wall:.1f} s), with prefill {tokens / (share + prefill):.2f} tok/s, run"
        f" {total:.1f} s; split of wall: draft {parts['draft']:.1f} s, verify {parts['verify']:.1f} s,"
        f" decide {parts['criterion']:.1f} s",
        flush=True,
    )
    return res, tokens / share


@torch.inference_mode()
def hf_generate(pair, samples, args) -> None:
    """transformers' own AR and assisted generation on the same prompts (prefill included)."""
    from runners.backends.hf_loop import HFLoopBackend

    be = HFLoopBackend(pair)
    res = {}
    for name, kw in (("hf_ar", {}), ("hf_assisted", {"assistant_model": pair.draft})):
        if "assistant_model" in kw:
            pair.draft.generation_config.num_assistant_tokens = args.L
            pair.draft.generation_config.num_assistant_tokens_schedule = "constant"
            pair.draft.generation_config.assistant_confidence_threshold = 0.0
        tokens, wall = 0, 0.0
        for s in samples:
            ids = torch.tensor([be.encode(s)])
            t0 = time.perf_counter()
            out = pair.target.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=args.max_new,
                **kw,
            )
            wall += time.perf_counter() - t0
            tokens += out.shape[1] - ids.shape[1]
        res[name] = tokens / wall
        print(
            f"  {name}: {tokens} tokens, {tokens / wall:.2f} tok/s (prefill included, no stop strings)"
        )
    print(f"  hf assisted / hf AR: {res['hf_assisted'] / res['hf_ar']:.2f}x")


if __name__ == "__main__":
    os.environ.setdefault("DROPMATCH_THREADS", str(os.cpu_count() or 1))
    main()
