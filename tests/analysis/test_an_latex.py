"""Booktabs LaTeX: escaping, math symbols, right-aligned numbers, and a compile through a LaTeX engine."""

from __future__ import annotations

import shutil
import subprocess

import pandas as pd
import pytest

from analysis.latex import booktabs, column_spec, escape, standalone

NASTY = "p_drop 50% & #1 {x} ~y ^z \\w $5"


def test_escape_specials_and_symbols():
    assert escape("p_drop") == r"p\_drop"
    assert escape("50%") == r"50\%"
    assert escape("GSM8K τ") == r"GSM8K $\tau$"
    assert escape("1.14× AR") == r"1.14$\times$ AR"
    assert (
        escape("a & b # c $ d { e } ~ ^ \\")
        == r"a \& b \# c \$ d \{ e \} \textasciitilde{} \textasciicircum{} \textbackslash{}"
    )
    assert escape("2.0 ± 0.1, 3 – 4") == r"2.0 $\pm$ 0.1, 3 -- 4"
    with pytest.warns(UserWarning, match="no mapping"):
        assert escape("한국어") == "???"


def test_booktabs_structure_and_alignment():
    df = pd.DataFrame(
        {
            "Method": ["SD", "SD+DM"],
            "L": ["5", "-"],
            "GSM8K τ": ["4.86 [4.51, 5.20]", ""],
            "speedup": ["1 (ref)", "1.14 [1.0, 1.3] vs SD"],
            "note": ["pending", "n.j."],
        }
    )
    assert column_spec(df) == "lrrrl"
    tex = booktabs(
        df,
        caption="Table 6: SD vs SD + DropMatch (p_drop=0.3)",
        label="tab:table6_p0.1",
        footer=["n: 10", "two\nlines"],
    )
    assert (
        r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex and r"\hline" not in tex
    )
    assert r"\begin{tabular}{lrrrl}" in tex
    assert r"GSM8K $\tau$" in tex and r"(p\_drop=0.3)" in tex and r"\label{tab:table6-p0.1}" in tex
    body = tex.split(r"\end{table}")[0]
    assert body.isascii()
    assert tex.rstrip().endswith("% lines") and "% n: 10" in tex


def _engine() -> str | None:
    return next((e for e in ("pdflatex", "tectonic") if shutil.which(e)), None)


def test_tables_compile(tmp_path, results):
    """The tex of a rendered Table 6 and of a table of every special character compile (pdflatex or tectonic)."""
    engine = _engine()
    from tests.helpers.records import item_run, item_sample, run_cfg

    item_run(
        results, "sd", run_cfg("sd", "gsm8k", L=5), [item_sample("g/0", [3, 3], 5, wall_s=4.5)]
    )
    item_run(
        results,
        "dm",
        run_cfg("dropmatch", "gsm8k", p_drop=0.1, L=5),
        [item_sample("g/0", [3, 4], 5, wall_s=4)],
    )
    from analysis.render import render

    render("table6", "default", echo=False)
    tables = [
        (results / "table6" / "table6_p0.1_K5.tex").read_text(),
        booktabs(
            pd.DataFrame({NASTY: [NASTY, "1.0 ± 0.2"], "τ × x": ["1", "2"]}),
            caption=NASTY,
            label="tab:x_y",
            footer=[NASTY],
        ),
    ]
    for t in tables:
        assert t.split(r"\end{table}")[0].isascii()
    if engine is None:
        pytest.skip(
            "no LaTeX engine (pdflatex, tectonic) installed: escaping checked, compile skipped; "
            "apt-get install texlive-latex-base texlive-latex-recommended"
        )
    for i, t in enumerate(tables):
        doc = tmp_path / f"t{i}.tex"
        doc.write_text(standalone(t))
        cmd = (
            [engine, "-interaction=nonstopmode", "-halt-on-error", doc.name]
            if engine == "pdflatex"
            else [engine, doc.name]
        )
        p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout[-3000:]
        assert (tmp_path / f"t{i}.pdf").stat().st_size > 1000
