"""Where the Auto-Judge artefacts live and what identifies them.

Two artefacts, both records under ``results/autojudge/`` (``DROPMATCH_RESULTS``; git-ignored like ``runs/``):

* mining records ``results/autojudge/mining/<mining_key>/``: a :class:`runners.records.record.RunRecord` (config,
  meta, append-only ``samples.jsonl`` with one line per mined prompt, summary); resumable, crash-safe.
  ``mining_key`` hashes the pair's identity (names, pinned sha256, dtype; not where it was found), the
  mining dataset's config and ``method.judge.mining``.
* the judge ``results/autojudge/judges/<judge_key>/``: ``judge.pt`` (tensors: weight, bias, mean, scale,
  features) and ``judge.json`` (config, data sizes, validation probabilities and labels, metrics).
  ``judge_key`` hashes ``mining_key`` and ``method.judge.train``; it is rebuilt only when the key changes.

A decoding run with an Auto-Judge method carries ``method.judge.key`` (so its run id changes with the
judge) and is refused before anything loads when that judge does not exist (:func:`attach_judge`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runners.config.check_only import check_only
from runners.config.errors import ConfigError
from runners.paths import REPO_ROOT, results_dir
from runners.records.run_id import hashed_form, run_id_of

MINING_VERSION = (
    2  # bump when the search or the record layout changes (2: prompts without an answer skipped)
)
TRAIN_VERSION = 1  # bump when training or the judge layout changes


class JudgeMissingError(ConfigError):
    """The judge artefact a run needs has not been built."""


def root() -> Path:
    return results_dir() / "autojudge"


def dataset_config(name: str) -> dict:
    """``conf/dataset/<name>.yaml`` as a plain dict (the mining dataset, independent of the run's dataset)."""
    from omegaconf import OmegaConf

    path = REPO_ROOT / "conf" / "dataset" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"method.judge.mining.dataset={name!r} has no conf/dataset/{name}.yaml")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def mining_dataset_config(mining: Mapping[str, Any]) -> dict:
    """The dataset config the miner loads: the dataset's file with the mining split / window / sources."""
    ds = dataset_config(str(mining["dataset"]))
    ds.update(
        split=str(mining["split"]), offset=int(mining.get("offset") or 0), limit=mining.get("limit")
    )
    if mining.get("source_order"):
        ds["source"] = {**ds["source"], "order": list(mining["source_order"])}
    if mining.get("max_new_tokens"):
        ds["max_new_tokens"] = int(mining["max_new_tokens"])
    return ds


# ``method.judge.mining`` fields that say how the mining is scheduled, not what it finds: left out of the mining
# key (and of a decoding run's config), so records mined at any batch size are one artefact. ``batch_size``: the
# prompts whose searches are decoded together; ``lookahead``: tokens guessed per row and forward (the kept tokens
# are the target's greedy ones); each search's labels are those of the sequential search.
SCHEDULING = ("batch_size", "lookahead")


def mining_fields(mining: Mapping[str, Any]) -> dict:
    """``method.judge.mining`` without its :data:`SCHEDULING` fields."""
    return {k: v for k, v in mining.items() if k not in SCHEDULING}


def mining_identity(pair: Mapping[str, Any], judge: Mapping[str, Any]) -> dict:
    pair_id = {
        k: v
        for k, v in hashed_form(dict(pair)).items()
        if k in ("name", "target", "draft", "dtype")
    }
    return {
        "kind": "autojudge_mining",
        "version": MINING_VERSION,
        "pair": pair_id,
        "dataset": hashed_form(mining_dataset_config(judge["mining"])),
        "mining": mining_fields(judge["mining"]),
    }


def mining_key(pair: Mapping[str, Any], judge: Mapping[str, Any]) -> str:
    return run_id_of(mining_identity(pair, judge))


def judge_key(pair: Mapping[str, Any], judge: Mapping[str, Any]) -> str:
    return run_id_of(
        {
            "kind": "autojudge_judge",
            "version": TRAIN_VERSION,
            "mining_key": mining_key(pair, judge),
            "train": dict(judge["train"]),
            "name": judge.get("name"),
            "judge_version": judge.get("version"),
        }
    )


def judge_dir(key: str) -> Path:
    return root() / "judges" / key


def judge_info(key: str) -> dict | None:
    """``judge.json`` of a built judge, or None."""
    path = judge_dir(key) / "judge.json"
    if not (path.is_file() and (judge_dir(key) / "judge.pt").is_file()):
        return None
    return json.loads(path.read_text())


def build_command(c: Mapping[str, Any]) -> str:
    return (
        f"python -m runners.autojudge.build method={c['method']['name']} pair={c['pair']['name']} "
        f"profile={(c.get('profile') or {}).get('name', 'default')}"
    )


def attach_judge(c: dict) -> None:
    """For a resolved run config whose method has a ``judge``: set ``method.judge.key``; refuse if unbuilt.

    Also refuses an evaluation dataset window that overlaps the mining window of the same data.

    Raises:
        JudgeMissingError: no judge artefact for this pair and judge config (the message says how to build it).
        runners.config.validate.ConfigError: the evaluated items overlap the mined ones.
    """
    judge = c["method"].get("judge")
    if not isinstance(judge, Mapping):
        raise ConfigError(
            f"method={c['method']['name']}: method.judge must be a judge config (conf/autojudge/*.yaml)"
        )
    judge = dict(judge)
    judge.pop("key", None)
    # a decoding run never mines: its config (and run id) holds the judge without the mining's scheduling
    judge["mining"] = mining_fields(judge["mining"])
    key = judge_key(c["pair"], judge)
    c["method"]["judge"] = {**judge, "key": key}
    m, ds = judge["mining"], c["dataset"]
    if m["dataset"] == ds["name"] and str(m["split"]) == str(ds.get("split")):
        lo, hi = (
            int(m.get("offset") or 0),
            None if m.get("limit") is None else int(m.get("offset") or 0) + int(m["limit"]),
        )
        e_lo = int(ds.get("offset") or 0)
        e_hi = None if ds.get("limit") is None else e_lo + int(ds["limit"])
        if (hi is None or e_lo < hi) and (e_hi is None or lo < e_hi):
            raise ConfigError(
                f"dataset {ds['name']} items [{e_lo}, {e_hi or 'end'}) overlap the judge's mining items "
                f"[{lo}, {hi or 'end'}) of split {m['split']}; allowed: dataset.limit <= {lo - e_lo} "
                f"or another method.judge.mining window"
            )
    if judge_info(key) is None and not check_only():  # reproduce.sh builds it after the check
        raise JudgeMissingError(
            f"method={c['method']['name']} needs the Auto-Judge judge {key} (pair={c['pair']['name']}, "
            f"judge={judge.get('name')}), which has not been built ({judge_dir(key)} is missing); build it with "
            f"`{build_command(c)}` (mines {judge['mining']['dataset']} mismatches, then trains), or run "
            f"./reproduce.sh table8, which builds it first"
        )
