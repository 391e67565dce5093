"""Where an output ends, and what its rounds committed: the cut at EOS / stop string / max_new_tokens.

One definition for every backend (the README's glossary and :mod:`runners.records.counters`): a round that accepted ``a`` drafts emits ``a + 1``
tokens, but only the tokens that end up in the output count. After the cut, a round that emitted ``k``
kept tokens (``1 <= k <= a + 1``; an EOS that ended the output counts as emitted) counts as ``k - 1``
accepted, and rounds past the end are dropped. Hence for every sample

    num_drafts + num_accepted_tokens == len(output_token_ids) - 1 + eos_removed       (the identity)

(``- 1``: the first output token comes from the prefill, not from a round; ``eos_removed``: 1 when the output
ended at an end-of-sequence token, which is not kept in the ids). An output that is empty because the prefill's
token was EOS has no rounds: ``0 == 0 - 1 + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from runners.records.counters import SpecDecodeCounters

END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>")


def generation_eos(model_dir: str | None) -> Any:
    """``eos_token_id`` of the model's generation config as transformers gives the HF backend's model
    (``generation_config.json``, else derived from ``config.json``); None without a directory or when neither
    names one. The engines that do not load the model through transformers (vLLM, llama.cpp) read it here."""
    if not model_dir:
        return None
    from transformers import AutoConfig, GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_dir).eos_token_id
    except OSError:
        try:
            cfg = AutoConfig.from_pretrained(model_dir)
        except (
            OSError,
            ValueError,
        ):  # no config.json either: the tokenizer's and the known end-of-turn tokens
            return None
        return getattr(GenerationConfig.from_model_config(cfg), "eos_token_id", None)


def end_of_sequence_ids(tokenizer: Any, generation_eos: Any = None) -> set[int]:
    """End-of-sequence ids: the tokenizer's, the model's generation config's and known end-of-turn tokens.

    Args:
        tokenizer: a transformers tokenizer.
        generation_eos: ``model.generation_config.eos_token_id`` (int, list or None).
    """
    ids: set[int] = set()
    for value in (tokenizer.eos_token_id, generation_eos):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN_TOKENS if t in vocab)
    return ids


@dataclass
class Output:
    """A finished output after the cut.

    Attributes:
        token_ids: the output's token ids (EOS removed; ends at the token that completes a stop string).
        text: decoded text, cut before the first stop string.
        stop_reason: ``"eos"``, ``"stop"`` or ``"length"`` (max_new_tokens reached, or the loop ended).
        eos_removed: 1 if an EOS token ended the output (and was dropped from ``token_ids``), else 0.
        emitted: tokens the rounds committed that count: ``len(token_ids) - 1 + eos_removed`` (>= 0).
    """

    token_ids: list[int]
    text: str
    stop_reason: str
    eos_removed: int
    emitted: int = field(init=False)

    def __post_init__(self) -> None:
        self.emitted = max(0, len(self.token_ids) - 1 + self.eos_removed)


def _first_stop(text: str, stops: Sequence[str]) -> int:
    """Index in ``text`` of the earliest stop string, or -1."""
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(hits) if hits else -1


def finalize(
    raw_ids: Sequence[int],
    tokenizer: Any,
    eos_ids: Iterable[int],
    stops: Sequence[str],
    max_new_tokens: int,
) -> Output:
    """Cut the tokens a decode loop produced (it may overshoot by up to L) where the output really ends.

    Order, token by token: the cap (``max_new_tokens`` tokens kept at most), then EOS (the first EOS ends the
    output and is dropped), then stop strings: the ids end at the token whose decoding first contains a stop
    string, and the text is cut before that stop string (lm-eval's ``until`` semantics).

    Args:
        raw_ids: generated ids in order (first = the prefill's token).
        tokenizer: decodes ids (``skip_special_tokens=True``).
        eos_ids: end-of-sequence ids.
        stops: stop strings (may be empty).
        max_new_tokens: the cap, tokens (>= 1).

    Returns:
        :class:`Output`.
    """
    eos = set(eos_ids)
    ids: list[int] = []
    reason, eos_removed = "length", 0
    for tok in raw_ids[:max_new_tokens]:
        if tok in eos:
            reason, eos_removed = "eos", 1
            break
        ids.append(int(tok))
    text = tokenizer.decode(ids, skip_special_tokens=True)
    cut = _first_stop(text, stops)
    if cut >= 0:
        # the shortest prefix whose text contains a stop string (decode is not prefix-additive: search)
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if _first_stop(tokenizer.decode(ids[:mid], skip_special_tokens=True), stops) >= 0:
                hi = mid
            else:
                lo = mid + 1
        ids = ids[:lo]
        text = tokenizer.decode(ids, skip_special_tokens=True)
        text = text[: _first_stop(text, stops)]
        reason, eos_removed = "stop", 0
    return Output(token_ids=ids, text=text, stop_reason=reason, eos_removed=eos_removed)


def is_finished(
    raw_ids: Sequence[int],
    tokenizer: Any,
    eos_ids: Iterable[int],
    stops: Sequence[str],
    max_new_tokens: int,
) -> bool:
    """Whether a decode loop can stop: the cap is reached, an EOS was produced, or a stop string appeared."""
    if len(raw_ids) >= max_new_tokens:
        return True
    eos = set(eos_ids)
    if any(t in eos for t in raw_ids):
        return True
    return (
        bool(stops)
        and _first_stop(tokenizer.decode(list(raw_ids), skip_special_tokens=True), stops) >= 0
    )


def cut_rounds(accepted_per_round: Sequence[int], emitted: int) -> list[int]:
    """Per-round accepted counts that count only tokens that are in the output.

    Args:
        accepted_per_round: ``a_r`` per round as the rule decided (round r emitted ``a_r + 1`` tokens).
        emitted: tokens the rounds committed that are in the output (:attr:`Output.emitted`).

    Returns:
        The counts of the rounds that contributed, the last one reduced so that
        ``len(out) + sum(out) == emitted``.

    Raises:
        ValueError: ``emitted`` exceeds what the rounds committed (the loop lost tokens).
    """
    out: list[int] = []
    left = emitted
    for a in accepted_per_round:
        if left <= 0:
            break
        k = min(int(a) + 1, left)
        out.append(k - 1)
        left -= k
    if left > 0:
        raise ValueError(
            f"the output has {emitted} round tokens but the rounds committed only "
            f"{sum(int(a) + 1 for a in accepted_per_round)}"
        )
    return out


def count_mismatched(flags_per_round: Sequence[Sequence[int]], kept: Sequence[int]) -> int:
    """Accepted drafts that differ from the target's greedy token, counting only those in the output.

    Args:
        flags_per_round: per round, one 0/1 flag per accepted draft (1: it differs from the target's argmax).
        kept: the rounds' accepted counts after :func:`cut_rounds` (the last round may keep fewer).
    """
    return sum(int(sum(f[:k])) for f, k in zip(flags_per_round, kept))


def round_counters(
    accepted_per_round: Sequence[int],
    L: int,
    drafted_per_round: Sequence[int] | None = None,
    *,
    mismatched: int | None = None,
) -> SpecDecodeCounters:
    """vLLM-style counters of rounds with the given (already cut) accepted counts.

    Args:
        accepted_per_round: accepted drafts per round, after :func:`cut_rounds`.
        L: draft length (0: autoregressive, no draft rounds are counted).
        drafted_per_round: drafts per round when fewer than L (vLLM near ``max_model_len``); default L each.
        mismatched: accepted drafts that differ from the target's greedy token (:func:`count_mismatched`);
            None when the backend does not count them.
    """
    c = SpecDecodeCounters(num_speculative_tokens=L, num_accepted_mismatched=mismatched)
    if L > 0:
        drafted = (
            drafted_per_round if drafted_per_round is not None else [L] * len(accepted_per_round)
        )
        for n, a in zip(drafted, accepted_per_round):
            c.observe_draft(int(n), int(a))
    return c
