"""Mine labelled mismatches for Auto-Judge's judge: one resumable record per prompt.

Paper: Garipov et al. 2025 (arXiv 2504.20039) Algorithm 1 (see :mod:`runners.autojudge.mining`).

    python -m runners.autojudge.mine method=autojudge [pair=...] [profile=...] [method.judge.mining.limit=20]

Reads ``method.judge.mining`` (``conf/autojudge/<name>.yaml``) and ``pair``; writes
``results/autojudge/mining/<mining_key>/`` (:mod:`runners.autojudge.artefact`). An interrupted mining run
resumes with the prompts without a record; a finished one is skipped without loading a model.
``method.judge.mining.batch_size`` prompts are searched together (their target continuations decoded as one
batch, :mod:`runners.autojudge.batch_mining`; the records are those of one prompt at a time, each written when
its search ends, so not always in data-set order: ``index`` gives the order and training reads them in it).
Each ``samples.jsonl`` line: ``sample_id``, ``index`` (the prompt's position in the mining data set; absent
from records written before it existed, which are in that order), ``response_token_ids``, ``outcome`` (the target's answer or
pass/fail), ``correct``, ``mismatches`` (``pos`` in response tokens, ``important``, ``target_token``,
``draft_token``, ``alt_outcome``), ``features`` (``dd`` ``[M, d_draft]`` and ``dt`` ``[M, d]`` float32,
base64 little-endian), ``truncated``, ``skipped`` (label ``answer``: the target gave no final answer within the cap,
so nothing was searched, as the authors drop such prompts), ``wall_s``.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

import runners.datasets  # noqa: F401  (fills DATASETS)
import runners.scorers  # noqa: F401  (fills SCORERS)
from runners.autojudge.artefact import mining_dataset_config, mining_identity, root
from runners.autojudge.batch_mining import mine_batched
from runners.autojudge.cli import hydra_entry
from runners.autojudge.mining import MinedItem, Mismatch, Tracked, mine_prompt, search
from runners.autojudge.mining_config import check_mining
from runners.backends.hf_loop import HFLoopBackend
from runners.backends.kv_state import KVState, PrefixCache
from runners.config.errors import ConfigError
from runners.models.loader import load_pair
from runners.records.provenance import provenance
from runners.records.record import RunRecord
from runners.records.schema import read_samples
from runners.registry import DATASETS, SCORERS, build

_logger = logging.getLogger(__name__)

NO_ANSWER = "[invalid]"  # lm-eval's filtered answer when no final answer was found


def encode_rows(rows: list[torch.Tensor], width: int) -> str:
    """``[M, width]`` float32 rows as base64 (little-endian); M may be 0."""
    arr = torch.stack(rows).numpy() if rows else np.zeros((0, width), dtype=np.float32)
    return base64.b64encode(arr.astype("<f4").tobytes()).decode("ascii")


def decode_rows(text: str, width: int) -> np.ndarray:
    """Inverse of :func:`encode_rows`: ``[M, width]`` float32."""
    return np.frombuffer(base64.b64decode(text), dtype="<f4").reshape(-1, width)


def outcome_function(
    scorer: Any, sample: Any, label: str, decode: Callable[[list[int]], str]
) -> Callable:
    """``outcome(response_ids)``: the scorer's extracted answer (``answer``) or its 0/1 (``correctness``)."""
    answer_key = "filtered," + scorer.metric.split(",", 1)[-1]

    def outcome(ids: list[int]) -> Any:
        res = scorer.score([sample], [decode(ids)])[0]
        if label == "correctness":
            return int(res["correct"])
        if answer_key not in res:
            raise ConfigError(
                f"method.judge.mining.label=answer needs a scorer that extracts an answer ({answer_key}); "
                f"scorer {type(scorer).__name__} does not: use label=correctness"
            )
        return str(res[answer_key])

    return outcome


def mine(
    pair_cfg: Mapping[str, Any],
    judge_cfg: Mapping[str, Any],
    log: Callable[[str], None] | None = None,
) -> dict:
    """Mine (or resume) the records of ``method.judge.mining`` for ``pair``; return the summary.

    Raises:
        runners.config.validate.ConfigError: an invalid mining field (before any model loads).
        runners.datasets.sources.DatasetUnavailableError: the mining data has no source here.
        RuntimeError: another live process is mining the same records.
    """
    log = log or _logger.info
    m = check_mining(judge_cfg)
    record = RunRecord(root() / "mining", mining_identity(pair_cfg, judge_cfg), kind="mine")
    ds_cfg = mining_dataset_config(m)
    dataset = build(DATASETS, ds_cfg)
    samples = dataset.load()
    tag = f"{m['dataset']}/{m['split']} offset {ds_cfg['offset']} n={len(samples)}"
    head = f"[mine {record.run_id}] {tag}"
    with record:
        skip = record.open_or_skip(
            lambda: {**provenance(), "mining_key": record.run_id},
            num_expected=len(samples),
            tag=tag,
            log=log,
        )
        if skip is not None and skip.get("running_elsewhere"):
            raise RuntimeError(f"{head}: another process is mining these records ({record.dir})")
        if skip is not None:
            return skip
        done_ids = record.done_ids() | reuse_other_limits(record, samples, log)
        todo = [(i, s) for i, s in enumerate(samples) if s.sample_id not in done_ids]
        log(f"{head}: {len(samples) - len(todo)} done, {len(todo)} to go")
        if todo:
            mine_prompts(pair_cfg, m, dataset, todo, record, head, log)
        summary = mining_summary(record, samples, dataset)
        record.write_summary(summary)
    log(
        f"{head}: {summary['num_mismatches']} mismatches, {summary['num_important']} important ({record.dir})"
    )
    return summary


