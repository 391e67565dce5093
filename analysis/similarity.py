"""Bidirectional entailment from directed entailment probabilities (pure numpy; Fig. 3(b)).

Paper: DropMatch (arXiv 2603.03333) Fig. 3(b), following Kuhn et al. 2023 Alg. 1: outputs i and j are
semantically equivalent iff i entails j and j entails i. The directed probabilities ``P[i, j]`` =
P(i entails j) are measured by the ``method=similarity`` runs (``runners/measure/similarity.py``) and read
here from their records.
"""

from __future__ import annotations

import math

import numpy as np

ENTAILMENT_THRESHOLD = (
    0.5  # a direction entails when P(entailment) > 0.5 (argmax for a 2-way yes/no)
)


def bidirectional(
    P: np.ndarray, threshold: float = ENTAILMENT_THRESHOLD
) -> tuple[np.ndarray, np.ndarray]:
    """Bidirectional-entailment matrices of directed probabilities ``P`` ``[n, n]`` (float, ``P[i, j]`` = P(i entails j)).

    Returns:
        ``(binary, soft)``, each ``[n, n]`` float64, symmetric: ``binary[i, j]`` = 1.0 if both directions
        exceed ``threshold`` else 0.0 (diagonal 1); ``soft[i, j]`` = ``min(P[i, j], P[j, i])``.
    """
    P = np.asarray(P, dtype=np.float64)
    binary = ((P > threshold) & (P.T > threshold)).astype(np.float64)
    np.fill_diagonal(binary, 1.0)
    return binary, np.minimum(P, P.T)


def off_diagonal_mean(m: np.ndarray) -> float:
    """Mean of the off-diagonal entries of a square matrix (NaN for 1x1)."""
    m = np.asarray(m)
    n = m.shape[0]
    return float(m[~np.eye(n, dtype=bool)].mean()) if n > 1 else math.nan
