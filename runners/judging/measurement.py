"""The judging run: judge the stored answers of one decode run, one record line per question (resumable).

Registered as measurement ``judge`` (:data:`runners.measure.base.MEASUREMENTS`) and executed by
:func:`runners.measure.base.run_resolved` (same record, locking and resumption as every run); configs come from
:func:`runners.judging.runs.judge_config`. Units are the judged run's questions in the dataset's order (for
pairwise protocols, those the baseline answered too). Each line holds the question id and category, every call
made (the messages sent, the raw reply, the first-token ``top_logprobs`` where asked, finish reason, retries,
seconds, the model the server named, and ``cached_from`` when the reply was reused), the parsed result (score /
winner / preference), ``parse_error`` (None, or why nothing was parsed: counted, never scored) and the judge's
identity, and ``value``: the number the question adds to the run's statistic (the rating; 1 / 0.5 / 0 for a
pairwise win / tie / loss; ``preference - 1`` for AlpacaEval; None when unscored). A question whose call failed for good (timeout, HTTP error after the retries) gets no line: the
run stays incomplete, the failures are counted in the summary, and a rerun asks again.

Reused replies: a request (messages and parameters, :meth:`JudgeRequest.key`) already answered by the same judge
(same identity) in any judging record -- e.g. the identical outputs of two lossless runs -- is not asked again
(``judge.reuse_replies``; AlpacaEval caches its annotations the same way). Each reused call names its source run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import runners.datasets  # noqa: F401  (registration)
from runners.config.errors import ConfigError
from runners.judging import prompts as P
from runners.judging.judges import JUDGES, JudgeReply, JudgeRequest, build_judge
from runners.judging.protocols import PROTOCOLS, Unit, build_protocol
from runners.judging.runs import SUBSETS
from runners.measure.base import MEASUREMENTS, MissingRecordsError
from runners.paths import results_dir
from runners.records.record import iter_runs, read_samples
from runners.records.run_id import run_id_of
from runners.registry import DATASETS, build

MAX_LISTED_FAILURES = 20


def _runs_root() -> Path:
    return results_dir() / "runs"


def _read(run_id: str, what: str) -> list[dict]:
    path = _runs_root() / run_id / "samples.jsonl"
    if not (path.parent / "summary.json").is_file():
        raise MissingRecordsError(
            f"the {what} run {run_id} has no record under {path.parent}; decode it first"
        )
    return read_samples(path)


class ReplyCache:
    """Replies of one judge (by identity) to requests already made, from every judging record on disk."""

    def __init__(self, identity: Mapping[str, Any], enabled: bool) -> None:
        self.identity, self.enabled = dict(identity), enabled
        self.replies: dict[str, tuple[dict, str]] = {}
        self._loaded = False

    def _load(self) -> None:
        self._loaded = True
        root = _runs_root()
        if not root.is_dir():
            return
        for c, _, d in iter_runs(root):
            if (c.get("method") or {}).get("measure") != "judge":
                continue
            if (c.get("judge") or {}).get("identity") != self.identity:
                continue
            for line in read_samples(d / "samples.jsonl"):
                for call in line.get("calls") or []:
                    if call.get("request_sha256") and call.get("reply") is not None:
                        self.replies.setdefault(call["request_sha256"], (call, d.name))

    def get(self, key: str) -> tuple[dict, str] | None:
        if not self.enabled:
            return None
        if not self._loaded:
            self._load()
        return self.replies.get(key)

    def put(self, key: str, call: dict, run_id: str) -> None:
        self.replies.setdefault(key, (call, run_id))


@MEASUREMENTS.register("judge")
class JudgeMeasurement:
    """Judge one decode run's answers (module docstring). Config: :func:`runners.judging.runs.judge_config`."""

    def __init__(self, c: Mapping[str, Any]) -> None:
        self.c = c
        self.method = c["method"]
        self.protocol = build_protocol(str(self.method["protocol"]), int(c["judge"]["max_tokens"]))
        self._units: list[Unit] | None = None
        self.call_failures: list[dict] = []
        self.num_calls = 0
        self.num_reused = 0
        self.wall_s = 0.0

    @staticmethod
    def check(c: Mapping[str, Any]) -> None:
        m, judge = c["method"], c.get("judge") or {}
        if m.get("protocol") not in PROTOCOLS:
            raise ConfigError(
                f"protocol={m.get('protocol')!r} for dataset={c['dataset']['name']} is unknown; allowed: "
                f"{', '.join(PROTOCOLS.names())}"
            )
        if m.get("subset") not in SUBSETS:
            raise ConfigError(
                f"subset={m.get('subset')!r} is invalid; allowed: {', '.join(SUBSETS)}"
            )
        if judge.get("name") not in JUDGES:
            raise ConfigError(
                f"judge={judge.get('name')!r} is unknown; allowed: {', '.join(JUDGES.names())}"
            )
        JUDGES.get(judge["name"]).check(judge)
        if PROTOCOLS.get(m["protocol"]).needs_baseline and not m.get("baseline"):
            raise ConfigError(
                f"protocol={m['protocol']} compares with a baseline; allowed: baseline=<method> (e.g. sd) "
                f"or baseline=reference"
            )

    # -- units --------------------------------------------------------------------------------------------
    def units(self) -> list[Unit]:
        """The judged questions with their answers, in the dataset's order (cached).

        Raises:
            MissingRecordsError: the judged or the baseline run has no record.
        """
        if self._units is not None:
            return self._units
        answers = {s["sample_id"]: s for s in _read(self.method["source_run_id"], "judged")}
        base = self.method.get("baseline") or {}
        base_answers = (
            {s["sample_id"]: s.get("output_text") or "" for s in _read(base["run_id"], "baseline")}
            if base.get("run_id")
            else None
        )
        ds_name = str(self.c["dataset"]["name"])
        dataset = build(DATASETS, self.c["dataset"])
        units = []
        for sid, doc in dataset.selected_docs():
            if sid not in answers:
                continue
            ref, ref_src = P.reference_for(
                int(doc["question_id"]),
                str(doc.get("category") or ""),
                doc.get("reference"),
                ds_name,
            )
            q = P.Question(
                sample_id=sid,
                question_id=int(doc["question_id"]),
                category=str(doc.get("category") or ""),
                text=str(doc["turns"][0]),
                reference=ref,
                reference_source=ref_src,
            )
            baseline = None
            if base.get("method") == "reference":
                if not doc.get("reference"):
                    continue  # no reference answer to compare with
                baseline = str(doc["reference"][0])
            elif base_answers is not None:
                if sid not in base_answers:
                    continue
                baseline = base_answers[sid]
            units.append(Unit(q, str(answers[sid].get("output_text") or ""), baseline))
        if self.method.get("subset") == "calibration":
            n = int(self.method.get("calibration_n") or 0)
            keep = {
                u.question.sample_id
                for u in sorted(units, key=lambda u: u.question.question_id)[:n]
            }
            units = [u for u in units if u.question.sample_id in keep]
        self._units = units
        return units

    def unit_ids(self) -> list[str]:
        return [u.question.sample_id for u in self.units()]

    # -- judging ------------------------------------------------------------------------------------------
    def measure(self, todo: Sequence[str], log: Callable[[str], None]) -> Iterator[dict]:
        judge = build_judge(self.c["judge"])
        identity = self.c["judge"]["identity"]
        cache = ReplyCache(identity, bool(self.c["judge"].get("reuse_replies", True)))
        by_id = {u.question.sample_id: u for u in self.units()}
        chunk = int(
            self.c["judge"].get("batch_size") or 4 * int(self.c["judge"].get("concurrency") or 1)
        )
        run_id = self._run_id()
        log(
            f"[judge] {self.method['protocol']} on run {self.method['source_run_id']} "
            f"({self.c['dataset']['name']}, {self.method['source_method']}): {len(todo)} questions, judge "
            f"{judge.label()}"
        )
        done = 0
        t_start = time.perf_counter()
        for s in range(0, len(todo), chunk):
            plans = []
            for sid in todo[s : s + chunk]:
                name, reqs = self.protocol.requests(by_id[sid])
                plans.append((by_id[sid], name, reqs))
            ask: dict[str, JudgeRequest] = {}
            known: dict[str, tuple[dict, str | None]] = {}  # key -> (call, run it was reused from)
            for _, _, reqs in plans:
                for r in reqs:
                    hit = cache.get(r.key())
                    if hit is not None:
                        known[r.key()] = (hit[0], hit[1])
                    else:
                        ask.setdefault(r.key(), r)
            t0 = time.perf_counter()
            fresh = dict(zip(ask, judge.complete(list(ask.values())))) if ask else {}
            self.wall_s += time.perf_counter() - t0
            self.num_calls += len(ask)
            for key, rep in fresh.items():
                if rep.error is None:
                    known[key] = (_call(ask[key], rep), None)
                    cache.put(key, known[key][0], run_id)
            for u, name, reqs in plans:
                calls, failed = [], None
                for r in reqs:
                    key = r.key()
                    if key not in known:
                        failed = fresh[key].error
                        break
                    call = {
                        **known[key][0],
                        "messages": r.message_list(),
                        "cached_from": known[key][1],
                    }
                    self.num_reused += call["cached_from"] is not None
                    calls.append(call)
                if failed is not None:
                    self.call_failures.append({"sample_id": u.question.sample_id, "error": failed})
                    log(
                        f"[judge] {u.question.sample_id}: call failed ({failed}); not recorded, a rerun retries"
                    )
                    continue
                judgment = self.protocol.judgment(u, [_reply(c) for c in calls])
                yield {
                    "sample_id": u.question.sample_id,
                    "question_id": u.question.question_id,
                    "category": u.question.category,
                    "protocol": self.method["protocol"],
                    "prompt": name,
                    "reference_source": u.question.reference_source,
                    "calls": calls,
                    **judgment,
                    "value": self.protocol.value(judgment),
                    "judge": {
                        **identity,
                        "prompt": name,
                        "prompt_files": self.c["judge"]["prompt_files"],
                    },
                }
                done += 1
            elapsed = time.perf_counter() - t_start
            log(f"[judge] {done + len(self.call_failures)}/{len(todo)} questions, {elapsed:.0f} s")

    def _run_id(self) -> str:
        return run_id_of(self.c)

    def summarize(self, lines: Sequence[Mapping[str, Any]]) -> dict:
        judge = build_judge(self.c["judge"])
        base = self.method.get("baseline") or {}
        out = {
            "judge/name": str(self.c["judge"]["name"]),
            "judge/label": judge.label(),
            "judge/weak": bool(judge.weak),
            "judge/identity": dict(self.c["judge"]["identity"]),
            "judge/protocol": str(self.method["protocol"]),
            "judge/source_run_id": str(self.method["source_run_id"]),
            "judge/source_method": str(self.method["source_method"]),
            "judge/baseline": dict(base) if base else None,
            "judge/subset": str(self.method.get("subset")),
            "judge/num_parse_failures": sum(x.get("parse_error") is not None for x in lines),
            "judge/num_call_failures": len(self.call_failures),
            "judge/call_failures": self.call_failures[:MAX_LISTED_FAILURES],
            "judge/num_calls": self.num_calls,
            "judge/num_reused_calls": self.num_reused,
            "judge/wall_s": round(self.wall_s, 3),
        }
        out.update(self.protocol.summarize(lines))
        return out


def _call(r: JudgeRequest, rep: JudgeReply) -> dict:
    """A judgment line's record of one call (the messages are added per line)."""
    return {
        "request_sha256": r.key(),
        "max_tokens": r.max_tokens,
        "temperature": r.temperature,
        "reply": rep.text,
        "top_logprobs": rep.top_logprobs,
        "finish_reason": rep.finish_reason,
        "retries": rep.retries,
        "wall_s": round(rep.wall_s, 4),
        "served_model": rep.served_model,
        **({"extra": rep.extra} if rep.extra else {}),
    }


def _reply(call: Mapping[str, Any]) -> JudgeReply:
    return JudgeReply(
        text=call.get("reply"),
        top_logprobs=call.get("top_logprobs"),
        finish_reason=call.get("finish_reason"),
    )
