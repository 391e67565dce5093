"""Figure 6: accuracy vs mean acceptance length of Auto-Judge and Auto-Judge + DropMatch on IFEval (out of
distribution for a judge mined on GSM8K), p_drop=0.3, K=5; thresholds labelled, SD a star, 95% CIs.

Paper: DropMatch Fig. 6 / Sec. 4.5 (Auto-Judge keeps a long tau but loses accuracy quickly out of distribution).
Drawn by :func:`analysis.figures.fig5.curves`.

    python -m analysis.render fig6 --profile default
"""

from __future__ import annotations

import pandas as pd

from analysis.artefact import Artefact, Profile
from analysis.autojudge import select_aj
from analysis.figures.fig5 import curves

NAME = "fig6"
OOD_NOTE = (
    "IFEval is out of distribution for the judge (mined on GSM8K); accuracy = IFEval prompt-level strict "
    "accuracy"
)


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Complete greedy SD / AJ / AJ+DM runs on IFEval of the profile (one backend, one batch size)."""
    return select_aj(runs, profile, ("ifeval",))


def build(selected: pd.DataFrame) -> Artefact:
    return curves(NAME, "ifeval", selected, extra=(OOD_NOTE,))


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
