"""The scorer seam: grade decoded outputs of a dataset's samples, then aggregate.

A scorer is built from its registry key (``dataset.scorer``) by ``build(SCORERS, {"name": key})``;
every constructor argument has a default.

Metric names follow lm-eval's result keys ``"<metric>,<filter>"`` (``"exact_match,strict-match"``,
``"prompt_level_strict_acc,none"``); EvalPlus's are ``"pass@1,base"`` / ``"pass@1,plus"`` (and
``"pass@1,check"`` when only HumanEval's original tests could run). Means and standard errors are
lm-eval's (``lm_eval.api.metrics.mean`` / ``mean_stderr``), not re-implemented.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from runners.datasets.base import Sample
from runners.records.io import get_number


@runtime_checkable
class Scorer(Protocol):
    """Grades outputs of one benchmark.

    Attributes:
        metric: name of the primary metric (what ``"correct"`` / ``"accuracy"`` hold).
        higher_is_better: direction of the primary metric.
    """

    metric: str
    higher_is_better: bool

    def score(self, samples: list[Sample], outputs: list[str]) -> list[dict[str, Any]]:
        """Per-sample results, aligned with ``samples``.

        Each dict has ``"correct"`` (0 or 1, the primary metric of that sample) plus named metrics
        and diagnostics (e.g. the extracted answer). A malformed output (not a string, empty,
        unparsable, crashing code) scores 0 and never raises. Inputs are not mutated.

        Raises:
            ValueError: ``len(samples) != len(outputs)``.
        """
        ...

    def aggregate(self, per_sample: list[dict[str, Any]]) -> dict[str, Any]:
        """Run-level numbers from ``score``'s dicts.

        Returns:
            ``{"metric": name, "accuracy": mean of "correct" in [0, 1], "accuracy_stderr": standard
            error of that mean, "higher_is_better": bool, "n": count, <named metric>: value, ...}``.
        """
        ...


def check_aligned(samples: Sequence[Any], outputs: Sequence[Any]) -> None:
    if len(samples) != len(outputs):
        raise ValueError(f"{len(samples)} samples but {len(outputs)} outputs")


def as_text(output: Any) -> str:
    """The output as a string; ``None`` and other non-strings (malformed) become ``""``."""
    return output if isinstance(output, str) else ""


def summary(
    metric: str, higher_is_better: bool, per_sample: list[dict[str, Any]]
) -> dict[str, Any]:
    """The common part of ``aggregate``: primary accuracy (mean of ``correct``), its standard error
    (lm-eval's ``mean_stderr``, NaN below two samples), direction and count."""
    from lm_eval.api.metrics import mean, mean_stderr

    correct = [float(get_number(r, "correct", 0)) for r in per_sample]  # null (stored NaN): NaN
    return {
        "metric": metric,
        "accuracy": float(mean(correct)) if correct else math.nan,
        "accuracy_stderr": float(mean_stderr(correct)) if len(correct) > 1 else math.nan,
        "higher_is_better": higher_is_better,
        "n": len(correct),
    }
