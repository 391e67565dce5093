"""The footers' model-identity line (analysis.footer.identity_lines): MIXED flags one pair's runs on other weights,
or in other dtypes unless the table has a dtype column (bench), and the identities come from the records."""

from __future__ import annotations

import pandas as pd

from analysis.footer import identity_lines
from analysis.load import model_identity

META = {
    "target": {"sha256": "cc324af070c2aa", "dtype": "bfloat16"},
    "draft": {"sha256": "1d96146", "dtype": "bfloat16"},
}


def _run(meta: dict) -> dict:
    m = {"model_identity": meta}
    return {
        "pair": "p",
        "model_identity": model_identity({}, m, {}),
        "weights_identity": model_identity({}, m, {}, with_dtype=False),
    }


def _in(dtype: str, sha: str = "cc324af070c2aa") -> dict:
    return {
        "target": {"sha256": sha, "dtype": dtype},
        "draft": {"sha256": "1d96146", "dtype": dtype},
    }


def test_identity_without_dtype_drops_every_dtype_entry():
    with_d, without = (
        model_identity({}, {"model_identity": META}, {}),
        model_identity({}, {"model_identity": META}, {}, with_dtype=False),
    )
    assert (
        with_d.count("dtype bfloat16") == 2 and "dtype" not in without and "cc324af070c2" in without
    )


def test_dtypes_are_mixed_only_where_the_table_does_not_show_them():
    runs = pd.DataFrame([_run(_in("bfloat16")), _run(_in("float32"))])
    (plain,) = identity_lines(runs)
    assert plain.startswith("MIXED model identity (p)")
    (shown,) = identity_lines(runs, dtype_column=True)
    assert not shown.startswith("MIXED") and "dtype column" in shown and "float32" in shown
    other = pd.DataFrame([_run(_in("bfloat16")), _run(_in("float32", sha="ffffffffffff99"))])
    (weights,) = identity_lines(other, dtype_column=True)
    assert weights.startswith("MIXED model identity (p)")  # other weights stay an alarm
    (one,) = identity_lines(pd.DataFrame([_run(_in("bfloat16"))] * 2), dtype_column=True)
    assert one == f"model identity (p): {_run(_in('bfloat16'))['model_identity']}"
