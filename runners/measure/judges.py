"""Entailment judges for Fig. 3(b): P(text i entails text j), as Kuhn et al. 2023 (semantic uncertainty).

Paper: DropMatch (arXiv 2603.03333) Fig. 3(b): two outputs are equivalent when each entails the other
(bidirectional entailment) under an NLI model (the paper: DeBERTa MNLI, He et al. 2021).

Judges (``make_judge``): ``deberta`` = a sequence-classification NLI model (local path or hub id; label
"entailment" read from ``config.id2label``); ``llm`` = a causal LM prompted as an entailment judge with
the prompt of Farquhar et al. 2024 (semantic entropy), P(entailment) read from the likelihood of each of
the three label words as the reply, renormalised. ``auto`` takes DeBERTa when its weights are reachable (local
path, or the hub when HF_HUB_OFFLINE is unset) and otherwise the LLM judge on the run's own target model.
Outputs that are the same string are equivalent without asking a judge (Kuhn et al.'s clustering also
puts identical generations together); each directed judgment is cached per text pair (:class:`CachedJudge`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from runners.backends.kv_state import PrefixCache, crop_cache
from runners.models.sources import hub_reachable

logger = logging.getLogger(__name__)

LLM_LABELS = ("entailment", "neutral", "contradiction")
DEBERTA_MNLI = "microsoft/deberta-large-mnli"


class EntailmentJudge(Protocol):
    """``entail_prob(premise, hypothesis, question) -> P(premise entails hypothesis)`` in [0, 1]."""

    name: str

    def entail_prob(self, premise: str, hypothesis: str, question: str = "") -> float: ...


class DebertaJudge:
    """An MNLI sequence classifier (DeBERTa MNLI in the paper); P(entailment) = softmax at its label.

    Args:
        model: local directory or hub id of an ``AutoModelForSequenceClassification`` with an
            "entailment" label in ``config.id2label``.
    """

    def __init__(self, model: str, device: str = "cpu") -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForSequenceClassification.from_pretrained(model).to(device).eval()
        labels = {str(v).lower(): int(k) for k, v in self.model.config.id2label.items()}
        if "entailment" not in labels:
            raise ValueError(
                f"NLI model {model!r} has no 'entailment' label (id2label={self.model.config.id2label})"
            )
        self.entail_index = labels["entailment"]
        self.name = f"NLI: {Path(model).name if Path(model).exists() else model}"

    def entail_prob(self, premise: str, hypothesis: str, question: str = "") -> float:
        import torch

        # Kuhn et al. 2023 prepend the question to both answers.
        a, b = (
            (f"{question} {premise}", f"{question} {hypothesis}")
            if question
            else (premise, hypothesis)
        )
        enc = self.tokenizer(a, b, return_tensors="pt", truncation=True, max_length=512)
        with torch.inference_mode():
            logits = self.model(**enc).logits[0].float()
        return float(torch.softmax(logits, dim=-1)[self.entail_index])


LLM_PROMPT = (
    "We are evaluating answers to the question {question}\n"
    "Here are two possible answers:\n"
    "Possible Answer 1: {premise}\n"
    "Possible Answer 2: {hypothesis}\n"
    "Does Possible Answer 1 semantically entail Possible Answer 2? "
    "Respond with entailment, contradiction, or neutral."
)


class LatestPrefixCache:
    """The last prompt's KV cache, offered for the next prompt's shared token prefix (the LLM judge's cache).

    Unlike :class:`runners.backends.kv_state.PrefixCache` (which keeps the first of several prompts sharing a
    long prefix, e.g. a few-shot prompt), every prompt replaces the kept one: consecutive judge prompts share a
    prefix that changes (question + premise). :meth:`lookup` leaves at least the last token to be forwarded.
    """

    def __init__(self) -> None:
        self.ids: tuple[int, ...] = ()
        self.cache: Any = None

    def lookup(self, ids: Sequence[int]) -> tuple[Any, int]:
        """(the kept cache cropped in place to the shared prefix, its length), or (None, 0). The cache is handed
        over, not copied: the caller extends it and :meth:`store` takes it back."""

        n = min(PrefixCache._shared(self.ids, ids), len(ids) - 1)
        cache, self.ids, self.cache = self.cache, (), None
        if cache is None or n < 1:
            return None, 0
        crop_cache(cache, n)
        return cache, n

    def store(self, ids: Sequence[int], cache: Any) -> None:
        """Keep ``cache`` (holding exactly ``ids``), replacing the previous one."""
        self.ids, self.cache = tuple(ids), cache


class LLMJudge:
    """A chat causal LM prompted as an entailment judge (Farquhar et al. 2024's prompt).

    P(entailment) is read from the likelihood of the three label words as the reply: for each label,
    the teacher-forced probability of its whole token sequence (lower-case and capitalised spellings
    summed), renormalised over the three labels. One prompt forward per judgment (its KV cache is reused
    for the label continuations, a few tokens each).

    Consecutive prompts share a token prefix: :func:`directed_entailment` asks premise i against every
    hypothesis j in turn, so two prompts in a row share chat header + question + "Possible Answer 1:" +
    premise + "Possible Answer 2:", and prompts of different questions the chat header. The KV cache of
    the previous prompt is kept (:class:`LatestPrefixCache`, one entry, replaced by every prompt), cropped
    to the longest shared prefix, and only the rest of the prompt is forwarded (at least its last token,
    whose logits score the labels). The numbers equal a full prefill up to
    float rounding (a prefix attended in two chunks instead of one).

    Args:
        model: ``transformers`` causal LM (eval mode), e.g. the run's target from ``load_pair``.
        tokenizer: its tokenizer (with a chat template).
        name: label shown on the figure.
        max_chars: the question and each answer are cut to this many characters (bounds the prompt length;
            Spec-Bench's summarisation / RAG questions hold whole articles).
        reuse_prefix: keep the previous prompt's KV cache for the next prompt (False: a full prefill each time).

    Attributes:
        tokens_prompt: prompt tokens judged so far (summed over judgments).
        tokens_prefilled: of those, the tokens forwarded (the rest came from the kept cache).
    """

    # 1: first-token probabilities of lower-case labels only (biased to one-token "neutral");
    # 2: whole label words, both spellings; 3: the previous prompt's KV cache reused for the shared prefix
    version = 3

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        name: str,
        max_chars: int = 2000,
        reuse_prefix: bool = True,
    ) -> None:
        self.model, self.tokenizer, self.max_chars = model, tokenizer, max_chars
        self.name = f"LLM judge: {name}"
        self.label_ids = [[self._ids(v) for v in (w, w.capitalize())] for w in LLM_LABELS]
        firsts = [ids[0] for variants in self.label_ids for ids in variants]
        if len(set(firsts)) != len(firsts):
            raise ValueError(
                f"label spellings of {LLM_LABELS} share a first token {firsts}; cannot judge"
            )
        self.prefix_cache = LatestPrefixCache() if reuse_prefix else None
        self.tokens_prompt = 0
        self.tokens_prefilled = 0

    def _ids(self, word: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(word, add_special_tokens=False)]

    def prompt_ids(self, premise: str, hypothesis: str, question: str) -> list[int]:
        cut = self.max_chars
        text = LLM_PROMPT.format(
            question=question.strip()[:cut] or "(none)",
            premise=premise.strip()[:cut],
            hypothesis=hypothesis.strip()[:cut],
        )
        ids = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def label_probs(self, premise: str, hypothesis: str, question: str = "") -> list[float]:
        """P(entailment), P(neutral), P(contradiction) as the reply, renormalised over the three labels."""
        import torch

        return torch.softmax(
            torch.tensor(self.label_logprobs(premise, hypothesis, question)), dim=0
        ).tolist()

    def label_logprobs(self, premise: str, hypothesis: str, question: str = "") -> list[float]:
        """log P(reply = label) for entailment, neutral, contradiction (both spellings summed); not renormalised."""
        import torch

        prompt = self.prompt_ids(premise, hypothesis, question)
        dev = self.model.device
        cache, start = (
            self.prefix_cache.lookup(prompt) if self.prefix_cache is not None else (None, 0)
        )
        with torch.inference_mode():
            out = self.model(
                input_ids=torch.tensor([prompt[start:]], device=dev),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            cache, first = (
                out.past_key_values,
                torch.log_softmax(out.logits[0, -1].float(), dim=-1),
            )  # [V]
            self.tokens_prompt += len(prompt)
            self.tokens_prefilled += len(prompt) - start
            totals = []
            for variants in self.label_ids:
                logps = []
                for ids in variants:
                    lp = first[ids[0]]
                    if len(ids) > 1:
                        o = self.model(
                            input_ids=torch.tensor([ids[:-1]], device=dev),
                            past_key_values=cache,
                            use_cache=True,
                        )
                        steps = torch.log_softmax(o.logits[0].float(), dim=-1)  # [len-1, V]
                        lp = lp + steps[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum()
                        cache = o.past_key_values
                        crop_cache(cache, len(prompt))
                    logps.append(lp)
                totals.append(torch.logsumexp(torch.stack(logps), dim=0))
            if self.prefix_cache is not None:
                self.prefix_cache.store(
                    prompt, cache
                )  # the label continuations cropped it back to the prompt
            return torch.stack(totals).tolist()

    def entail_prob(self, premise: str, hypothesis: str, question: str = "") -> float:
        return float(self.label_probs(premise, hypothesis, question)[0])


def nli_available(model: str | None) -> bool:
    """True when ``model`` is a local directory, or a hub id already in the Hugging Face cache, or a hub id and
    the hub may be used (HF_HUB_OFFLINE unset) and answers (a 3 s connection probe: offline machines fall back to
    the LLM judge at once instead of after the hub client's retries, about a minute per run)."""
    if not model:
        return False
    if Path(model).expanduser().is_dir():
        return True
    if "/" not in model:
        return False
    if _in_hf_cache(model):
        return True
    return os.environ.get("HF_HUB_OFFLINE", "0") in ("", "0") and hub_reachable()


def _in_hf_cache(model: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(model, "config.json"), str)
    except Exception:  # noqa: BLE001  (an old hub client, a malformed id: not cached)
        return False


def make_judge(
    kind: str = "auto",
    nli_model: str | None = DEBERTA_MNLI,
    llm: Callable[[], tuple[Any, Any, str]] | None = None,
    log: Callable[[str], None] = logger.info,
) -> Any:
    """The entailment judge for Fig. 3(b).

    Args:
        kind: ``auto`` | ``deberta`` | ``llm``.
        nli_model: local directory or hub id of the NLI classifier.
        llm: zero-argument callable returning ``(model, tokenizer, name)`` for the LLM fallback (called
            only when needed, so the target model is loaded only then).

    Raises:
        ValueError: unknown ``kind``, or ``llm`` needed but not given.
    """
    if kind not in ("auto", "deberta", "llm"):
        raise ValueError(f"judge kind {kind!r} unknown; allowed: auto, deberta, llm")
    if kind == "deberta" or (kind == "auto" and nli_available(nli_model)):
        try:
            return DebertaJudge(
                str(Path(nli_model).expanduser())
                if Path(str(nli_model)).expanduser().is_dir()
                else str(nli_model)
            )
        except Exception as exc:  # hub unreachable, gated, no weights
            if kind == "deberta":
                raise
            log(
                f"[fig3] NLI model {nli_model!r} unavailable ({type(exc).__name__}: {str(exc)[:200]}); "
                "falling back to the LLM judge"
            )
    if llm is None:
        raise ValueError("no NLI model reachable and no LLM given for the fallback judge")
    model, tokenizer, name = llm()
    return LLMJudge(model, tokenizer, name)


class CachedJudge:
    """Memoises directed judgments and skips the judge for identical strings (P = 1)."""

    def __init__(self, judge: Any) -> None:
        self.judge, self.name = judge, judge.name
        self.cache: dict[tuple[str, str, str], float] = {}
        self.calls = 0

    def entail_prob(self, premise: str, hypothesis: str, question: str = "") -> float:
        if premise.strip() == hypothesis.strip():
            return 1.0
        key = (premise, hypothesis, question)
        if key not in self.cache:
            self.calls += 1
            self.cache[key] = float(self.judge.entail_prob(premise, hypothesis, question))
        return self.cache[key]


def directed_entailment(texts: Sequence[str], judge: Any, question: str = "") -> np.ndarray:
    """``P[i, j]`` = P(text i entails text j) for every ordered pair of ``texts`` (diagonal 1).

    Paper: Fig. 3(b); Kuhn et al. 2023 Alg. 1 (asks both directions of every pair).

    Returns:
        ``[n, n]`` float64 in ``[0, 1]``.
    """
    n = len(texts)
    P = np.eye(n, dtype=np.float64)
    for i in range(n):
        for j in range(n):
            if i != j:
                P[i, j] = judge.entail_prob(texts[i], texts[j], question)
    return P
