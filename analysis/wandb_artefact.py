"""Log a rendered artefact (its table and figures) to Weights & Biases: a side effect at the edge of analysis.

Off unless ``DROPMATCH_WANDB=online|offline``. One ``job_type="analysis"`` run per table/figure: the table as a
``wandb.Table`` and ``table.csv``, images as ``figure/<stem>``, every file in one W&B artifact. Project and
entity from ``WANDB_PROJECT`` (default ``dropmatch-bench``) and ``WANDB_ENTITY``; offline runs go under the
results directory's ``wandb/`` (upload with ``wandb sync``). Run records are logged by ``runners/loggers/wandb_logger.py``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from runners.paths import results_dir

MODES = ("online", "offline")


def log_artefact(
    name: str, table_df: Any, image_paths: Iterable[str | os.PathLike] = ()
) -> str | None:
    """Log one table (and its figure files) to W&B; return the local run directory, or None when off.

    Args:
        name: the artefact stem (``table6``, ``fig3`` ...): run name, group and W&B artifact name.
        table_df: the table as a pandas DataFrame.
        image_paths: figure files (png/pdf/svg); png/jpg are also logged as images.

    Raises:
        ImportError: ``DROPMATCH_WANDB`` is set but the ``wandb`` package (extra ``[wandb]``) is missing.
    """
    mode = os.environ.get("DROPMATCH_WANDB", "")
    if mode not in MODES:
        return None
    try:
        import wandb
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError(
            "DROPMATCH_WANDB is set but wandb is not installed: pip install 'dropmatch-bench[wandb]'"
        ) from e

    out_dir = results_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT") or "dropmatch-bench",
        entity=os.environ.get("WANDB_ENTITY"),
        group=name,
        name=name,
        job_type="analysis",
        mode=mode,
        dir=str(out_dir),
        reinit="finish_previous",
        settings=wandb.Settings(silent=True),
    )
    try:
        art = wandb.Artifact(name, type="artefact")
        with tempfile.TemporaryDirectory() as tmp:
            csv = Path(tmp) / "table.csv"
            table_df.to_csv(csv, index=False)
            art.add_file(str(csv))
            payload: dict[str, Any] = {
                "table": wandb.Table(dataframe=table_df.reset_index(drop=True))
            }
            for p in map(Path, image_paths):
                art.add_file(str(p))
                if p.suffix.lower() in (".png", ".jpg", ".jpeg"):
                    payload[f"figure/{p.stem}"] = wandb.Image(str(p))
            run.log(payload)
            run.log_artifact(art)
        return str(Path(run.dir).parent)
    finally:
        run.finish()
