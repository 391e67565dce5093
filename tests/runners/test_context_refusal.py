"""A run whose prompts cannot fit the model's context with ``decoding.max_new_tokens`` is refused as a config error,
after the pair loads and before anything decodes (no warm-up, no sample recorded); the run then resumes as any."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import run_dirs, run_main


@pytest.mark.subprocess
def test_a_max_new_tokens_beyond_the_context_is_a_config_error_before_decoding(main_env):
    p = run_main(main_env, "method=sd", "L=3", "dataset.limit=2", "decoding.max_new_tokens=1000000")
    assert p.returncode == 2, p.stderr[-3000:]
    told = p.stdout + p.stderr
    assert (
        "config error: 2 of 2 prompts do not fit the target's max_position_embeddings=4096" in told
    )
    assert "allowed: decoding.max_new_tokens <= " in told
    assert "warm-up" not in told  # refused before the warm-up decodes
    (run,) = run_dirs(Path(main_env["DROPMATCH_RESULTS"]))
    samples = run / "samples.jsonl"
    assert not samples.exists() or samples.read_text() == ""
