"""Figure 5: accuracy vs mean acceptance length of Auto-Judge and Auto-Judge + DropMatch on GSM8K, one panel
per AJ+DM (p_drop, K) (paper: p_drop 0.2 and 0.3, K=5), titled with it; the points of a line are the judge
thresholds (labelled, labels kept apart by adjustText), SD a star; error bars are 95% bootstrap intervals over
items; one legend under the panels.

Paper: DropMatch Fig. 5 ("a rightward shift of Auto-Judge + DM relative to Auto-Judge indicates increased
acceptance length at comparable accuracy"). :func:`curves` also draws Fig. 6 (IFEval).

    python -m analysis.render fig5 --profile default
"""

from __future__ import annotations

import pandas as pd

from analysis import style
from analysis.artefact import Artefact, Figure, Profile
from analysis.autojudge import (
    cells,
    curves_legend,
    dm_settings,
    judge_footer,
    one_dataset,
    plot_curves,
    points_table,
    select_aj,
    setting_lines,
)
from analysis.cells import CI_NOTE, ItemCache
from analysis.footer import provenance_lines

NAME = "fig5"
LABEL = {"gsm8k": "GSM8K 8-shot", "ifeval": "IFEval"}


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Complete greedy SD / AJ / AJ+DM runs on GSM8K of the profile (one backend, one batch size)."""
    return select_aj(runs, profile, ("gsm8k",))


def curves(
    name: str, dataset: str, selected: pd.DataFrame, extra: tuple[str, ...] = ()
) -> Artefact:
    """The accuracy-vs-tau figure of ``dataset``: one panel per AJ+DM (p_drop, K); nothing without AJ runs."""
    art = Artefact(name)
    runs = one_dataset(selected, dataset)
    if runs.empty or not runs["method"].isin(["autojudge", "autojudge_dropmatch"]).any():
        art.notes.append(f"no Auto-Judge runs on {dataset}")
        return art
    pts = cells(runs, ItemCache())
    settings = dm_settings(runs) or [(None, None)]
    fig, axes = style.subplots(
        1, len(settings), width="double" if len(settings) > 1 else "single", aspect=0.9
    )
    for ax, (p, K) in zip(axes, settings):
        plot_curves(ax, pts, p, K)
    curves_legend(fig, axes)
    panels = style.panel_labels(axes) if len(axes) > 1 else [""]
    what = (
        "; ".join(
            f"{lab} AJ+DM at p_drop={p:g}, K={K}".strip()
            for lab, (p, K) in zip(panels, settings)
            if p is not None
        )
        or "no AJ+DM runs"
    )
    thresholds = sorted(t for t in pts["threshold"].dropna().unique())
    footer = [
        *extra,
        *setting_lines(runs, pts),
        f"points: {CI_NOTE}; error bars = the 95% CI of τ and accuracy",
        *judge_footer(runs, thresholds),
        *provenance_lines(runs),
    ]
    if int(pts["n"].min()) < 30:
        footer.append(
            "NOTE: n < 30 items per point (CPU budget): accuracy differences are not significant"
        )
    art.figures.append(
        Figure(
            name,
            f"Accuracy vs τ on {LABEL.get(dataset, dataset)}: Auto-Judge and Auto-Judge + "
            f"DropMatch, one point per judge threshold (labelled), SD stars; {what}",
            fig,
            points_table(pts),
            footer,
        )
    )
    art.runs = runs
    return art


def build(selected: pd.DataFrame) -> Artefact:
    return curves(NAME, "gsm8k", selected)


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
