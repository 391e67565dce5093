"""Load a draft/target pair (``conf/pair/*.yaml``) once per process.

Models are cached in-process by resolved directory and dtype, so the runs of a Hydra multirun that
execute in one process (basic launcher) share them instead of reloading.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from runners.models.dtype import resolve_dtype
from runners.models.identity import hub_revision
from runners.models.sources import resolve_model_dir

logger = logging.getLogger(__name__)

_LOADED: dict[tuple[str, str, str], Any] = {}


@dataclass
class LoadedPair:
    """A tokenizer and the two models of a pair.

    Attributes:
        name: pair key (``conf/pair/<name>.yaml``).
        tokenizer: the target's tokenizer (the draft must share the vocabulary).
        target: ``transformers`` causal LM, eval mode.
        draft: causal LM or None (``L = 0`` runs, the AR baseline, need no draft).
        target_dir / draft_dir: where they were loaded from (a record field).
        dtype: the resolved compute dtype (``runners.models.dtype.resolve_dtype``: ``pair.dtype: auto`` becomes
            ``bfloat16`` or ``float32`` by hardware).
        device: ``pair.device``.
        load_s: seconds spent resolving and loading in this call (0 on an in-process cache hit).
        chat_template_kwargs: the pair's chat-template options (``pair.chat_template_kwargs``); backends pass
            them to :func:`runners.datasets.base.prompt_token_ids`.
        config: the ``pair`` config it was loaded from (a backend that reads other files of a model, e.g. its
            GGUF through :func:`runners.models.sources.gguf_file`, finds its sources there).
    """

    name: str
    tokenizer: Any
    target: Any
    draft: Any
    target_dir: str
    draft_dir: str | None
    dtype: str
    device: str
    load_s: float
    chat_template_kwargs: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)


def _load_model(path: str, dtype: str, device: str, revision: str | None = None):
    import torch
    from transformers import AutoModelForCausalLM

    key = (path, dtype, device, revision)
    if key not in _LOADED:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=getattr(torch, dtype), revision=revision
        )
        model.requires_grad_(False)
        _LOADED[key] = model.to(device).eval()
    return _LOADED[key]


def load_pair(
    pair: Mapping[str, Any], need_draft: bool = True, load_weights: bool = True, log=logger.info
) -> LoadedPair:
    """Resolve both model sources and load them (target first).

    ``load_weights=False`` resolves (and prepares) the model directories and loads only the tokenizer:
    for backends such as vLLM that load the weights themselves (``target``/``draft`` are then None).

    The dtype is :func:`runners.models.dtype.resolve_dtype` of ``pair`` (``auto``: bf16 where the hardware
    has fast bf16, else float32).

    Raises:
        runners.models.sources.ModelUnavailableError: a model has no usable source.
        ValueError: ``pair.dtype`` is not an allowed value.
        ValueError: draft and target vocabularies differ in size beyond the padded embedding rows.
    """
    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(int(os.environ.get("DROPMATCH_THREADS", os.cpu_count() or 1)))
    t0 = time.perf_counter()
    dtype = resolve_dtype(pair)
    device = str(pair.get("device", "cpu"))
    target_dir = resolve_model_dir(pair["target"], log=log)
    draft_dir = resolve_model_dir(pair["draft"], log=log) if need_draft else None
    # a hub model loads the commit its run id hashed (runners.models.identity), not whatever main is now
    t_rev = hub_revision(pair["target"])
    d_rev = hub_revision(pair["draft"]) if need_draft else None
    tok_key = ("tokenizer", target_dir, t_rev or "")
    if tok_key not in _LOADED:
        _LOADED[tok_key] = AutoTokenizer.from_pretrained(target_dir, revision=t_rev)
    tokenizer = _LOADED[tok_key]
    target = _load_model(target_dir, dtype, device, t_rev) if load_weights else None
    draft = _load_model(draft_dir, dtype, device, d_rev) if draft_dir and load_weights else None
    if draft is not None and target is not None:
        tv, dv = (
            target.get_output_embeddings().weight.shape[0],
            draft.get_output_embeddings().weight.shape[0],
        )
        if abs(tv - dv) > 1024 or min(tv, dv) < len(tokenizer):
            raise ValueError(
                f"pair {pair['name']!r}: draft vocabulary ({dv}) and target vocabulary ({tv}) differ"
            )
    return LoadedPair(
        name=str(pair["name"]),
        tokenizer=tokenizer,
        target=target,
        draft=draft,
        target_dir=target_dir,
        draft_dir=draft_dir,
        dtype=dtype,
        device=device,
        load_s=time.perf_counter() - t0,
        chat_template_kwargs=dict(pair.get("chat_template_kwargs") or {}),
        config=dict(pair),
    )
