"""Write an artefact's files: Markdown, CSV (numbers), booktabs LaTeX, PNG/PDF figures, a manifest.

Layout under ``results/<artefact>/``:
    <stem>.md     the formatted table (or the figure's caption and image link) and its footer
    <stem>.csv    the numbers (no formatting; NaN = empty cell)
    <stem>.tex    booktabs table (tables only), footer as ``%`` comments
    <stem>.png / <stem>.pdf   figures
    manifest.json artefact, profile, the run ids used and the files written (read by the rebuild test;
                  the files of the previous manifest are removed first, so no stale output survives)

No absolute path is written: paths under the results or repository root become relative
(:func:`portable`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from analysis import style
from analysis.artefact import Artefact, Figure, Table
from analysis.latex import booktabs
from runners.paths import REPO_ROOT, results_dir


def portable(text: str) -> str:
    """``text`` with the results and repository roots removed from paths (no absolute path in an artefact)."""
    for root in sorted(
        {str(results_dir().resolve()), str(results_dir()), str(REPO_ROOT)}, key=len, reverse=True
    ):
        text = text.replace(root.rstrip("/") + "/", "")
    return text


def _md_table(df: pd.DataFrame) -> str:
    def cell(v: object) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        return str(v).replace("|", "\\|")

    return pd.DataFrame(
        [[cell(v) for v in row] for row in df.itertuples(index=False)],
        columns=[str(c) for c in df.columns],
    ).to_markdown(index=False, disable_numparse=True)


def _footer_md(lines: Iterable[str]) -> str:
    return "\n".join(f"- {portable(str(line))}" for line in lines)


def write_table_files(t: Table, out: Path) -> list[str]:
    """``<stem>.md``, ``.csv`` and ``.tex`` of one table; returns the file names."""
    display = t.display if t.display is not None else t.data
    footer = [portable(str(x)) for x in t.footer]
    md = f"### {t.title}\n\n{_md_table(display)}\n\n{_footer_md(footer)}\n"
    (out / f"{t.stem}.md").write_text(md, encoding="utf-8")
    t.data.to_csv(out / f"{t.stem}.csv", index=False)
    (out / f"{t.stem}.tex").write_text(
        booktabs(display, caption=t.title, label=f"tab:{t.stem}", footer=footer), encoding="utf-8"
    )
    return [f"{t.stem}.md", f"{t.stem}.csv", f"{t.stem}.tex"]


def write_figure_files(f: Figure, out: Path) -> list[str]:
    """``<stem>.png``, ``.pdf``, ``.csv`` (plotted numbers) and ``.md`` (caption, image, footer)."""

    style.save(f.fig, str(out / f.stem))
    f.data.to_csv(out / f"{f.stem}.csv", index=False)
    md = f"### {f.caption}\n\n![{f.stem}]({f.stem}.png)\n\n{_footer_md(f.footer)}\n"
    (out / f"{f.stem}.md").write_text(md, encoding="utf-8")
    return [f"{f.stem}.png", f"{f.stem}.pdf", f"{f.stem}.csv", f"{f.stem}.md"]


def write_artefact(a: Artefact, out: Path, profile: str | None) -> list[str]:
    """Every file of ``a`` under ``out`` plus ``manifest.json``; returns the files written (names)."""
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / "manifest.json"
    if manifest.is_file():  # remove what the previous render wrote (e.g. a setting no longer found)
        for name in json.loads(manifest.read_text()).get("files", []):
            (out / name).unlink(missing_ok=True)
    files: list[str] = []
    for t in a.tables:
        files += write_table_files(t, out)
    for f in a.figures:
        files += write_figure_files(f, out)
    if len(set(files)) != len(files):
        raise ValueError(
            f"{a.name}: two outputs write the same file: {sorted(x for x in files if files.count(x) > 1)}"
        )
    run_ids = sorted(str(r) for r in a.runs["run_id"]) if not a.runs.empty else []
    extra = {"source_runs": sorted(set(a.source_runs) - set(run_ids))} if a.source_runs else {}
    manifest.write_text(
        json.dumps(
            {
                "artefact": a.name,
                "profile": profile or "any",
                "runs": run_ids,
                **extra,
                "files": files,
            },
            indent=1,
        )
        + "\n"
    )
    return files
