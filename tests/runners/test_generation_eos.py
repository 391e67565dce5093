"""The engines that do not load the model through transformers read its end-of-sequence ids as transformers does."""

from __future__ import annotations

import json

from runners.backends.output import generation_eos


def test_generation_config_first_then_config_json_then_none(tmp_path):
    assert generation_eos(None) is None and generation_eos("") is None
    assert generation_eos(str(tmp_path)) is None  # neither file: the tokenizer's ids decide
    cfg = {"model_type": "qwen2", "eos_token_id": 151643, "vocab_size": 64, "hidden_size": 8}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert generation_eos(str(tmp_path)) == 151643  # derived from config.json, as transformers does
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))
    assert generation_eos(str(tmp_path)) == [151645, 151643]
