"""Registries of swappable parts; a Hydra config group name selects an entry.

Group = registry = package: ``conf/backend/`` <-> ``BACKENDS`` <-> ``runners/backends/``, and likewise
``DATASETS`` (``runners/datasets/``), ``SCORERS`` (``runners/scorers/``); criteria live in
:data:`criteria.registry.CRITERIA`. A YAML file's stem equals its registry key and its ``name:`` field;
the rest of the file is constructor kwargs plus ``version``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from criteria.registry import CRITERIA, Registry, UnknownNameError

BACKENDS: Registry = Registry("backend")
DATASETS: Registry = Registry("dataset")
SCORERS: Registry = Registry("scorer")

# Keys read by the runner itself, never passed to constructors.
RESERVED_KEYS = ("name", "version", "_target_", "requires_gpu", "loads_hf_weights")


def build(registry: Registry, cfg: Mapping[str, Any], **extra: Any) -> Any:
    """Instantiate ``registry.get(cfg['name'])`` with the remaining keys of ``cfg`` plus ``extra``.

    Raises:
        UnknownNameError: unknown ``cfg['name']`` (message lists the allowed values).
    """
    kwargs = {k: v for k, v in dict(cfg).items() if k not in RESERVED_KEYS}
    kwargs.update(extra)
    return registry.get(cfg["name"])(**kwargs)


__all__ = ["BACKENDS", "CRITERIA", "DATASETS", "SCORERS", "Registry", "UnknownNameError", "build"]
