"""Write a transformers Qwen2 checkpoint as a GGUF file that llama.cpp loads (tests: the tiny pair as GGUF).

The layout is llama.cpp's for the ``qwen2`` architecture (``gguf.MODEL_TENSORS[MODEL_ARCH.QWEN2]``): tensor names
from ``gguf.TensorNameMap``, hyperparameters under ``qwen2.*``, the byte-level BPE vocabulary as
``tokenizer.ggml.{model=gpt2, pre=qwen2, tokens, token_type, merges}``. Qwen2 uses rotate-half RoPE (llama.cpp's
NEOX mode), so unlike Llama the query/key rows are written as they are, without llama.cpp's interleave permutation.

    python -m runners.models.gguf_export /tmp/tiny_pair/target /tmp/tiny_pair/target/model.gguf --type f32
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from runners.sweep.console import console

logger = logging.getLogger(__name__)

TYPES = ("f32", "f16", "q8_0")


def _vocab(tokenizer, rows: int) -> tuple[list[str], list[int], list[str]]:
    """Tokens by id, their GGUF token types (1 normal, 3 control) and the BPE merges as ``"a b"`` strings.

    ``rows``: the embedding's rows; ids the tokenizer lacks (a padded head) are named ``[PAD<id>]``, as llama.cpp's
    own converter names Qwen2's padding, so the token list covers every row."""
    import gguf

    n = max(len(tokenizer), int(rows))
    by_id = {i: t for t, i in tokenizer.get_vocab().items()}
    special = {int(i) for i in tokenizer.all_special_ids}
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(n)]
    types = [
        int(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL) for i in range(n)
    ]
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    return tokens, types, merges


def export_qwen2(model_dir: str | Path, out: str | Path, qtype: str = "f32") -> Path:
    """Write ``model_dir`` (a Qwen2ForCausalLM + tokenizer) to the GGUF file ``out``.

    Args:
        model_dir: a transformers directory (``config.json`` with ``model_type: qwen2``, weights, tokenizer).
        out: the GGUF path to write.
        qtype: ``f32``, ``f16`` (2-D weights in float16) or ``q8_0`` (2-D weights quantised to Q8_0 by
            ``gguf.quants``; norms and biases stay float32, as llama.cpp's own converter keeps 1-D tensors).

    Returns:
        ``out``.

    Raises:
        ValueError: an unknown ``qtype`` (names the allowed values) or a model that is not Qwen2.
    """
    import gguf
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if qtype not in TYPES:
        raise ValueError(f"qtype={qtype!r} is invalid; allowed: {', '.join(TYPES)}")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    cfg = model.config
    if cfg.model_type != "qwen2":
        raise ValueError(f"{model_dir}: model_type={cfg.model_type!r}; only qwen2 is supported")
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    arch = gguf.MODEL_ARCH.QWEN2
    names = gguf.TensorNameMap(arch, cfg.num_hidden_layers)
    file_type = {
        "f32": gguf.LlamaFileType.ALL_F32,
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    }[qtype]

    w = gguf.GGUFWriter(str(out), gguf.MODEL_ARCH_NAMES[arch])
    _write_metadata(w, model, tok, Path(model_dir).name, file_type)

    for hf_name, t in model.state_dict().items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue  # tied: llama.cpp reads the output head from token_embd
        stem, suffix = hf_name.rsplit(".", 1)
        name = names.get_name(stem)
        if name is None:
            raise ValueError(f"{model_dir}: tensor {hf_name!r} has no GGUF name for qwen2")
        data = t.detach().to(torch.float32).numpy()
        if data.ndim == 2 and qtype == "f16":
            w.add_tensor(f"{name}.{suffix}", data.astype(np.float16))
        elif data.ndim == 2 and qtype == "q8_0":
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(
                f"{name}.{suffix}", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0
            )
        else:
            w.add_tensor(f"{name}.{suffix}", data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(out)


def _write_metadata(w: Any, model: Any, tok: Any, name: str, file_type: Any) -> None:
    """The GGUF key-values llama.cpp reads for a Qwen2 model: hyper-parameters, file type and the BPE vocabulary."""
    cfg = model.config
    w.add_name(name)
    w.add_context_length(int(cfg.max_position_embeddings))
    w.add_embedding_length(int(cfg.hidden_size))
    w.add_block_count(int(cfg.num_hidden_layers))
    w.add_feed_forward_length(int(cfg.intermediate_size))
    w.add_head_count(int(cfg.num_attention_heads))
    w.add_head_count_kv(int(cfg.num_key_value_heads))
    w.add_rope_freq_base(
        float(getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"])
    )
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_file_type(int(file_type))
    tokens, types, merges = _vocab(tok, int(model.get_input_embeddings().weight.shape[0]))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(int(tok.eos_token_id))
    if tok.pad_token_id is not None:
        w.add_pad_token_id(int(tok.pad_token_id))
    w.add_add_bos_token(False)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--type", default="f32", choices=TYPES)
    a = ap.parse_args()
    console()
    logger.info("wrote %s", export_qwen2(a.model_dir, a.out, a.type))


if __name__ == "__main__":
    main()
