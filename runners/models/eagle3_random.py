"""A randomly initialised EAGLE-3 head, in vLLM's / the official EAGLE checkpoint format, for a local target.

Paper: DropMatch Sec. 4.4 (Table 7) and 4.5 (Table 10) use the trained head yuhuili/EAGLE3-LLaMA3.3-
Instruct-70B; no trained EAGLE-3 head exists for the embedded Qwen2.5-Coder-1.5B target, so the embedded
EAGLE-3 pair drafts with this head: MECHANISM ONLY (its acceptance and speed mean nothing; every table
built from such runs says so).

Layout (Li et al. 2025, EAGLE-3; vLLM ``llama_eagle3.py``): one Llama decoder layer ``midlayer.*`` whose
attention input is ``[embeds ; hidden]`` (2d), ``fc`` mapping the target's three auxiliary hidden states
(3d) to d, ``norm``, ``lm_head`` over the full target vocabulary (``draft_vocab_size == vocab_size``, so
no ``d2t`` / ``t2d`` maps). ``embed_tokens`` and ``lm_head`` are copied from the target (so drafted ids
are real vocabulary items); every other matrix is N(0, 0.02) from ``torch.Generator().manual_seed(seed)``,
norms are ones. The result is deterministic for (target weights, seed, shape arguments).

Built once into the cache by the pair source ``built`` (``runners.models.sources``)::

    draft:
      order: [local, built]
      built: {builder: "runners.models.eagle3_random:build_from_spec", target: ${pair.target}, seed: 0}

or by hand: ``python -m runners.models.eagle3_random TARGET_DIR OUT_DIR``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from runners.models.sources import resolve_model_dir
from runners.paths import cache_dir

logger = logging.getLogger(__name__)

MARKER = "eagle3_random.json"  # written last: the build finished (and records its arguments)
NOTE = "EAGLE3 head: random init (mechanism check, not a speed claim)"


def build_eagle3_head(
    target_dir: str | Path,
    out_dir: str | Path,
    *,
    seed: int = 0,
    intermediate_size: int = 2048,
    use_aux_hidden_state: bool = True,
    aux_layer_ids: list[int] | None = None,
    log=logger.info,
) -> Path:
    """Write ``config.json`` + ``model.safetensors`` of a random EAGLE-3 head for ``target_dir`` into ``out_dir``.

    Args:
        target_dir: a local HF directory of the target (config.json + safetensors).
        out_dir: created if missing; an existing finished build (``eagle3_random.json``) is reused.
        seed: seed of the N(0, 0.02) init.
        intermediate_size: MLP width of the head's single layer.
        use_aux_hidden_state: EAGLE-3's fused low/mid/high target features (``fc``: 3d -> d); False
            feeds only the last hidden state (EAGLE-1 style).
        aux_layer_ids: target layers whose inputs are fused (``eagle_config.eagle_aux_hidden_state_layer_ids``);
            None: vLLM's default ``(2, n // 2, n - 3)`` for an n-layer target, which repeats a layer when
            n < 8 (6 layers: (2, 3, 3), two distinct states, and ``combine_hidden_states`` then fails with
            "shape '[-1, 3d]' is invalid"): give distinct ids for tiny targets.

    Returns:
        ``out_dir``.
    """
    target_dir, out = Path(target_dir), Path(out_dir)
    args = {
        "seed": int(seed),
        "intermediate_size": int(intermediate_size),
        "use_aux_hidden_state": bool(use_aux_hidden_state),
        "target": str(target_dir),
        "aux_layer_ids": None if aux_layer_ids is None else [int(i) for i in aux_layer_ids],
    }
    if (out / MARKER).exists() and json.loads((out / MARKER).read_text()).get("args") == args:
        return out
    out.mkdir(parents=True, exist_ok=True)
    tcfg = json.loads((target_dir / "config.json").read_text())
    cfg = head_config(tcfg, int(intermediate_size), use_aux_hidden_state, aux_layer_ids)
    n_aux = (3 if aux_layer_ids is None else len(aux_layer_ids)) if use_aux_hidden_state else None
    w = head_weights(target_embeddings(target_dir), cfg, n_aux, int(seed))
    log(
        f"[eagle3_random] building a random EAGLE-3 head for {target_dir.name} into {out} (seed {seed})"
    )
    save_file({k: v.contiguous() for k, v in w.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
    ):
        if (target_dir / name).exists():
            (out / name).write_bytes((target_dir / name).read_bytes())
    (out / MARKER).write_text(json.dumps({"args": args, "note": NOTE}))
    return out


def target_embeddings(target_dir: Path) -> dict[str, torch.Tensor]:
    """The target's ``model.embed_tokens.weight`` and ``lm_head.weight`` (float32; the embeddings when tied)."""
    copied: dict[str, torch.Tensor] = {}
    for f in sorted(target_dir.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for name in st.keys():
                if name in ("model.embed_tokens.weight", "lm_head.weight"):
                    copied[name] = st.get_tensor(name).float().clone()
    if "lm_head.weight" not in copied:  # tied embeddings
        copied["lm_head.weight"] = copied["model.embed_tokens.weight"]
    return copied


def head_weights(
    copied: Mapping[str, torch.Tensor], cfg: Mapping[str, Any], n_aux: int | None, seed: int
) -> dict[str, torch.Tensor]:
    """The head's tensors: embeddings and LM head copied, norms ones, every other matrix N(0, 0.02) drawn in
    this order from ``torch.Generator().manual_seed(seed)``; ``fc`` [d, n_aux * d] unless ``n_aux`` is None."""
    d, d_ff = cfg["hidden_size"], cfg["intermediate_size"]
    q, kv = (
        cfg["num_attention_heads"] * cfg["head_dim"],
        cfg["num_key_value_heads"] * cfg["head_dim"],
    )
    g = torch.Generator().manual_seed(int(seed))

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.02

    w = {
        "embed_tokens.weight": copied["model.embed_tokens.weight"],
        "lm_head.weight": copied["lm_head.weight"].clone(),
        "norm.weight": torch.ones(d),
        "midlayer.hidden_norm.weight": torch.ones(d),
        "midlayer.input_layernorm.weight": torch.ones(d),
        "midlayer.post_attention_layernorm.weight": torch.ones(d),
        "midlayer.self_attn.q_proj.weight": rnd(q, 2 * d),
        "midlayer.self_attn.k_proj.weight": rnd(kv, 2 * d),
        "midlayer.self_attn.v_proj.weight": rnd(kv, 2 * d),
        "midlayer.self_attn.o_proj.weight": rnd(d, q),
        "midlayer.mlp.gate_proj.weight": rnd(d_ff, d),
        "midlayer.mlp.up_proj.weight": rnd(d_ff, d),
        "midlayer.mlp.down_proj.weight": rnd(d, d_ff),
    }
    if n_aux is not None:
        w["fc.weight"] = rnd(d, n_aux * d)
    return w


def head_config(
    tcfg: Mapping[str, Any],
    intermediate_size: int,
    use_aux_hidden_state: bool,
    aux_layer_ids: list[int] | None,
) -> dict:
    """The head's ``config.json`` (``LlamaForCausalLMEagle3``, one layer) from the target's config."""
    d, V = int(tcfg["hidden_size"]), int(tcfg["vocab_size"])
    n_heads = int(tcfg["num_attention_heads"])
    n_kv = int(tcfg.get("num_key_value_heads", tcfg["num_attention_heads"]))
    eagle_config: dict[str, Any] = {"use_aux_hidden_state": bool(use_aux_hidden_state)}
    if aux_layer_ids is not None:
        eagle_config["eagle_aux_hidden_state_layer_ids"] = [int(i) for i in aux_layer_ids]
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": d,
        "intermediate_size": int(intermediate_size),
        "num_hidden_layers": 1,
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv,
        "head_dim": int(tcfg.get("head_dim") or d // n_heads),
        "vocab_size": V,
        "draft_vocab_size": V,
        "max_position_embeddings": int(tcfg.get("max_position_embeddings", 4096)),
        "rms_norm_eps": float(tcfg.get("rms_norm_eps", 1e-6)),
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "rope_theta": float(
            (tcfg.get("rope_parameters") or {}).get("rope_theta") or tcfg.get("rope_theta", 10000.0)
        ),
        "torch_dtype": "float32",
        "bos_token_id": tcfg.get("bos_token_id"),
        "eos_token_id": tcfg.get("eos_token_id"),
        "target_hidden_size": d,
        "eagle_config": eagle_config,
        "_note": NOTE,
    }


def build_from_spec(spec: Mapping[str, Any], log=logger.info) -> str:
    """Pair-source hook: resolve ``spec['built']['target']`` and build (once) the head under the cache."""

    b = dict(spec["built"])
    target_dir = resolve_model_dir(b["target"], log=log)
    kw = {
        k: b[k]
        for k in ("seed", "intermediate_size", "use_aux_hidden_state", "aux_layer_ids")
        if b.get(k) is not None
    }
    key = hashlib.sha256(
        json.dumps({"t": str(target_dir), **kw}, sort_keys=True).encode()
    ).hexdigest()[:12]
    out = cache_dir() / "models" / f"{str(spec['name']).replace('/', '--')}-{key}"
    return str(build_eagle3_head(target_dir, out, log=log, **kw))


if __name__ == "__main__":
    import sys

    from runners.sweep.console import console

    console()
    logger.info("%s", build_eagle3_head(sys.argv[1], sys.argv[2]))
