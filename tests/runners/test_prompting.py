"""A pair's chat-template options: stated in its config, recorded, and passed to the template."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from runners.paths import REPO_ROOT
from runners.records.run_id import run_id_of

# ChatML plus the generation-prompt block of Qwen3's template: enable_thinking=false closes an empty <think>.
QWEN3_STYLE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture
def tokenizer(tiny_pair_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_pair_dir / "target")
    tok.chat_template = QWEN3_STYLE
    return tok


def test_prompt_functions_pass_the_template_options(tokenizer):
    from runners.datasets.base import prompt_record, prompt_text, prompt_token_ids

    plain = tokenizer.decode(prompt_token_ids(tokenizer, MESSAGES, {}))
    off = tokenizer.decode(prompt_token_ids(tokenizer, MESSAGES, {"enable_thinking": False}))
    assert plain.endswith(
        "<|im_start|>assistant\n"
    )  # the template's default: the model opens <think> itself
    assert off == plain + "<think>\n\n</think>\n\n"
    assert prompt_text(tokenizer, MESSAGES, {"enable_thinking": False}) == off
    assert prompt_token_ids(tokenizer, MESSAGES) == prompt_token_ids(tokenizer, MESSAGES, {})
    assert prompt_record(tokenizer, MESSAGES, {"enable_thinking": False})["text"] == off
    with pytest.raises(TypeError, match="may not set"):
        prompt_token_ids(tokenizer, MESSAGES, {"add_generation_prompt": False})
    with pytest.raises(TypeError, match="must be a mapping"):
        prompt_token_ids(tokenizer, MESSAGES, ["enable_thinking"])


def test_every_pair_states_its_options():
    """Before: no pair chose enable_thinking, so Qwen3 was prompted in its default thinking mode."""
    got = {}
    for path in sorted((REPO_ROOT / "conf" / "pair").glob("*.yaml")):
        got[path.stem] = yaml.safe_load(path.read_text())["chat_template_kwargs"]
    assert got.pop("qwen3_4b_32b") == {"enable_thinking": False}
    assert got and all(v == {} for v in got.values()), got


def _resolved(*overrides: str) -> dict:
    from hydra import compose, initialize_config_dir

    from runners.config.resolve import resolve_run_config

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return resolve_run_config(
            compose("run", overrides=["profile=smoke", "method=sd", *overrides]),
            identify_models=False,
        )


def test_options_are_recorded_and_part_of_the_id(monkeypatch):
    import runners.config.validate as validate

    monkeypatch.setattr(validate, "gpu_available", lambda: True)
    monkeypatch.setattr(validate, "installed", lambda package: True)
    monkeypatch.setenv("DROPMATCH_TINY_PAIR", "/x")
    qwen3 = _resolved("pair=qwen3_4b_32b")
    assert qwen3["pair"]["chat_template_kwargs"] == {
        "enable_thinking": False
    }  # config.json holds the resolved config
    thinking = _resolved("pair=qwen3_4b_32b", "pair.chat_template_kwargs.enable_thinking=true")
    assert thinking["pair"]["chat_template_kwargs"] == {"enable_thinking": True}
    assert run_id_of(qwen3) != run_id_of(thinking)
    # the default {} adds nothing to the id: runs made before the field existed keep their ids
    tiny = _resolved("pair=tiny")
    assert tiny["pair"]["chat_template_kwargs"] == {}
    without = {
        **tiny,
        "pair": {k: v for k, v in tiny["pair"].items() if k != "chat_template_kwargs"},
    }
    assert run_id_of(tiny) == run_id_of(without)


@pytest.mark.parametrize(
    "value", ["[1]", "{tokenize: false}", "{continue_final_message: true}", "7"]
)
def test_bad_options_are_refused(value, monkeypatch):
    from runners.config.errors import ConfigError

    monkeypatch.setenv("DROPMATCH_TINY_PAIR", "/x")
    with pytest.raises(
        ConfigError, match=r"pair.chat_template_kwargs=.* is invalid; allowed: a mapping"
    ):
        _resolved("pair=tiny", "~pair.chat_template_kwargs", f"+pair.chat_template_kwargs={value}")


def test_loaded_pair_carries_the_options(tiny_pair_dir: Path):
    from runners.models.loader import load_pair

    cfg = yaml.safe_load((REPO_ROOT / "conf" / "pair" / "tiny.yaml").read_text())
    for role in ("target", "draft"):
        cfg[role]["local_path"] = str(tiny_pair_dir / role)
    cfg["chat_template_kwargs"] = {"enable_thinking": False}
    pair = load_pair(cfg, need_draft=False, load_weights=False, log=lambda *_: None)
    assert pair.chat_template_kwargs == {"enable_thinking": False}


def test_a_record_never_names_a_prompt_the_backend_did_not_send(
    tiny_pair_dir, tmp_path, monkeypatch
):
    """With Qwen3-style options the HF backend applies them: the recorded prompt (and the prompt sent, which
    run.py checks against it before generating) ends in the closed <think> block."""
    import json
    import shutil

    from hydra import compose, initialize_config_dir

    from runners.run import run

    pair_dir = tmp_path / "pair"
    shutil.copytree(tiny_pair_dir, pair_dir)
    cfg_path = pair_dir / "target" / "tokenizer_config.json"
    tok_cfg = json.loads(cfg_path.read_text())
    tok_cfg["chat_template"] = QWEN3_STYLE
    cfg_path.write_text(json.dumps(tok_cfg))
    (pair_dir / "target" / "chat_template.jinja").unlink(missing_ok=True)
    monkeypatch.setenv("DROPMATCH_TINY_PAIR", str(pair_dir))
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("DROPMATCH_CACHE", str(tmp_path / "cache"))
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "run",
            overrides=[
                "pair=tiny",
                "profile=smoke",
                "method=sd",
                "L=2",
                "decoding.max_new_tokens=4",
                "progress=quiet",
                "+pair.chat_template_kwargs.enable_thinking=false",
            ],
        )
    summary = run(cfg, log=lambda *_: None)  # before: RuntimeError "backend=hf does not apply ..."
    rows = (
        (tmp_path / "results" / "runs" / summary["run_id"] / "samples.jsonl")
        .read_text()
        .splitlines()
    )
    assert json.loads(rows[0])["prompt"]["text"].endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
