"""Figure 6: accuracy vs mean acceptance length of Auto-Judge and Auto-Judge + DropMatch on IFEval (out of
distribution for a judge mined on GSM8K), p_drop=0.3, K=5; thresholds labelled, SD a star.

Paper: DropMatch Fig. 6 / Sec. 4.5 (Auto-Judge keeps a long tau but loses accuracy quickly out of distribution).

    python -m analysis.figures.fig6 [--profile default] [--p-drop 0.3]
"""

from __future__ import annotations

import argparse

import pandas as pd

from analysis.figures.fig5 import render


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--p-drop", default="0.3")
    a = ap.parse_args(argv)
    return render("fig6", "ifeval", [float(x) for x in a.p_drop.split(",")], a.profile)


if __name__ == "__main__":
    main()
