"""Load a draft/target pair (``conf/pair/*.yaml``) once per process.

Models are cached in-process by resolved directory and dtype, so the runs of a Hydra multirun that
execute in one process (basic launcher) share them instead of reloading.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runners.backends.cpu_attention import use_cpu_gqa
from runners.config.errors import ConfigError
from runners.models.dtype import resolve_dtype
from runners.models.identity import hub_revision
from runners.models.sources import resolve_model_dir
from runners.paths import cpu_threads

logger = logging.getLogger(__name__)

_LOADED: dict[tuple[str, str, str], Any] = {}


@dataclass
class LoadedPair:
    """A tokenizer and the two models of a pair.

    Attributes:
        name: pair key (``conf/pair/<name>.yaml``).
        tokenizer: the target's tokenizer (the draft shares it: checked at load).
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
        vocab_size: V, the shared tokenizer's vocabulary (``len(tokenizer)``). A model's LM head may have more
            rows (padding to a multiple of 64 or 128, by different amounts in draft and target: Qwen2.5-Coder-0.5B
            151,936 rows, the 7B/14B/32B 152,064); the backends cut both heads to V, so rows beyond it carry
            no probability on either side.
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
    vocab_size: int | None = None


def _load_tokenizer(path: str, revision: str | None) -> Any:
    from transformers import AutoTokenizer

    key = ("tokenizer", path, revision or "")
    if key not in _LOADED:
        _LOADED[key] = AutoTokenizer.from_pretrained(path, revision=revision)
    return _LOADED[key]


def check_shared_vocabulary(
    name: str, tokenizer: Any, draft_tokenizer: Any, target_rows: int | None, draft_rows: int | None
) -> int:
    """The shared vocabulary size V of a pair, or an error naming the sizes that do not fit.

    Args:
        name: the pair's name (for the message).
        tokenizer / draft_tokenizer: the target's and the draft's tokenizers (``draft_tokenizer`` None: the draft
            ships none, only its LM head is checked).
        target_rows / draft_rows: rows of each LM head (None: not loaded).

    Returns:
        ``len(tokenizer)``.

    Raises:
        ConfigError: the tokenizers differ (size or any token's id), or an LM head has fewer rows than the
            tokenizer has ids: the pair cannot run, whatever the other settings.
    """
    V = len(tokenizer)
    if draft_tokenizer is not None:
        dv = len(draft_tokenizer)
        if dv != V or draft_tokenizer.get_vocab() != tokenizer.get_vocab():
            theirs, ours = draft_tokenizer.get_vocab(), tokenizer.get_vocab()
            diff = sorted(set(theirs.items()) ^ set(ours.items()), key=lambda kv: kv[1])[:3]
            raise ConfigError(
                f"pair {name!r}: the draft's tokenizer ({dv} ids) and the target's ({V} ids) differ "
                f"(e.g. {diff}); speculative decoding needs one shared vocabulary"
            )
    for role, rows in (("target", target_rows), ("draft", draft_rows)):
        if rows is not None and rows < V:
            raise ConfigError(
                f"pair {name!r}: the {role}'s LM head has {rows} rows, fewer than the tokenizer's {V} ids"
            )
    return V


def check_pair_tokenizers(
    pair: Mapping[str, Any], need_draft: bool = True, log=logger.info
) -> None:
    """Resolve the pair's model directories and check that draft and target share one tokenizer, loading no
    weights: what :func:`load_pair` checks first, for a caller that must refuse the pair before it writes
    anything (a run record).

    Raises:
        runners.models.sources.ModelUnavailableError: a model has no usable source.
        ConfigError: the tokenizers differ (:func:`check_shared_vocabulary`).
    """
    if not need_draft:
        return
    target_dir = resolve_model_dir(pair["target"], log=log)
    draft_dir = resolve_model_dir(pair["draft"], log=log)
    tokenizer = _load_tokenizer(target_dir, hub_revision(pair["target"]))
    draft_tokenizer = _draft_tokenizer(draft_dir, hub_revision(pair["draft"]))
    check_shared_vocabulary(str(pair["name"]), tokenizer, draft_tokenizer, None, None)


def _load_model(path: str, dtype: str, device: str, revision: str | None = None):
    import torch
    from transformers import AutoModelForCausalLM

    key = (path, dtype, device, revision)
    if key not in _LOADED:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=getattr(torch, dtype), revision=revision
        )
        model.requires_grad_(False)
        if device == "cpu":
            use_cpu_gqa(
                model
            )  # decode and verify as grouped matmuls (runners.backends.cpu_attention)
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
        ConfigError: the draft's tokenizer differs from the target's (the message names both sizes), or an LM
            head has fewer rows than the tokenizer has ids (:func:`check_shared_vocabulary`).
    """
    import torch

    torch.set_num_threads(cpu_threads())
    t0 = time.perf_counter()
    dtype = resolve_dtype(pair)
    device = str(pair.get("device", "cpu"))
    target_dir = resolve_model_dir(pair["target"], log=log)
    draft_dir = resolve_model_dir(pair["draft"], log=log) if need_draft else None
    # a hub model loads the commit its run id hashed (runners.models.identity), not whatever main is now
    t_rev = hub_revision(pair["target"])
    d_rev = hub_revision(pair["draft"]) if need_draft else None
    tokenizer = _load_tokenizer(target_dir, t_rev)
    draft_tokenizer = _draft_tokenizer(draft_dir, d_rev) if draft_dir else None
    # tokenizers first: a pair that cannot share a vocabulary is refused before any weights load
    check_shared_vocabulary(str(pair["name"]), tokenizer, draft_tokenizer, None, None)
    target = _load_model(target_dir, dtype, device, t_rev) if load_weights else None
    draft = _load_model(draft_dir, dtype, device, d_rev) if draft_dir and load_weights else None
    vocab_size = check_shared_vocabulary(
        str(pair["name"]), tokenizer, None, _head_rows(target), _head_rows(draft)
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
        vocab_size=vocab_size,
    )


def _head_rows(model: Any) -> int | None:
    return None if model is None else int(model.get_output_embeddings().weight.shape[0])


def _draft_tokenizer(path: str, revision: str | None) -> Any:
    """The draft's own tokenizer, or None when its directory ships none (a bare head)."""
    try:
        return _load_tokenizer(path, revision)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        logger.info("draft %s: no tokenizer (%s); only its LM head size is checked", path, exc)
        return None
