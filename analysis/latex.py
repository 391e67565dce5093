"""Booktabs LaTeX for the artefact tables: escaped text, math symbols, right-aligned number columns.

The output needs only ``\\usepackage{booktabs}`` and compiles with pdflatex (ASCII body: every character
LaTeX treats specially is escaped, the symbols the tables use become math, any other non-ASCII character
is replaced and reported). Footer lines become ``%`` comments after the table.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable

import pandas as pd

# LaTeX special characters (the ten of the LaTeX book, 2nd ed., p. 15/p. 38).
SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
# Non-ASCII characters the tables use.
SYMBOLS = {
    "τ": r"$\tau$",
    "×": r"$\times$",
    "±": r"$\pm$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "≈": r"$\approx$",
    "–": "--",
    "—": "---",
    "−": "$-$",
    "→": r"$\rightarrow$",
    "·": r"$\cdot$",
    "…": r"\ldots{}",
    "‖": r"$\|$",
    "α": r"$\alpha$",
    "Δ": r"$\Delta$",
    "≠": r"$\neq$",
    "δ": r"$\delta$",
    "÷": r"$\div$",
    "γ": r"$\gamma$",
    "μ": r"$\mu$",
    "σ": r"$\sigma$",
    "é": r"\'e",
    "’": "'",
    "“": "``",
    "”": "''",
}
NUMBER = re.compile(r"^[-+−]?(\d|\.\d)")
EMPTY = {"", "-", "–", "n.j.", "pending", "nan", "baseline"}


def escape(text: object) -> str:
    """``text`` as LaTeX source: specials escaped, known symbols as math, other non-ASCII replaced by ``?``
    (with a warning naming the characters). ``"τ_max 50%"`` becomes ``$\\tau$\\_max 50\\%``."""
    out, unknown = [], set()
    for ch in str(text):
        if ch in SPECIAL:
            out.append(SPECIAL[ch])
        elif ch in SYMBOLS:
            out.append(SYMBOLS[ch])
        elif ord(ch) < 128:
            out.append(ch)
        else:
            unknown.add(ch)
            out.append("?")
    if unknown:
        warnings.warn(f"LaTeX: no mapping for {sorted(unknown)}; written as '?'", stacklevel=2)
    return "".join(out)


def is_numeric(col: pd.Series) -> bool:
    """A column of numbers (or numbers with intervals / units): every non-empty cell starts like a number."""
    cells = [str(v).strip() for v in col if not (isinstance(v, float) and pd.isna(v))]
    filled = [c for c in cells if c not in EMPTY]
    return bool(filled) and all(NUMBER.match(c) for c in filled)


def column_spec(df: pd.DataFrame) -> str:
    return "".join("r" if is_numeric(df[c]) else "l" for c in df.columns)


def _cell(v: object) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return ""
    return escape(v)


def booktabs(df: pd.DataFrame, *, caption: str, label: str, footer: Iterable[str] = ()) -> str:
    """A ``table`` environment with a booktabs ``tabular`` (``\\toprule``/``\\midrule``/``\\bottomrule``).

    Args:
        df: the formatted table (strings or numbers); its column names become the header row.
        caption: ``\\caption`` text (escaped); label: ``\\label`` key (``tab:<stem>``; escaped).
        footer: lines written as ``%`` comments after the environment.
    """
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        rf"\caption{{{escape(caption)}}}",
        rf"\label{{{label.replace('_', '-')}}}",
        rf"\begin{{tabular}}{{{column_spec(df)}}}",
        r"\toprule",
        " & ".join(escape(c) for c in df.columns) + r" \\",
        r"\midrule",
    ]
    for row in df.itertuples(index=False):
        lines.append(" & ".join(_cell(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    lines += [f"% {line}" for footer_line in footer for line in str(footer_line).splitlines()]
    return "\n".join(lines) + "\n"


def standalone(body: str) -> str:
    """A minimal document around a table (what the compile test runs)."""
    return "\n".join(
        [
            r"\documentclass{article}",
            r"\usepackage{booktabs}",
            r"\begin{document}",
            body,
            r"\end{document}",
            "",
        ]
    )
