"""One matplotlib style for every figure: sized for a two-column paper, serif text, colour-blind-safe colours.

    from analysis import style
    fig, axes = style.subplots(1, 3, width="double")   # figure in the paper style
    ... plot with style.COLORS / style.LINESTYLES ...
    style.panel_labels(axes)                            # (a), (b), (c) in reading order

Sizes: single column 3.25 in, double column 6.75 in (ICML/NeurIPS-like); 8 pt text, 7 pt ticks and
legends. Colours: Okabe & Ito (2008), distinguishable with the common colour-vision deficiencies; lines
also differ in marker/line style so a greyscale print still reads. A panel's title names only what tells it
from its neighbours (its setting, e.g. ``p_drop``), and what a reader cannot read the plot without (a random
EAGLE-3 head, the judge that scored it, n/a positions) is written on the figure; the caption, n and
provenance go in the artefact's Markdown (:class:`analysis.artefact.Figure`).
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

WIDTH = {"single": 3.25, "double": 6.75}  # inches
COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LINESTYLES = ["-", "--", ":", "-."]

RC: dict[str, Any] = {
    "font.family": "serif",
    "font.serif": ["Times New Roman", "Times", "Nimbus Roman", "DejaVu Serif"],
    "mathtext.fontset": "dejavuserif",
    "font.size": 8,
    "axes.labelsize": 8,
    "axes.titlesize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "axes.prop_cycle": matplotlib.cycler(color=COLORS),
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "savefig.dpi": 300,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "pdf.fonttype": 42,  # TrueType in the PDF (editable text, accepted by publishers)
    "svg.fonttype": "none",
}


def subplots(
    nrows: int = 1, ncols: int = 1, *, width: str = "double", aspect: float = 0.75, **kw: Any
):
    """``plt.subplots`` in the paper style; the figure is ``WIDTH[width]`` inches wide, each panel
    ``aspect`` times as tall as it is wide. Returns ``(fig, axes)`` with ``axes`` always a flat list."""
    apply()
    w = WIDTH[width]
    h = max(1.4, w / ncols * aspect * nrows)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(w, h), constrained_layout=True, squeeze=False, **kw
    )
    return fig, list(axes.ravel())


def apply() -> None:
    """Make :data:`RC` matplotlib's defaults in this process (the analysis driver draws only paper figures)."""
    plt.rcParams.update(RC)


def panel_labels(axes: Iterable[Any]) -> list[str]:
    """Write (a), (b), (c) ... above the top-left corner of each panel, in the order given; return them."""
    labels = []
    for ax, letter in zip(axes, string.ascii_lowercase):
        text = f"({letter})"
        ax.text(
            -0.02,
            1.02,
            text,
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=RC["font.size"],
            fontweight="bold",
            family=RC["font.family"],
        )
        labels.append(text)
    return labels


def save(fig: Any, stem: str) -> list[str]:
    """Write ``<stem>.png`` and ``<stem>.pdf`` without date/software metadata (rebuilds are stable); close it."""
    out = []
    for ext, meta in (
        ("png", {"Software": None}),
        ("pdf", {"CreationDate": None, "Producer": None}),
    ):
        fig.savefig(f"{stem}.{ext}", metadata=meta)
        out.append(f"{stem}.{ext}")
    plt.close(fig)
    return out
