"""Table 5's footer explains an interval of zero width (seen: SD+DM τ 7.50 [7.50, 7.50] and tok/s 22.90 [22.90,
22.90] at batch 4 of 4 prompts, unexplained)."""

from __future__ import annotations

from analysis.tables.table5 import zero_width_line


def test_a_zero_width_interval_over_several_prompts_is_explained():
    rows = [
        {
            "n": 4,
            "dm_tau": 7.5,
            "dm_tau_lo": 7.5,
            "dm_tau_hi": 7.5,
            "sd_tau_lo": 5.4,
            "sd_tau_hi": 7.5,
        },
        {"n": 4, "dm_tok_per_s_lo": 22.9, "dm_tok_per_s_hi": 22.9},
    ]
    line = zero_width_line(rows)
    assert line.startswith(
        "a [x, x] interval (SD+DM τ, SD+DM tok/s): every prompt of the cell had the same"
    )


def test_no_line_for_one_prompt_a_nan_or_a_real_interval():
    nan = float("nan")
    assert zero_width_line([{"n": 1, "dm_tau_lo": 7.5, "dm_tau_hi": 7.5}]) is None
    assert zero_width_line([{"n": 4, "dm_tau_lo": nan, "dm_tau_hi": nan}]) is None
    assert zero_width_line([{"n": 4, "dm_tau_lo": 5.0, "dm_tau_hi": 7.5}]) is None
