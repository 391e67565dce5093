"""Measurement runs: Table 4's verify-step timings, Fig. 3's similarity scores, the side-by-side benchmark.

Importing this package registers them in :data:`runners.measure.base.MEASUREMENTS` (keys = ``method.measure``).
"""

from runners.measure import bench, latency, similarity  # noqa: F401,E402  (registration)
from runners.measure.base import (
    MEASUREMENTS,
    MissingRecordsError,
    check,
    resolve_measurement,
    run_measurement,
)

__all__ = [
    "MEASUREMENTS",
    "MissingRecordsError",
    "check",
    "resolve_measurement",
    "run_measurement",
]
