"""Items of batched runs: time = the item's share of the batch (not the batch's whole wall time); capped outputs."""

from __future__ import annotations

import json

import pandas as pd

from analysis.cells import Cell, cap_note
from analysis.load import load_items
from analysis.stats import NAN


def _write(tmp_path, rows):
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_items(tmp_path)


def test_batched_item_time_is_its_share(tmp_path):
    # two rows decoded together for 10 s: each was in the batch 10 s (wall_s) but is charged 5 s (share_s)
    rows = [
        {
            "sample_id": f"s{i}",
            "spec": {
                "num_speculative_tokens": 4,
                "num_drafts": 4,
                "num_draft_tokens": 16,
                "num_accepted_tokens": 16,
                "num_accepted_tokens_per_pos": [4, 4, 4, 4],
            },
            "quality": {"correct": 1},
            "stop_reason": reason,
            "speed": {"num_output_tokens": 21, "wall_s": 10.0, "share_s": 5.0},
        }
        for i, reason in enumerate(("eos", "length"))
    ]
    it = _write(tmp_path, rows)
    assert list(it["wall_s"]) == [5.0, 5.0]
    assert list(it["tok_per_s"]) == [
        4.2,
        4.2,
    ]  # 21 tokens / 5 s; the batch's aggregate is 42 tokens / 10 s
    assert list(it["hit_cap"]) == [0.0, 1.0]


def test_batch_one_and_old_records(tmp_path):
    rows = [
        {
            "sample_id": "a",
            "spec": {},
            "quality": {},
            "speed": {"num_output_tokens": 8, "wall_s": 2.0},
        }
    ]
    it = _write(tmp_path, rows)  # no share_s, no stop_reason: wall_s, hit_cap unknown
    assert it["tok_per_s"].iloc[0] == 4.0 and pd.isna(it["hit_cap"].iloc[0])


def test_cap_note_counts_capped_outputs():
    def cell(hits):
        items = pd.DataFrame({"hit_cap": hits})
        return Cell("r", len(hits), NAN, NAN, NAN, 1, float("nan"), items)

    note = cap_note({"GSM8K": [cell([0.0, 1.0]), cell([1.0, 1.0])], "MMLU": [cell([float("nan")])]})
    assert note == "outputs that hit max_new_tokens (capped, answer possibly cut): GSM8K 3/4"
