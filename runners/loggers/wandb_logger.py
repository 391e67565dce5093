"""Weights & Biases logging (``logger=wandb``, ``conf/logger/wandb.yaml``): a side effect at the edge.

The run record on disk stays the source of truth; W&B mirrors it.

One run record = one W&B run:

- ``id`` = the record's run id (``resume="allow"``), so a run resumed after a kill continues the same W&B
  run when online; ``name`` = ``"<method> L=<L> <dataset> <run id>"``;
- resume: W&B cannot resume an offline run (wandb 0.31: every ``init`` in offline mode starts a new
  ``offline-run-*`` directory, and ``wandb sync`` of a later directory with the same id replaces the earlier
  one's history). So whenever the W&B run did not come back resumed (always offline; online when the server
  has no such run), the samples already in the record are logged again first: the newest directory of a run
  id holds the whole history from sample 1, and syncing it (alone or after the older ones) gives the
  complete run. Online, a resumed W&B run already has them, and history continues after them;
- ``group`` = ``logger.group``, else the artefact (``experiment=...``), else ``sweep-<sweep dir name>``
  for a multirun: every run of one sweep lands in one group;
- ``config`` = the resolved run config (what ``config.json`` holds) plus ``run_id``;
- history, one row per sample as it is recorded, at step = the sample's ordinal in the record (a resumed
  run continues after the samples already on disk): ``sample/*`` (tau, acceptance rate, tokens, tok/s,
  wall seconds, drafts, accepted, numeric quality fields) and running ``run/*`` over the whole record
  (samples, tau, tok/s);
- at the end: every ``spec/``, ``speed/``, ``quality/`` summary value in the W&B summary, and the
  per-position acceptance curve as a line plot ``spec/per_position_rate`` over its ``wandb.Table``
  (``spec/per_position_rate_table``, columns ``position``, ``per_position_rate``).

``logger.mode=offline`` writes ``<dir>/wandb/offline-run-*/`` (``dir`` defaults to the results directory);
upload later with ``wandb sync <dir>/wandb/offline-run-*``.

:func:`analysis.wandb_artefact.log_artefact` logs an artefact's tables and figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from runners.config.errors import ConfigError
from runners.config.optional_deps import require
from runners.paths import results_dir
from runners.records.record import read_samples

MODES = ("online", "offline", "disabled")
DEFAULTS = {
    "mode": "online",
    "project": "dropmatch-bench",
    "entity": None,
    "group": None,
    "tags": [],
    "dir": None,
    "log_samples": True,
}


def _settings(cfg: Mapping[str, Any]) -> dict:
    out = {
        **DEFAULTS,
        **{k: v for k, v in dict(cfg or {}).items() if v is not None or k == "group"},
    }
    if out["mode"] not in MODES:
        raise ConfigError(f"logger.mode={out['mode']!r} is invalid; allowed: {', '.join(MODES)}")
    if out["dir"] is None:
        out["dir"] = str(results_dir())
    Path(out["dir"]).mkdir(parents=True, exist_ok=True)
    return out


def _sweep_group() -> str | None:
    """``sweep-<sweep dir name>`` inside a Hydra multirun job, else None."""
    try:
        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            return "sweep-" + Path(str(HydraConfig.get().sweep.dir)).name
    except Exception:
        pass
    return None


def _recorded_samples(run_id: str) -> list[dict]:
    """Samples already in the run record (non-empty when a killed run resumes)."""
    return read_samples(results_dir() / "runs" / run_id / "samples.jsonl")


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "/"))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[key] = v
    return out


class WandbLogger:
    """Mirror one run into W&B (see the module docstring for what goes where).

    Args:
        cfg: the ``logger`` config (``conf/logger/wandb.yaml``).
        run_id: the record's run id.
        run_cfg: the resolved run config.

    Raises:
        runners.config.errors.ConfigError: wandb would not start the run (``wandb.errors.Error``: no API key
            online, a refused key, no server); the message names ``logger.mode=offline`` and ``logger=none``.
    """

    def __init__(self, cfg: Mapping[str, Any], run_id: str, run_cfg: Mapping[str, Any]) -> None:
        wandb = require("wandb", "logger=wandb")

        s = _settings(cfg)
        self.wandb = wandb
        self.log_samples = bool(s["log_samples"])
        self.n = 0
        self.tokens = self.drafts = self.accepted = 0
        self.wall = 0.0
        recorded = _recorded_samples(run_id)  # non-empty when a killed run resumes
        group = s["group"] or run_cfg.get("artefact") or _sweep_group()
        name = f"{run_cfg['method']['name']} L={run_cfg.get('L')} {run_cfg['dataset']['name']} {run_id}"
        # no key, a refused key, no server: wandb's own verdict, in one line instead of its traceback
        try:
            self.run = wandb.init(
                project=s["project"],
                entity=s["entity"],
                group=group,
                name=name,
                id=run_id,
                resume="allow",
                job_type="run",
                mode=s["mode"],
                dir=s["dir"],
                tags=list(s["tags"] or []),
                reinit="finish_previous",
                config={**{k: v for k, v in run_cfg.items() if k != "logger"}, "run_id": run_id},
                settings=wandb.Settings(silent=True),
            )
        except wandb.errors.Error as e:
            reason = " ".join(str(e).split())  # wandb's message may span lines (a retry's log)
            raise ConfigError(
                f"logger=wandb (logger.mode={s['mode']}) could not start: {reason}; allowed: log in first "
                "(`wandb login`, or WANDB_API_KEY), logger.mode=offline (upload later with `wandb sync`), "
                "or logger=none. The run record is kept: rerun with one of these to resume it"
            ) from None
        self.run.define_metric("sample/index")
        self.run.define_metric("sample/*", step_metric="sample/index")
        self.run.define_metric("run/*", step_metric="sample/index")
        if self.run.resumed:  # the W&B run has the recorded samples: history continues after them
            for rec in recorded:
                self._count(rec)
        else:  # a fresh W&B run (always offline): it gets the whole record, see the module docstring
            for rec in recorded:
                self.log_sample(rec)

    def log_sample(self, rec: Mapping[str, Any]) -> None:
        """One history row per recorded sample."""
        drafts, accepted, draft_tokens, tokens, wall = self._count(rec)
        if not self.log_samples:
            return
        row = {
            "sample/index": self.n,
            "sample/tau": 1.0 + accepted / drafts if drafts else 1.0,
            "sample/acceptance_rate": accepted / draft_tokens if draft_tokens else None,
            "sample/num_output_tokens": tokens,
            "sample/tok_per_s": tokens / wall if wall > 0 else None,
            "sample/wall_s": wall,
            "sample/num_drafts": drafts,
            "sample/num_accepted_tokens": accepted,
            "run/num_samples": self.n,
            "run/tau": 1.0 + self.accepted / self.drafts if self.drafts else 1.0,
            "run/tok_per_s": self.tokens / self.wall if self.wall > 0 else None,
        }
        quality = rec.get("quality")
        if isinstance(quality, Mapping):
            row.update(
                {
                    f"sample/quality/{k}": float(v)
                    for k, v in _flatten(quality).items()
                    if isinstance(v, (int, float))
                }
            )
        # explicit step = sample ordinal: monotonic across resumed sessions, also when offline dirs are synced
        self.run.log({k: v for k, v in row.items() if v is not None}, step=self.n)

    def _count(self, rec: Mapping[str, Any]) -> tuple[int, int, int, int, float]:
        spec, speed = rec.get("spec") or {}, rec.get("speed") or {}
        drafts, accepted = int(spec.get("num_drafts", 0)), int(spec.get("num_accepted_tokens", 0))
        draft_tokens = int(spec.get("num_draft_tokens", 0))
        tokens, wall = int(speed.get("num_output_tokens", 0)), float(speed.get("wall_s", 0.0))
        self.n += 1
        self.tokens, self.drafts, self.accepted, self.wall = (
            self.tokens + tokens,
            self.drafts + drafts,
            self.accepted + accepted,
            self.wall + wall,
        )
        return drafts, accepted, draft_tokens, tokens, wall

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        """Summary values plus the per-position acceptance curve."""
        self.run.summary.update(_flatten(summary))
        rates = summary.get("spec/per_position_rate") or []
        if rates:
            table = self.wandb.Table(
                columns=["position", "per_position_rate"],
                data=[[i + 1, float(r)] for i, r in enumerate(rates)],
            )
            # the plot stores its table as "spec/per_position_rate_table" (wandb appends "_table")
            self.run.log(
                {
                    "spec/per_position_rate": self.wandb.plot.line(
                        table, "position", "per_position_rate", title="Per-position acceptance rate"
                    )
                },
                step=self.n,
            )

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
