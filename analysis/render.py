"""Write an artefact table as Markdown, CSV and LaTeX with a provenance footer, and print it."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from runners.paths import results_dir


def artefact_dir(name: str) -> Path:
    d = results_dir() / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def provenance_lines(runs: pd.DataFrame) -> list[str]:
    """n, pair, device and date of the runs a table was built from."""
    if runs.empty:
        return ["no runs"]
    dates = sorted(d for d in runs["date_utc"].dropna())
    span = f"{dates[0][:10]} .. {dates[-1][:10]}" if dates else "?"
    lines = [
        f"pair: {', '.join(sorted(runs['pair'].unique()))}; backend: {', '.join(sorted(runs['backend'].unique()))}; "
        f"profile: {', '.join(sorted(str(p) for p in runs['profile'].unique()))}",
        f"device: {', '.join(sorted(str(d) for d in runs['device'].dropna().unique()))}",
        f"date (UTC): {span}; runs: {len(runs)}; git: {', '.join(sorted({str(g)[:10] for g in runs['git_sha']}))}",
    ]
    return lines


def write_table(df: pd.DataFrame, name: str, *, title: str, footer: Iterable[str], stem: str | None = None) -> Path:
    """Write ``results/<name>/<stem>.{md,csv,tex}``; print the Markdown. Returns the Markdown path."""
    out = artefact_dir(name)
    stem = stem or name
    footer = list(footer)
    md = f"### {title}\n\n{df.to_markdown(index=False)}\n\n" + "\n".join(f"- {line}" for line in footer) + "\n"
    (out / f"{stem}.md").write_text(md)
    df.to_csv(out / f"{stem}.csv", index=False)
    tex = df.to_latex(index=False, escape=True, caption=title, label=f"tab:{stem}")
    tex += "\n".join(f"% {line}" for line in footer) + "\n"
    (out / f"{stem}.tex").write_text(tex)
    print(md)
    print(f"[analysis] wrote {out / stem}.{{md,csv,tex}}")
    return out / f"{stem}.md"
