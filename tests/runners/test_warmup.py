"""The untimed warm-up before a run's first sample (runners/backends/warmup.py): its prompts are not the items', its
cap is two rounds, and it changes no recorded output (the items' random streams are seeded per sample id)."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir

from runners.backends.base import DecodingConfig
from runners.backends.warmup import WARMUP_TEXT, warmup_decoding, warmup_rows, warmup_samples
from runners.datasets.base import Sample
from runners.paths import REPO_ROOT


def test_warmup_prompts_share_the_prefix_but_not_the_item():
    first = Sample(
        "gsm8k/test/0",
        [
            {"role": "user", "content": "shot"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "Q"},
        ],
    )
    got = warmup_samples(first, 3)
    assert [s.sample_id for s in got] == ["warmup/0", "warmup/1", "warmup/2"]
    assert all(s.messages[:2] == first.messages[:2] for s in got)
    assert all(s.messages[-1] == {"role": "user", "content": WARMUP_TEXT} for s in got)
    assert first.messages[-1]["content"] == "Q"  # the item is left as it was
    with pytest.raises(ValueError, match="batch_size >= 1"):
        warmup_samples(first, 0)


def test_warmup_cap_is_two_rounds():
    d = DecodingConfig(num_speculative_tokens=5, max_new_tokens=256, trace=True)
    w = warmup_decoding(d)
    assert (w.max_new_tokens, w.trace, d.max_new_tokens, d.trace) == (12, False, 256, True)
    assert (
        warmup_decoding(DecodingConfig(num_speculative_tokens=0, max_new_tokens=1)).max_new_tokens
        == 1
    )


def test_warmup_rows_per_backend():
    """The HF loop warms at the run's batch shape; llama.cpp with one row (its buffers are reserved when the
    context is made); vLLM warms itself."""
    assert [warmup_rows("hf", b) for b in (1, 10)] == [1, 10]
    assert [warmup_rows("llamacpp", b) for b in (1, 10)] == [1, 1]
    assert warmup_rows("vllm", 10) == 0


@pytest.mark.subprocess
def test_warmup_changes_no_recorded_output(tiny_pair_dir, tmp_path, monkeypatch):
    """The same DropMatch run (sampled, dropout masks drawn) with and without the warm-up records the same tokens
    and counters."""
    import runners.run as run_module

    monkeypatch.setenv("DROPMATCH_TINY_PAIR", str(tiny_pair_dir))
    outputs, logs = [], []
    for warm in (True, False):
        monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path / f"results_{warm}"))
        monkeypatch.setattr(
            run_module, "warmup_rows", warmup_rows if warm else (lambda name, batch_size: 0)
        )
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            cfg = compose(
                "run",
                overrides=[
                    "pair=tiny",
                    "profile=smoke",
                    "dataset=gsm8k",
                    "dataset.limit=2",
                    "method=dropmatch",
                    "L=3",
                    "decoding.temperature=1.0",
                    "backend.batch_size=2",
                    "progress=quiet",
                ],
            )
        summary = run_module.run(cfg, log=logs.append)
        lines = (
            tmp_path / f"results_{warm}" / "runs" / summary["run_id"] / "samples.jsonl"
        ).read_text()
        outputs.append(
            [
                (r["sample_id"], r["output_token_ids"], r["spec"], r["accepted_per_round"])
                for r in map(json.loads, lines.splitlines())
            ]
        )
    assert outputs[0] == outputs[1] and len(outputs[0]) == 2
    assert sum("warm-up (untimed, not recorded)" in x for x in logs) == 1
