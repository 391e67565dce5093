"""Analytic cost model of one verify step (FLOPs and bytes moved per component), from a model's dimensions.

Paper: DropMatch (arXiv 2603.03333) Sec. 4.1, Table 4 (Llama-3.1-70B-Instruct, batch 1, n_input = 5,
p_drop = 0.3: LM head 0.05% of the full forward; MC dropout + JS divergence 1.64% in total).

Pure arithmetic, no model: the measured timings come from the ``method=latency`` run records
(``runners/measure/latency.py``), which also store the target's dimensions (``model/dims``), so Table 4 reads
the CPU percentages next to these ratios (batch-1 decoding is bound by bytes moved, not FLOPs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Public config.json of meta-llama/Llama-3.1-70B-Instruct (the paper's Table 4 model), bf16.
LLAMA31_70B = {
    "name": "meta-llama/Llama-3.1-70B-Instruct",
    "hidden_size": 8192,
    "num_hidden_layers": 80,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "bytes_per_param": 2,
}

# Elementwise cost constants of the JS test, per vocabulary entry (see analytic_costs).
JS_FLOPS_PER_ELEMENT = 20
JS_PASSES_PER_ELEMENT = 8


def model_dims(config: Any) -> dict:
    """The config fields :func:`analytic_costs` needs, from a transformers config or a plain dict."""
    if isinstance(config, Mapping):
        get = config.get
    else:

        def get(k: str, d: Any = None) -> Any:
            return getattr(config, k, d)

    heads = int(get("num_attention_heads"))
    d = int(get("hidden_size"))
    return {
        "hidden_size": d,
        "num_hidden_layers": int(get("num_hidden_layers")),
        "intermediate_size": int(get("intermediate_size")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("num_key_value_heads") or heads),
        "head_dim": int(get("head_dim") or d // heads),
        "vocab_size": int(get("vocab_size")),
        "tie_word_embeddings": bool(get("tie_word_embeddings", False)),
    }


def analytic_costs(
    config: Any, *, n_input: int = 5, K: int = 5, context: int = 256, bytes_per_param: int = 4
) -> dict:
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
    d, Lyr, V, H, Hk, hd, d_ff = (
        m["hidden_size"],
        m["num_hidden_layers"],
        m["vocab_size"],
        m["num_attention_heads"],
        m["num_key_value_heads"],
        m["head_dim"],
        m["intermediate_size"],
    )
    n, bpp = n_input, bytes_per_param
    layer = (
        d * H * hd + 2 * d * Hk * hd + H * hd * d + 3 * d * d_ff
    )  # attention + gated MLP weights
    head = V * d
    params = Lyr * layer + head + (0 if m["tie_word_embeddings"] else V * d)
    attn_flops = Lyr * 4 * n * (context + n) * H * hd
    kv_bytes = Lyr * 2 * (context + n) * Hk * hd * bpp
    full = {
        "flops": 2.0 * n * (Lyr * layer + head) + attn_flops,
        "bytes": float(bpp * (Lyr * layer + head) + kv_bytes + 4 * n * V),
    }
    lm = {"flops": 2.0 * n * head, "bytes": float(bpp * head + 4 * n * V)}
    mc = {"flops": 2.0 * n * K * head + n * K * d, "bytes": float(4 * n * K * V + n * K * d)}
    Ld = n - 1
    js = {
        "flops": float(JS_FLOPS_PER_ELEMENT * Ld * (K + 1) * V),
        "bytes": float(4 * JS_PASSES_PER_ELEMENT * Ld * (K + 1) * V),
    }
    return {
        "params": int(params),
        "full_forward": full,
        "lm_head": lm,
        "mc_dropout_heads": mc,
        "js_divergence": js,
    }
