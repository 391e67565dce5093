"""Which decode runs are judged, and the config (hence run id) of the judging run of one decode run.

A judging run is a measurement run (:mod:`runners.measure.base`) with its own record in ``results/runs/<id>/``.
Its config is the judged decode run's stored config with ``method`` replaced by the judging method block and a
``judge`` block added; the run id therefore hashes the decode's settings, the judged run id, the protocol, the
baseline run id and the judge's identity (model and weights sha256 / revision / API model name, dtype, reply cap,
prompt files' sha256). A different judge is a different judging run; the decode records are only read.

Baseline of a pairwise protocol: the complete run of ``baseline`` (a method name, the paper's "standard"
decoding: ``sd``) with the same settings as the judged run except the method (same pair, weights, dataset,
items, caps, L, backend, seed), the newest if several; or ``reference``: the dataset file's reference answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from runners.judging.judges import judge_identity
from runners.judging.prompts import prompt_files
from runners.records.record import iter_runs
from runners.records.run_id import identity_of

JUDGING_VERSION = 1  # the judgment line and summary layout; bump when their meaning changes
SUBSETS = ("all", "calibration")
# Decode config fields a baseline run may differ in (besides being another method).
BASELINE_FREE = ("method", "dropmatch", "artefact")


def is_decode(cfg: Mapping[str, Any]) -> bool:
    """A decoding run (not a measurement such as a judging, timing or similarity run)."""
    return not (cfg.get("method") or {}).get("measure")


def protocol_of(cfg: Mapping[str, Any], judging: Mapping[str, Any]) -> str | None:
    """The protocol that judges this run's dataset (``judging.protocol.<dataset>``), or None (not judged)."""
    return (judging.get("protocol") or {}).get(str(cfg["dataset"]["name"]))


def _setting(cfg: Mapping[str, Any]) -> dict:
    return {k: v for k, v in identity_of(cfg).items() if k not in BASELINE_FREE}


def find_baseline(cfg: Mapping[str, Any], method: str, root: Path) -> str | None:
    """Run id of the newest complete ``method`` run with the same setting as ``cfg`` (module docstring), or None."""
    want = _setting(cfg)
    best: tuple[str, str] | None = None
    for c, s, d in iter_runs(root):
        if (
            is_decode(c)
            and c["method"].get("name") == method
            and s.get("complete")
            and _setting(c) == want
        ):
            key = (str(s.get("date_utc") or ""), d.name)
            if best is None or key > best:
                best = key
    return best[1] if best else None


def judge_block(judge_cfg: Mapping[str, Any]) -> dict:
    """The ``judge`` block of a judging run: the judge's config plus its identity and the prompt files' sha256.

    Raises:
        runners.config.errors.ConfigError: an invalid judge config (e.g. judge=api without a model).
    """
    return {
        **dict(judge_cfg),
        "identity": judge_identity(judge_cfg),
        "prompt_files": prompt_files(),
    }


def judge_config(
    src_cfg: Mapping[str, Any],
    src_run_id: str,
    protocol: str,
    judge: Mapping[str, Any],
    baseline: Mapping[str, Any] | None,
    subset: str = "all",
    calibration_n: int = 10,
) -> dict:
    """The resolved config of the judging run of decode run ``src_run_id`` (module docstring).

    Args:
        judge: :func:`judge_block` of the judge.
        baseline: ``{"method": name, "run_id": id}`` or ``{"method": "reference"}`` for a pairwise protocol,
            else None.
        subset: ``all`` questions, or the ``calibration`` subset (the ``calibration_n`` lowest question ids).
    """
    c = {k: v for k, v in src_cfg.items() if k not in ("method", "artefact")}
    method = {
        "name": "judge",
        "measure": "judge",
        "version": JUDGING_VERSION,
        "protocol": protocol,
        "source_method": str(src_cfg["method"]["name"]),
        "source_run_id": src_run_id,
        "baseline": dict(baseline) if baseline else None,
        "subset": subset,
    }
    if subset == "calibration":
        method["calibration_n"] = int(calibration_n)
    c["method"] = method
    c["judge"] = dict(judge)
    c["artefact"] = f"judge:{src_cfg.get('artefact')}"
    return c


def judge_runs_of(root: Path, source_run_ids: Iterable[str]) -> list[tuple[dict, dict, Path]]:
    """``(config, summary, dir)`` of every judging run (any judge) of the given decode runs."""
    want = set(source_run_ids)
    return [
        (c, s, d)
        for c, s, d in iter_runs(root)
        if (c.get("method") or {}).get("measure") == "judge"
        and c["method"].get("source_run_id") in want
    ]
