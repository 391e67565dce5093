"""``DROPMATCH_CHECK_ONLY``: validate an artefact's sweeps, run nothing.

``reproduce.sh`` sets it while it checks every sweep of an artefact before the first one runs. In that mode a
sweep's inputs that an earlier step of the same command produces are not required yet: the single-path decodes
that ``fig3_measure`` reads (made by ``fig3``'s first sweep) and the Auto-Judge judge of ``table8``/``table9``/
``fig1``/``fig5``/``fig6`` (built after the check, before the first sweep).
"""

from __future__ import annotations

import os


def check_only() -> bool:
    """True when ``DROPMATCH_CHECK_ONLY`` is set (not empty, not ``0``): a sweep is validated, then stops
    (:class:`runners.sweep.callbacks.SweepSummary`)."""
    return os.environ.get("DROPMATCH_CHECK_ONLY", "") not in ("", "0")
