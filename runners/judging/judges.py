"""Judges (config group ``conf/judge/``, registry :data:`JUDGES`): a chat model that answers judge prompts.

- ``api`` (:class:`ApiJudge`): any OpenAI-compatible chat-completions endpoint (OpenAI's GPT-4 as in the paper,
  or a vLLM / llama.cpp / TGI server), through the ``openai`` client library (already installed with EvalPlus;
  it retries timeouts, connection errors, HTTP 408/409/429/5xx with exponential backoff, ``0.5 s x 2^n`` capped
  at 8 s with jitter, honouring ``Retry-After``, at most ``max_retries`` times). Environment:
  ``DROPMATCH_JUDGE_BASE_URL`` (else ``OPENAI_BASE_URL``, else OpenAI's), ``DROPMATCH_JUDGE_MODEL`` (else
  ``OPENAI_MODEL``; read into the config, so the model name is part of the run id), ``DROPMATCH_JUDGE_API_KEY``
  (else ``OPENAI_API_KEY``). Base URL and key are not part of the identity (where the model was reached, not
  what it is); the URL and the model name the server reports are written to every judgment record.
- ``local`` (:class:`LocalJudge`): a ``transformers`` causal LM with a chat template, by default the embedded
  target (the 1.5B model this harness decodes with: a weak judge, labelled so in every footer). Replies are
  decoded greedily, several prompts per batch (left-padded); a one-token reply with ``top_logprobs``
  (AlpacaEval) reads the first-token distribution of one forward pass.

A judge answers :class:`JudgeRequest` s with :class:`JudgeReply` s; a call that fails for good (timeouts, HTTP
errors, retries used up, a malformed response) comes back with ``error`` set and no text: counted, never scored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import openai
import torch
import yaml
from omegaconf import OmegaConf
from transformers import GenerationConfig

from criteria.registry import Registry
from runners.backends.output import end_of_sequence_ids
from runners.config.errors import ConfigError
from runners.config.numeric_fields import Field, FieldError
from runners.datasets.base import prompt_token_ids
from runners.models.dtype import ALLOWED, resolve_dtype
from runners.models.identity import source_identity
from runners.models.loader import load_pair
from runners.paths import REPO_ROOT

logger = logging.getLogger(__name__)

JUDGES: Registry = Registry("judge")

ENV_BASE_URL = ("DROPMATCH_JUDGE_BASE_URL", "OPENAI_BASE_URL")
ENV_MODEL = ("DROPMATCH_JUDGE_MODEL", "OPENAI_MODEL")
ENV_API_KEY = ("DROPMATCH_JUDGE_API_KEY", "OPENAI_API_KEY")


def first_env(names: Sequence[str]) -> str | None:
    """The first of ``names`` set to a non-empty value in the environment, else None."""
    for n in names:
        if os.environ.get(n):
            return os.environ[n]
    return None


@dataclass(frozen=True)
class JudgeRequest:
    """One chat completion asked of a judge.

    Attributes:
        messages: the prompt sent (``[{role, content}]``).
        max_tokens: reply cap in tokens.
        temperature: sampling temperature as the reference tool sends it (FastChat 0; AlpacaEval's one-token
            logprob reply 1, which leaves the logprobs unchanged); the local judge decodes greedily.
        top_logprobs: also return the first reply token's ``top_logprobs`` alternatives (AlpacaEval: 5), or None.
    """

    messages: tuple[tuple[str, str], ...]
    max_tokens: int
    temperature: float = 0.0
    top_logprobs: int | None = None

    @classmethod
    def of(cls, messages: Sequence[Mapping[str, str]], **kw: Any) -> JudgeRequest:
        return cls(tuple((str(m["role"]), str(m["content"])) for m in messages), **kw)

    def message_list(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]

    def key(self) -> str:
        """sha256 of the request (messages and parameters): identical requests to one judge share a reply."""
        blob = json.dumps(
            [self.messages, self.max_tokens, self.temperature, self.top_logprobs],
            ensure_ascii=False,
        )
        return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class JudgeReply:
    """A judge's answer to one request.

    Attributes:
        text: the reply (None when the call failed).
        top_logprobs: ``[{token, logprob}]`` of the first reply token (when asked), else None.
        error: why the call failed for good (``"APITimeoutError: ..."``), else None.
        retries: retries the call took (for a failed call: the retries used up).
        wall_s: seconds the call took (a batch's time divided among its requests for the local judge).
        served_model: the model the server says answered (API), or the local model's name.
        finish_reason: ``stop`` or ``length`` (the reply hit ``max_tokens``), when known.
    """

    text: str | None
    top_logprobs: list[dict[str, Any]] | None = None
    error: str | None = None
    retries: int = 0
    wall_s: float = 0.0
    served_model: str | None = None
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Judge(Protocol):
    """A judge built from its ``conf/judge/<name>.yaml`` (cheap: the model loads on the first call)."""

    weak: bool

    def label(self) -> str:
        """How footers name this judge (model, identity; 'weak judge' where it is one)."""
        ...

    def complete(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        """One reply per request, in order; never raises for a failed call (the reply carries ``error``)."""
        ...


def check_numbers(cfg: Mapping[str, Any], fields: Sequence[Field]) -> None:
    """Refuse a judge field of ``fields`` (paths ``judge.<key>``) that is not a number of its kind in its range.

    Raises:
        ConfigError: the first such field, named with its value and the allowed values.
    """
    for f in fields:
        try:
            f.check(cfg.get(f.path.removeprefix("judge.")))
        except FieldError as e:
            raise ConfigError(str(e)) from None


def judge_identity(cfg: Mapping[str, Any]) -> dict:
    """What the judge is, without loading it (part of every judging run id and judgment record).

    Raises:
        ConfigError: an unknown judge or an invalid field.
    """
    return JUDGES.get(str(cfg.get("name")))(cfg).identity()


# ------------------------------------------------------------------------------------------------------ api
API_FIELDS = (
    Field("judge.max_tokens", int, low=1, note="reply cap in tokens"),
    Field("judge.timeout_s", float, low=0, low_open=True, note="seconds per request"),
    Field("judge.max_retries", int, low=0),
    Field("judge.concurrency", int, low=1, note="requests in flight"),
)


@JUDGES.register("api")
class ApiJudge:
    """An OpenAI-compatible chat-completions endpoint (module docstring).

    Config (``conf/judge/api.yaml``): ``model`` (from ``DROPMATCH_JUDGE_MODEL``), ``max_tokens`` (FastChat: 2048),
    ``timeout_s`` (per request), ``max_retries``, ``concurrency`` (requests in flight, as FastChat's ``--parallel``).
    """

    weak = False

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = dict(cfg)
        self.model = cfg.get("model")
        self.weak = bool(cfg.get("weak", False))
        self._client: Any = None
        self.base_url = first_env(ENV_BASE_URL)

    @staticmethod
    def check(cfg: Mapping[str, Any]) -> None:
        if not cfg.get("model"):
            raise ConfigError(
                "judge=api needs the judge model: set DROPMATCH_JUDGE_MODEL (or OPENAI_MODEL, or judge.model=...), "
                "e.g. gpt-4 (the paper's judge), and DROPMATCH_JUDGE_BASE_URL / DROPMATCH_JUDGE_API_KEY for the "
                "endpoint; allowed offline: judge=local"
            )
        check_numbers(cfg, API_FIELDS)
        if not first_env(ENV_API_KEY) and not first_env(ENV_BASE_URL):
            raise ConfigError(
                "judge=api without DROPMATCH_JUDGE_API_KEY (or OPENAI_API_KEY) and without "
                "DROPMATCH_JUDGE_BASE_URL: OpenAI's endpoint needs a key; allowed: set one, or judge=local"
            )

    def identity(self) -> dict:
        self.check(self.cfg)
        return {"judge": "api", "model": str(self.model)}

    def label(self) -> str:
        return f"{self.model} (OpenAI-compatible API)" + (" -- weak judge" if self.weak else "")

    def client(self) -> Any:
        if self._client is None:
            self._client = openai.OpenAI(
                base_url=self.base_url,
                api_key=first_env(ENV_API_KEY) or "EMPTY",  # local servers take any key
                timeout=float(self.cfg["timeout_s"]),
                max_retries=int(self.cfg["max_retries"]),
            )
        return self._client

    def complete(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        workers = max(1, min(int(self.cfg.get("concurrency") or 1), len(requests) or 1))
        if workers == 1:
            return [self._one(r) for r in requests]
        with ThreadPoolExecutor(workers) as ex:
            return list(ex.map(self._one, requests))

    def _one(self, r: JudgeRequest) -> JudgeReply:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": r.message_list(),
            "n": 1,
            "temperature": r.temperature,
            "max_tokens": r.max_tokens,
        }
        if r.top_logprobs:
            kwargs.update(logprobs=True, top_logprobs=int(r.top_logprobs))
        t0 = time.perf_counter()
        try:
            raw = self.client().chat.completions.with_raw_response.create(**kwargs)
            resp = raw.parse()
            choice = resp.choices[0]
            top = None
            content = getattr(choice.logprobs, "content", None) if r.top_logprobs else None
            if content:
                top = [
                    {"token": t.token, "logprob": float(t.logprob)} for t in content[0].top_logprobs
                ]
            text = choice.message.content
            if text is None:
                raise ValueError("the response has no message content")
            return JudgeReply(
                text=str(text),
                top_logprobs=top,
                retries=int(getattr(raw, "retries_taken", 0)),
                wall_s=time.perf_counter() - t0,
                served_model=str(resp.model) if getattr(resp, "model", None) else None,
                finish_reason=str(choice.finish_reason) if choice.finish_reason else None,
            )
        except (openai.APIError, ValueError, TypeError, AttributeError, IndexError) as e:
            # the client retried what is retryable (timeouts, connection errors, 408/409/429/5xx)
            retryable = isinstance(e, (openai.APITimeoutError, openai.APIConnectionError)) or (
                isinstance(e, openai.APIStatusError)
                and (e.status_code in (408, 409, 429) or e.status_code >= 500)
            )
            return JudgeReply(
                text=None,
                error=f"{type(e).__name__}: {str(e)[:300]}",
                retries=int(self.cfg["max_retries"]) if retryable else 0,
                wall_s=time.perf_counter() - t0,
            )


# ---------------------------------------------------------------------------------------------------- local
def local_model_spec(cfg: Mapping[str, Any]) -> dict:
    """The local judge's model spec: ``judge.local_path`` when set, else the target of ``conf/pair/<judge.pair>``.

    Raises:
        ConfigError: neither names a model.
    """
    if cfg.get("local_path"):
        path = Path(str(cfg["local_path"])).expanduser()
        return {"name": path.name, "hub_id": None, "local_path": str(path), "order": ["local"]}
    pair_file = REPO_ROOT / "conf" / "pair" / f"{cfg.get('pair')}.yaml"
    if not pair_file.is_file():
        allowed = ", ".join(sorted(p.stem for p in pair_file.parent.glob("*.yaml")))
        raise ConfigError(
            f"judge.pair={cfg.get('pair')!r} has no conf/pair/ file; allowed: {allowed}, or judge.local_path=DIR"
        )
    pair = OmegaConf.to_container(
        OmegaConf.create(yaml.safe_load(pair_file.read_text())), resolve=True
    )
    return dict(pair["target"])


LOCAL_FIELDS = (
    Field("judge.max_tokens", int, low=1, note="reply cap in tokens"),
    Field("judge.batch_size", int, low=1, note="prompts decoded together"),
    Field("judge.no_repeat_ngram_size", int, low=0, note="0 = off"),
)


@JUDGES.register("local")
class LocalJudge:
    """A causal LM on this machine prompted as the judge (module docstring).

    Config (``conf/judge/local.yaml``): ``pair`` (the judge is that pair's target) or ``local_path``, ``dtype``
    (``auto``: as ``runners.models.dtype``), ``device``, ``max_tokens`` (reply cap), ``batch_size`` (prompts
    decoded together), ``no_repeat_ngram_size`` (transformers' n-gram blocking over prompt and reply; 0 = off; part
    of the identity when on), ``weak`` (label every footer as a weak judge).
    """

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = dict(cfg)
        self.weak = bool(cfg.get("weak", True))
        self._model: Any = None
        self._tokenizer: Any = None
        self._eos: set[int] = set()
        self._pad = 0
        self._identity: dict | None = None

    @staticmethod
    def check(cfg: Mapping[str, Any]) -> None:
        check_numbers(cfg, LOCAL_FIELDS)
        if cfg.get("dtype") not in ALLOWED:
            raise ConfigError(
                f"judge.dtype={cfg.get('dtype')!r} is invalid; allowed: {', '.join(ALLOWED)}"
            )
        local_model_spec(cfg)

    def _pair_cfg(self) -> dict:
        spec = local_model_spec(self.cfg)
        return {
            "name": f"judge:{spec.get('name')}",
            "target": spec,
            "draft": spec,
            "dtype": self.cfg.get("dtype", "auto"),
            "device": self.cfg.get("device", "cpu"),
        }

    def identity(self) -> dict:
        if self._identity is None:
            self.check(self.cfg)
            pc = self._pair_cfg()
            self._identity = {
                "judge": "local",
                "model": str(pc["target"].get("name")),
                **source_identity(pc["target"]),
                "dtype": resolve_dtype(pc),
                # decoding that changes the replies is part of what the judge is (replies are reused per identity)
                **({"no_repeat_ngram_size": self._ngram} if self._ngram else {}),
            }
        return dict(self._identity)

    @property
    def _ngram(self) -> int:
        return int(self.cfg.get("no_repeat_ngram_size") or 0)

    def label(self) -> str:
        ident = self.identity()
        digest = ident.get("sha256") or ident.get("weights_sha256") or ident.get("revision")
        ngram = f", no_repeat_ngram_size {self._ngram}" if self._ngram else ""
        what = (
            f"{ident['model']} ({ident.get('source')} {str(digest)[:12]}, {ident['dtype']}{ngram})"
        )
        return (
            f"WEAK JUDGE: {what} on this machine, the model family whose answers it grades"
            if self.weak
            else f"{what} on this machine"
        )

    def load(self) -> None:
        if self._model is not None:
            return
        pair = load_pair(self._pair_cfg(), need_draft=False)
        self._model, self._tokenizer = pair.target, pair.tokenizer
        self._eos = end_of_sequence_ids(
            self._tokenizer,
            getattr(getattr(self._model, "generation_config", None), "eos_token_id", None),
        )
        pad = self._tokenizer.pad_token_id
        self._pad = int(pad if pad is not None else min(self._eos))

    def complete(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        self.load()
        out: list[JudgeReply | None] = [None] * len(requests)
        bs = int(self.cfg["batch_size"])
        for want_logprobs in (True, False):
            idx = [i for i, r in enumerate(requests) if bool(r.top_logprobs) == want_logprobs]
            ids = {i: self._encode(requests[i]) for i in idx}
            idx.sort(key=lambda i: len(ids[i]))  # similar lengths together: less padding
            for s in range(0, len(idx), bs):
                chunk = idx[s : s + bs]
                t0 = time.perf_counter()
                if want_logprobs:
                    replies = self._first_token(
                        [ids[i] for i in chunk], [requests[i] for i in chunk]
                    )
                else:
                    replies = self._generate(
                        [ids[i] for i in chunk], max(requests[i].max_tokens for i in chunk)
                    )
                share = (time.perf_counter() - t0) / len(chunk)
                for i, rep in zip(chunk, replies):
                    rep.wall_s = share
                    out[i] = rep
        return [r for r in out if r is not None]

    def _encode(self, r: JudgeRequest) -> list[int]:
        return prompt_token_ids(self._tokenizer, r.message_list())

    def _batch(self, seqs: list[list[int]]) -> tuple[Any, Any]:
        """Left-padded ``input_ids`` and ``attention_mask`` ``[B, T]`` (int64)."""
        T = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), T), self._pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), T), dtype=torch.long)
        for b, s in enumerate(seqs):
            ids[b, T - len(s) :] = torch.tensor(s, dtype=torch.long)
            mask[b, T - len(s) :] = 1
        dev = self._model.device
        return ids.to(dev), mask.to(dev)

    def _generate(self, seqs: list[list[int]], max_tokens: int) -> list[JudgeReply]:
        """Greedy replies of up to ``max_tokens`` tokens (transformers ``generate``, stops at end of turn; n-gram
        blocking when ``no_repeat_ngram_size`` is set)."""
        ids, mask = self._batch(seqs)
        gen = GenerationConfig(
            max_new_tokens=int(max_tokens),
            do_sample=False,
            eos_token_id=sorted(self._eos),
            pad_token_id=self._pad,
            **({"no_repeat_ngram_size": self._ngram} if self._ngram else {}),
        )
        with torch.inference_mode():
            out = self._model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
        replies = []
        for row in out[:, ids.shape[1] :].tolist():
            end = next((k for k, t in enumerate(row) if t in self._eos), None)
            toks = row if end is None else row[:end]
            replies.append(
                JudgeReply(
                    text=self._tokenizer.decode(toks, skip_special_tokens=True),
                    served_model=str(self.identity()["model"]),
                    finish_reason="length" if end is None else "stop",
                    extra={"num_reply_tokens": len(toks)},
                )
            )
        return replies

    def _first_token(self, seqs: list[list[int]], requests: list[JudgeRequest]) -> list[JudgeReply]:
        """The first reply token's distribution: its argmax as the reply and the top-k alternatives (log-softmax of
        the raw logits, temperature 1, as an API's ``top_logprobs``)."""
        ids, mask = self._batch(seqs)
        with torch.inference_mode():
            logits = self._model(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits[:, -1]
        logp = torch.log_softmax(logits.float(), dim=-1)  # [B, V]
        replies = []
        for b, r in enumerate(requests):
            k = int(r.top_logprobs or 1)
            vals, toks = torch.topk(logp[b], k)
            top = [
                {"token": self._tokenizer.decode([int(t)]), "logprob": float(v)}
                for v, t in zip(vals.tolist(), toks.tolist())
            ]
            replies.append(
                JudgeReply(
                    text=top[0]["token"],
                    top_logprobs=top,
                    served_model=str(self.identity()["model"]),
                    finish_reason="length",
                )
            )
        return replies


def build_judge(cfg: Mapping[str, Any]) -> Any:
    """The judge of ``conf/judge/<cfg.name>.yaml`` (nothing loads until it is first asked)."""
    return JUDGES.get(str(cfg.get("name")))(cfg)
