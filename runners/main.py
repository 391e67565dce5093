"""Hydra entry point: ``python -m runners.main [overrides]`` (``-m`` for sweeps). No logic here."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from runners.validate import ConfigError


@hydra.main(version_base="1.3", config_path="../conf", config_name="run")
def main(cfg: DictConfig) -> float | None:
    from runners.run import run

    try:
        summary = run(cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    return summary.get("speed/tok_per_s")


if __name__ == "__main__":
    main()
