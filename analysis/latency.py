"""Forward-latency split of one verification step: full target forward, LM head, K MC-dropout heads, JS test.

Paper: DropMatch (arXiv 2603.03333) Sec. 4.1, Table 4 (Llama-3.1-70B-Instruct, batch 1, n_input = 5,
p_drop = 0.3: LM head 0.05% of the full forward; MC dropout + JS divergence 1.64% in total).

Measured with the functions the HF loop calls, on a target whose KV cache holds ``context`` tokens:
  - full forward: ``KVState.forward`` over n_input tokens + the plain LM head (``KVState.logits``), then
    the cache is cropped back (what one verify pass of SD costs);
  - LM head: ``KVState.logits`` on the n_input final hidden states ``[n, d] -> [n, V]``;
  - MC-dropout heads: ``criteria.dropout_heads.dropout_head_logits`` with K heads (one matmul giving the
    plain row and the K dropout rows, ``[n, 1+K, V]``); its extra cost is this minus the LM head;
  - JS computation: ``criteria.dropmatch_base.js_statistics`` (centroid, K head and draft JS, Eq. 5-6)
    over the L = n_input - 1 draft positions, as in the loop;
  - DropMatch criterion: the whole ``dropmatch_js`` rule call (head tokens, JS, majority, Algorithm 1).
Each repeat runs the components back to back (round-robin), so load from other processes hits them alike;
``warmup`` repeats are discarded. ``torch.cuda.synchronize`` brackets every timing on a GPU.

``analytic_costs`` gives FLOP and byte counts of the same components from a model config, so the CPU
percentages can be read against the GPU ones (batch-1 decoding is bound by bytes moved, not FLOPs).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

# Public config.json of meta-llama/Llama-3.1-70B-Instruct (the paper's Table 4 model), bf16.
LLAMA31_70B = {"name": "meta-llama/Llama-3.1-70B-Instruct", "hidden_size": 8192, "num_hidden_layers": 80,
               "intermediate_size": 28672, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
               "vocab_size": 128256, "tie_word_embeddings": False, "bytes_per_param": 2}

COMPONENTS = ("full_forward", "lm_head", "mc_dropout_heads", "js_divergence", "dropmatch_criterion")
# Elementwise cost constants of the JS test, per vocabulary entry (see analytic_costs).
JS_FLOPS_PER_ELEMENT = 20
JS_PASSES_PER_ELEMENT = 8


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class LatencySamples:
    """Seconds per repeat of each component (warm-up excluded)."""

    seconds: dict[str, list[float]]
    n_input: int
    K: int
    p_drop: float
    context: int
    device: str

    def median(self, name: str) -> float:
        return statistics.median(self.seconds[name])

    def quantile(self, name: str, q: float) -> float:
        xs = sorted(self.seconds[name])
        pos = q * (len(xs) - 1)
        lo, hi = int(pos), min(int(pos) + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@torch.inference_mode()
def measure(model: Any, *, n_input: int = 5, K: int = 5, p_drop: float = 0.3, context: int = 256,
            warmup: int = 3, repeats: int = 20, seed: int = 0, log: Callable[[str], None] = print) -> LatencySamples:
    """Time the components of one verify step of ``model`` (a transformers causal LM), batch size 1.

    Args:
        model: the target (``model.model`` returns final hidden states; see ``runners.backends.kv_state``).
        n_input: tokens fed to the forward (L + 1 in the loop: the pending token and L drafts).
        K, p_drop: MC-dropout heads and their dropout probability.
        context: tokens already in the KV cache (random ids, fixed by ``seed``).
        warmup, repeats: discarded and kept repeats.

    Returns:
        :class:`LatencySamples` with ``repeats`` timings per component in :data:`COMPONENTS`.
    """
    import criteria.rules  # noqa: F401
    from criteria.base import VerifyInputs
    from criteria.dropmatch_base import js_statistics
    from criteria.dropout_heads import dropout_head_logits
    from criteria.registry import CRITERIA
    from runners.backends.kv_state import KVState

    if n_input < 2:
        raise ValueError(f"n_input={n_input} is invalid; allowed: an integer >= 2 (pending token + >= 1 draft)")
    state = KVState(model)
    W, b = state.lm_head_weight, state.lm_head_bias
    device = W.device
    V = W.shape[0]
    g = torch.Generator().manual_seed(seed)
    vocab = int(getattr(model.config, "vocab_size", V))
    ctx_ids = torch.randint(0, vocab, (context,), generator=g).tolist()
    new_ids = torch.randint(0, vocab, (n_input,), generator=g).tolist()
    state.forward(ctx_ids)
    L = n_input - 1
    gen = torch.Generator(device=device).manual_seed(seed)
    rule = CRITERIA.get("dropmatch_js")()

    hidden = state.forward(new_ids)  # [n, d]
    state.rollback(context)
    plain = state.logits(hidden)  # [n, V]
    draft_probs = torch.softmax(plain[:L].float() + 0.5 * torch.randn(L, V, generator=g).to(device), dim=-1)  # [L, V]
    heads = dropout_head_logits(hidden, W, b, num_heads=K, p_drop=p_drop, generator=gen).float()  # [n, 1+K, V]
    head_logits = heads[None, :, 1:]  # [1, n, K, V]
    draft_tokens = draft_probs.argmax(dim=-1)[None]  # [1, L]

    def full_forward() -> None:
        h = state.forward(new_ids)
        state.logits(h)
        state.rollback(context)

    def lm_head() -> None:
        state.logits(hidden)

    def mc_heads() -> None:
        dropout_head_logits(hidden, W, b, num_heads=K, p_drop=p_drop, generator=gen)

    def js() -> None:
        js_statistics(head_logits[:, :L], draft_probs[None], 0.0)

    def criterion() -> None:
        rule(VerifyInputs(draft_token_ids=draft_tokens, target_logits=heads[None, :, 0], draft_probs=draft_probs[None],
                          head_logits=head_logits, temperature=0.0, generator=gen))

    fns = {"full_forward": full_forward, "lm_head": lm_head, "mc_dropout_heads": mc_heads, "js_divergence": js,
           "dropmatch_criterion": criterion}
    seconds: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(warmup + repeats):
        for name, fn in fns.items():
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            if r >= warmup:
                seconds[name].append(time.perf_counter() - t0)
        if r == warmup - 1:
            log(f"[table4] warm-up done ({warmup} repeats); timing {repeats} repeats")
    return LatencySamples(seconds, n_input, K, p_drop, context, str(device))


def model_dims(config: Any) -> dict:
    """The config fields :func:`analytic_costs` needs, from a transformers config or a plain dict."""
    if isinstance(config, Mapping):
        get = config.get
    else:
        def get(k: str, d: Any = None) -> Any:
            return getattr(config, k, d)
    heads = int(get("num_attention_heads"))
    d = int(get("hidden_size"))
    return {"hidden_size": d, "num_hidden_layers": int(get("num_hidden_layers")),
            "intermediate_size": int(get("intermediate_size")), "num_attention_heads": heads,
            "num_key_value_heads": int(get("num_key_value_heads") or heads),
            "head_dim": int(get("head_dim") or d // heads), "vocab_size": int(get("vocab_size")),
            "tie_word_embeddings": bool(get("tie_word_embeddings", False))}


def analytic_costs(config: Any, *, n_input: int = 5, K: int = 5, context: int = 256, bytes_per_param: int = 4) -> dict:
    """FLOPs and bytes moved per component of one verify step (batch 1), from the architecture.

    Model: decoder layers with GQA attention (q, k, v, o projections) and a gated MLP (3 matrices),
    LM head ``[V, d]``. Full forward FLOPs = 2 n (layer params + V d) + attention scores/values
    4 n (context + n) H h per layer; bytes = every weight once + the KV cache read. LM head: 2 n V d FLOPs,
    V d weights + n V outputs. MC-dropout heads (extra over the LM head): 2 n K V d FLOPs, n K V outputs
    (W is read once for all rows). JS test: ~JS_FLOPS_PER_ELEMENT flops and JS_PASSES_PER_ELEMENT float
    reads/writes per vocabulary entry of each of the K + 1 distributions at each of the L = n - 1
    positions (softmaxes, logs, centroid).

    Returns:
        ``{"params": int, "<component>": {"flops": float, "bytes": float}}`` for full_forward, lm_head,
        mc_dropout_heads (extra), js_divergence.
    """
    m = model_dims(config)
    d, Lyr, V, H, Hk, hd, I = (m["hidden_size"], m["num_hidden_layers"], m["vocab_size"], m["num_attention_heads"],
                               m["num_key_value_heads"], m["head_dim"], m["intermediate_size"])
    n, bpp = n_input, bytes_per_param
    layer = d * H * hd + 2 * d * Hk * hd + H * hd * d + 3 * d * I  # attention + gated MLP weights
    head = V * d
    params = Lyr * layer + head + (0 if m["tie_word_embeddings"] else V * d)
    attn_flops = Lyr * 4 * n * (context + n) * H * hd
    kv_bytes = Lyr * 2 * (context + n) * Hk * hd * bpp
    full = {"flops": 2.0 * n * (Lyr * layer + head) + attn_flops,
            "bytes": float(bpp * (Lyr * layer + head) + kv_bytes + 4 * n * V)}
    lm = {"flops": 2.0 * n * head, "bytes": float(bpp * head + 4 * n * V)}
    mc = {"flops": 2.0 * n * K * head + n * K * d, "bytes": float(4 * n * K * V + n * K * d)}
    Ld = n - 1
    js = {"flops": float(JS_FLOPS_PER_ELEMENT * Ld * (K + 1) * V),
          "bytes": float(4 * JS_PASSES_PER_ELEMENT * Ld * (K + 1) * V)}
    return {"params": int(params), "full_forward": full, "lm_head": lm, "mc_dropout_heads": mc, "js_divergence": js}