def _without_limit(identity: Mapping[str, Any]) -> dict:
    """A mining identity without the number of prompts (``dataset.limit``, ``mining.limit``)."""
    out = json.loads(json.dumps(identity, sort_keys=True, default=str))
    for part in ("dataset", "mining"):
        if isinstance(out.get(part), dict):
            out[part].pop("limit", None)
    return out


def reuse_other_limits(
    record: RunRecord, samples: Sequence[Any], log: Callable[[str], None]
) -> set[str]:
    """Copy into ``record`` the prompts of ``samples`` that a mining record of the same settings but another
    ``limit`` holds (a prompt's search does not depend on how many prompts are mined), so a larger mining set
    extends a smaller one instead of redoing it. Returns the sample ids copied."""
    have = record.done_ids()
    wanted = {s.sample_id for s in samples} - have
    mine_id = _without_limit(record.cfg)
    copied: set[str] = set()
    for other in sorted(p for p in record.dir.parent.iterdir() if p != record.dir):
        cfg_path = other / "config.json"
        if not wanted - copied or not cfg_path.is_file():
            continue
        if _without_limit(json.loads(cfg_path.read_text())) != mine_id:
            continue
        lines = [
            r for r in read_samples(other / "samples.jsonl") if r["sample_id"] in wanted - copied
        ]
        for r in lines:
            record.append(r)
            copied.add(r["sample_id"])
        if lines:
            log(
                f"[mine {record.run_id}] {len(lines)} prompts reused from mining {other.name} (same settings)"
            )
    return copied


class _Text:
    """The response text as the scorer sees it: EOS dropped, cut at the first stop string."""

    def __init__(self, tokenizer: Any, stop: list[str], eos: set[int]) -> None:
        self.tok, self.stop, self.eos = tokenizer, stop, eos

    def decode(self, ids: list[int]) -> str:
        text = self.tok.decode([i for i in ids if i not in self.eos], skip_special_tokens=True)
        cuts = [text.find(s) for s in self.stop if s in text]
        return text[: min(cuts)] if cuts else text

    def finished(self, ids: list[int]) -> bool:
        return bool(ids) and (
            ids[-1] in self.eos
            or any(s in self.tok.decode(ids, skip_special_tokens=True) for s in self.stop)
        )


def mine_prompts(
    pair_cfg: Mapping[str, Any],
    m: Mapping[str, Any],
    dataset: Any,
    todo: Sequence[tuple[int, Any]],
    record: RunRecord,
    head: str,
    log: Callable[[str], None],
) -> None:
    """Load the pair and append one mined record per prompt of ``todo`` (Algorithm 1 on each), each as soon as its
    search ends.

    ``todo``: ``(index, sample)`` pairs, ``index`` the prompt's position in the mining data set (stored in its
    record: training reads the prompts in that order whatever order they were written in). ``m["batch_size"]``
    1 with ``lookahead`` 0: one prompt at a time (:func:`runners.autojudge.mining.mine_prompt`); otherwise B
    prompts' searches decoded together, each row with up to ``m["lookahead"]`` guessed tokens per forward
    (:func:`runners.autojudge.batch_mining.mine_batched`), same labels; a prompt finished while others
    still decode is written at once, so an interruption loses only the prompts still decoding.
    """
    scorer = build(SCORERS, {"name": dataset.scorer})
    pair = load_pair(pair_cfg, need_draft=True, log=log)
    backend = HFLoopBackend(pair, prefix_caching=True)
    caches = (PrefixCache(), PrefixCache())
    text = _Text(pair.tokenizer, list(dataset.stop), backend.eos_ids)
    cap = int(dataset.max_new_tokens)
    skip = (lambda o: o == NO_ANSWER) if m["label"] == "answer" else None

    tally = _Tally(head, len(todo), log)
    progress = tally.progress

    def done(k: int, item: MinedItem, wall_s: float) -> None:
        index, sample = todo[k - 1]
        record.append(mined_record(sample, index, item, scorer, text.decode, pair, wall_s))
        tally.add(k, item)

    if int(m["batch_size"]) == 1 and not m.get("lookahead"):
        for k, (_, sample) in enumerate(todo, 1):
            t0 = time.perf_counter()
            item = mine_prompt(
                Tracked(KVState(pair.target, caches[0])),
                Tracked(KVState(pair.draft, caches[1])),
                backend.encode(sample),
                max_new_tokens=cap,
                finished=text.finished,
                outcome=outcome_function(scorer, sample, str(m["label"]), text.decode),
                max_mismatches=m.get("max_mismatches"),
                on_mismatch=progress(k, t0),
                skip=skip,
            )
            done(k, item, time.perf_counter() - t0)
        return
    searches = (
        search(
            Tracked(KVState(pair.draft, caches[1])),
            backend.encode(sample),
            outcome=outcome_function(scorer, sample, str(m["label"]), text.decode),
            max_mismatches=m.get("max_mismatches"),
            on_mismatch=progress(k, time.perf_counter()),
            skip=skip,
        )
        for k, (_, sample) in enumerate(todo, 1)
    )
    stats: dict = {}
    for index, item, wall_s in mine_batched(
        pair.target,
        searches,
        batch_size=int(m["batch_size"]),
        max_new_tokens=cap,
        finished=text.finished,
        prefix_cache=caches[0],
        lookahead=int(m.get("lookahead") or 0),
        stats=stats,
    ):
        done(index + 1, item, wall_s)
    log_lookahead(stats, head, log)


