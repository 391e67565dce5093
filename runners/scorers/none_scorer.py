"""The ``none`` scorer: for datasets without references (Spec-Bench prompts for Fig. 3).

Every sample gets ``correct = NaN``; the aggregate's accuracy is NaN, so no table mistakes it for 0.
"""

from __future__ import annotations

import math
from typing import Any

from runners.registry import SCORERS
from runners.scorers.base import check_aligned


@SCORERS.register("none")
class NoScorer:
    """No grading: ``{"correct": NaN}`` per sample."""

    metric = "none"
    higher_is_better = True

    def score(self, samples: list[Any], outputs: list[Any]) -> list[dict[str, Any]]:
        check_aligned(samples, outputs)
        return [{"correct": math.nan} for _ in samples]

    def aggregate(self, per_sample: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "accuracy": math.nan,
            "accuracy_stderr": math.nan,
            "higher_is_better": self.higher_is_better,
            "n": len(per_sample),
            "scoring_errors": 0,
        }
