"""The benchmark's config as a run resolves it (Hydra compose + the measurement's checks), without loading models."""

from __future__ import annotations

from hydra import compose, initialize_config_dir

from runners.measure import resolve_measurement
from runners.paths import REPO_ROOT


def resolve_bench(*overrides: str) -> dict:
    """``experiment=bench profile=default`` plus ``overrides``, checked as a run checks it.

    Raises:
        runners.config.errors.ConfigError: a field the bench refuses (naming it).
    """
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="run", overrides=["experiment=bench", "profile=default", *overrides]
        )
    return resolve_measurement(cfg, identify_models=False)