class _Tally:
    """Prompts and mismatches written so far, logged with the rate and an ETA as each prompt ends."""

    def __init__(self, head: str, total: int, log: Callable[[str], None]) -> None:
        self.head, self.total, self.log = head, total, log
        self.prompts = self.mismatches = 0
        self.t0 = time.perf_counter()

    def progress(self, k: int, t0: float) -> Callable[[Mismatch], None]:
        """The per-mismatch log line of prompt ``k`` (its search started at ``t0``)."""
        return lambda x: self.log(
            f"{self.head}: prompt {k}/{self.total} mismatch at token {x.pos}: "
            f"{'important' if x.important else 'unimportant'} ({time.perf_counter() - t0:.0f} s)"
        )

    def add(self, k: int, item: MinedItem) -> None:
        self.prompts += 1
        self.mismatches += len(item.mismatches)
        el = time.perf_counter() - self.t0
        self.log(
            f"{self.head}: prompt {k} done, {len(item.mismatches)} mismatches "
            f"({sum(x.important for x in item.mismatches)} important); {self.prompts}/{self.total} prompts, "
            f"{self.mismatches} mismatches in {el:.0f} s ({60 * self.mismatches / el:.1f}/min), "
            f"ETA {el / self.prompts * (self.total - self.prompts):.0f} s"
        )


def log_lookahead(stats: Mapping[str, int], head: str, log: Callable[[str], None]) -> None:
    """One line on the batched decoding: target tokens per forward and the guesses confirmed."""
    if stats.get("forwards"):
        log(
            f"{head}: {stats['kept']} target tokens in {stats['forwards']} batched forwards "
            f"({stats['kept'] / stats['forwards']:.1f} per forward, {stats['fed']} fed); guessed tokens confirmed: "
            f"{stats['accepted']}/{stats['guessed']}"
        )


def mined_record(
    sample: Any,
    index: int,
    item: MinedItem,
    scorer: Any,
    decode: Callable[[list[int]], str],
    pair: Any,
    wall_s: float,
) -> dict:
    """One line of the mining record (module docstring); ``index``: the prompt's position in the mining data set;
    ``wall_s``: the prompt's seconds (its share of the wall time when prompts are decoded together)."""
    d_draft = pair.draft.config.hidden_size
    d_target = pair.target.config.hidden_size
    return {
        "sample_id": sample.sample_id,
        "index": index,
        "response_token_ids": item.response,
        "outcome": item.outcome,
        "correct": int(scorer.score([sample], [decode(item.response)])[0]["correct"]),
        "mismatches": [
            {
                "pos": x.pos,
                "important": x.important,
                "target_token": x.target_token,
                "draft_token": x.draft_token,
                "alt_outcome": x.alt_outcome,
            }
            for x in item.mismatches
        ],
        "features": {
            "d_draft": d_draft,
            "d_target": d_target,
            "dd": encode_rows([x.dd for x in item.mismatches], d_draft),
            "dt": encode_rows([x.dt for x in item.mismatches], d_target),
        },
        "truncated": item.truncated,
        "skipped": item.skipped,
        "wall_s": wall_s,
    }


def mining_summary(record: RunRecord, samples: Sequence[Any], dataset: Any) -> dict:
    """The mining record's summary over the selected prompts (counts, target accuracy, time, provenance)."""
    wanted = {s.sample_id for s in samples}
    recs = [r for r in record.samples() if r["sample_id"] in wanted]
    mism = [x for r in recs for x in r["mismatches"]]
    return {
        "mining_key": record.run_id,
        "num_samples": len(recs),
        "num_expected": len(samples),
        "complete": len(recs) == len(samples),
        "num_mismatches": len(mism),
        "num_important": sum(bool(x["important"]) for x in mism),
        "data_source": dataset.provenance,
        "num_skipped": sum(bool(r.get("skipped")) for r in recs),
        "target_accuracy": float(np.mean([r["correct"] for r in recs])) if recs else None,
        "wall_s": sum(r["wall_s"] for r in recs),
        **provenance(),
    }


def main() -> None:
    hydra_entry("mine", mine)


if __name__ == "__main__":
    sys.exit(main())
