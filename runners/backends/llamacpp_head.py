"""The GGUF's output head in float32, for the MC-dropout heads (DropMatch, Eq. 3) next to llama.cpp's own logits.

llama.cpp returns the plain logits and the final normed hidden states of the verify pass; the K dropout heads need
``W [V, d]`` applied to dropped hidden states, which llama.cpp cannot do. The weight llama.cpp uses is dequantised
here from the same GGUF (``output.weight``, or ``token_embd.weight`` when the embeddings are tied, as llama.cpp
itself falls back), so the heads read the engine's own weights. Only runs with active heads load it (V x d float32:
0.93 GB for the embedded 1.5B target).
"""

from __future__ import annotations

from pathlib import Path

import torch

from criteria.dropout_heads import LMHead

_WEIGHTS: dict[tuple[str, int], torch.Tensor] = {}


def gguf_lm_head(path: str | Path, vocab_size: int | None = None) -> LMHead:
    """The output head of the GGUF at ``path`` as an :class:`LMHead` (weight ``[V_rows, d]`` float32, no bias).

    ``vocab_size`` V: the shared tokenizer's vocabulary; the head's rows beyond it are padding and are cut
    (:meth:`criteria.dropout_heads.LMHead.rows`), as the engine's logits are. None: all rows.
    The dequantised weight is cached per process (by path and size).

    Raises:
        ValueError: the file has neither ``output.weight`` nor ``token_embd.weight``.
    """
    key = (str(Path(path).resolve()), Path(path).stat().st_size)
    if key not in _WEIGHTS:
        import gguf
        import numpy as np

        reader = gguf.GGUFReader(str(path))
        by_name = {t.name: t for t in reader.tensors}
        t = by_name.get("output.weight") or by_name.get("token_embd.weight")
        if t is None:
            raise ValueError(f"{path}: no output.weight or token_embd.weight tensor")
        w = gguf.quants.dequantize(t.data, t.tensor_type)  # [V, d] (GGUF dims reversed)
        w = np.array(w, dtype=np.float32, copy=True).reshape(int(t.shape[1]), int(t.shape[0]))
        _WEIGHTS[key] = torch.from_numpy(w)
    return LMHead(_WEIGHTS[key], vocab_size=vocab_size)
