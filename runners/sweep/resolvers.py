"""The ``dm.*`` resolvers that ``conf/`` uses, registered by :func:`register_resolvers`.

- ``${dm.unique:}`` (:func:`unique_suffix`): ``conf/run.yaml`` appends it to the time stamp of ``hydra.run.dir``
  and ``hydra.sweep.dir``, so two commands started in the same second get their own directories (their
  ``.hydra/`` and job status files would otherwise overwrite each other). Its value is cached in the config
  (``use_cache``), so every job of one sweep, and Hydra's copies of the config (``OmegaConf.copy_cache``, also
  when pickled to a Slurm or subprocess job), sees the same directory.
- ``${dm.results:}`` (:func:`runners.paths.results_dir`): the results directory Hydra's run and sweep directories
  go under, the same one the records use (``DROPMATCH_RESULTS``, unset or empty: ``<repo>/results`` wherever the
  command starts).
- ``${dm.gpus:<requires_gpu>,<tensor_parallel_size>}`` (:func:`gpus_per_node`): the GPUs a launcher requests per
  node (``conf/hydra/launcher/``).

Every process that composes or resolves ``conf/run.yaml`` registers them first: ``runners.main`` and the
Auto-Judge entry before Hydra starts, :mod:`runners.sweep.callbacks` in the jobs that unpickle it.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from omegaconf import OmegaConf

from runners.paths import results_dir


def unique_suffix() -> str:
    """``<pid>-<6 random hex digits>``: unique among commands started at the same instant, also on several
    hosts writing one shared results directory."""
    return f"{os.getpid()}-{secrets.token_hex(3)}"


def gpus_per_node(requires_gpu: Any, tensor_parallel_size: Any) -> int | None:
    """GPUs one run of a pair needs on its node: ``tensor_parallel_size`` if the pair needs a GPU, else None."""
    return int(tensor_parallel_size) if str(requires_gpu).lower() == "true" else None


def register_resolvers() -> None:
    """Register ``dm.unique``, ``dm.results`` and ``dm.gpus`` (once per process; later calls do nothing)."""
    if not OmegaConf.has_resolver("dm.results"):
        OmegaConf.register_new_resolver("dm.results", lambda: str(results_dir()))
    if not OmegaConf.has_resolver("dm.unique"):
        OmegaConf.register_new_resolver("dm.unique", unique_suffix, use_cache=True)
    if not OmegaConf.has_resolver("dm.gpus"):
        OmegaConf.register_new_resolver("dm.gpus", gpus_per_node)
