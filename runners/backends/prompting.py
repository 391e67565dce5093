"""Prompt encoding shared by every backend: chat messages -> prompt token ids with the pair's template options.

A pair states its chat-template options in ``conf/pair/<name>.yaml`` as ``chat_template_kwargs`` (``{}``: the
template's defaults; Qwen3: ``{enable_thinking: false}``, otherwise its template opens a ``<think>`` block that
short token caps are spent in). They are part of the run config (so of the record and the run id) and reach
the template through :func:`encode_chat`, which both backends call, so the HF loop and vLLM see the same ids.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def encode_chat(tokenizer: Any, messages: Sequence[Mapping[str, str]],
                chat_template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """Token ids of ``messages`` under the tokenizer's chat template, with the generation prompt appended.

    Args:
        tokenizer: a ``transformers`` tokenizer with a chat template (the target's).
        messages: ``[{"role": ..., "content": ...}, ...]`` (``Sample.messages``).
        chat_template_kwargs: extra template variables (the pair's ``chat_template_kwargs``, e.g.
            ``{"enable_thinking": False}``), passed to ``apply_chat_template`` as keyword arguments; None = ``{}``.

    Returns:
        Prompt token ids (ints), as ``tokenizer.apply_chat_template(messages, add_generation_prompt=True,
        tokenize=True, **chat_template_kwargs)``.

    Raises:
        TypeError: ``chat_template_kwargs`` is not a mapping, or sets a key that ``apply_chat_template`` fixes
            here (``add_generation_prompt``, ``tokenize``, ``conversation``).
    """
    if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, Mapping):
        raise TypeError(f"chat_template_kwargs must be a mapping, got {type(chat_template_kwargs).__name__}")
    kwargs = dict(chat_template_kwargs or {})
    fixed = {"add_generation_prompt", "tokenize", "conversation"} & set(kwargs)
    if fixed:
        raise TypeError(f"chat_template_kwargs may not set {sorted(fixed)} (encode_chat fixes them)")
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, **kwargs)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers 5.x returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]
