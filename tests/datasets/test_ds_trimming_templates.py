"""A pre-filled assistant turn is continued exactly as written, also under chat templates that trim message
content (Llama 3.x: ``message['content'] | trim``): the HumanEval prompt ids equal EvalPlus's for every pair
config whose chat template is available offline, and lm-eval's MMLU prompt is unchanged.

EvalPlus's prompt: ``evalplus.provider.utility.make_raw_chat_prompt`` (the whole chat rendered with a splitter in
the assistant turn, cut there), tokenized without added special tokens (the template holds the BOS; EvalPlus's
own HF / vLLM providers would add a second BOS for a tokenizer that adds one, which no harness here copies).

Templates available offline:

* the embedded pair's Qwen2.5-Coder tokenizer (ChatML) when its pinned model has been prepared
  (``~/.cache/dropmatch-bench/models``), and the tiny pair's (ChatML, built in seconds);
* Llama 3.1 / 3.3 Instruct (the meta-llama pairs): :data:`LLAMA31_TEMPLATE`, written here from the public
  template in the models' ``tokenizer_config.json`` (the parts a tool-free chat renders: system header with
  the knowledge-cutoff and date lines, then ``'<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' +
  message['content'] | trim + '<|eot_id|>'`` per message), and, when llama-cpp-python is installed, its copy
  of Meta-Llama-3-8B-Instruct's template (``llama_cpp.llama_chat_format.LLAMA3_INSTRUCT_CHAT_TEMPLATE``, read
  from the file, not imported). The Llama tokenizers themselves are not offline: a stand-in vocabulary (the
  tiny BPE tokenizer plus Llama 3's special tokens) tokenizes both sides.

Qwen3's template (the qwen3 pair) is not available offline: that pair is skipped with the reason.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from runners.datasets.base import prompt_text, prompt_token_ids
from runners.paths import REPO_ROOT

LLAMA31_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if not date_string is defined %}{%- set date_string = '26 Jul 2024' %}{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}"
    "{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\n' }}"
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
LLAMA_SPECIAL = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
PAIR_CONFIGS = sorted((REPO_ROOT / "conf" / "pair").glob("*.yaml"))
N_PROBLEMS = 20


def llama_cpp_template() -> str | None:
    """llama-cpp-python's copy of Meta-Llama-3-8B-Instruct's chat template, read from its source file."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "llama_chat_format.py"
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", "") == "LLAMA3_INSTRUCT_CHAT_TEMPLATE" for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    return None


def llama_stand_in(tiny_dir: Path, template: str) -> Any:
    """The tiny BPE tokenizer with Llama 3's special tokens and ``template``."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir / "target")
    tok.add_special_tokens(
        {"bos_token": LLAMA_SPECIAL[0], "additional_special_tokens": LLAMA_SPECIAL[1:]}
    )
    tok.chat_template = template
    return tok


def offline_tokenizer(cfg: dict, tiny_dir: Path) -> tuple[Any, str]:
    """``(tokenizer, where it came from)`` of a pair config's target, offline only; skips when there is none."""
    from transformers import AutoTokenizer

    from runners.models.sources import COMPLETE_MARKER, pinned_cache_dir

    spec = cfg["target"]
    name = str(spec.get("name") or "")
    if cfg["name"] == "tiny":
        return AutoTokenizer.from_pretrained(tiny_dir / "target"), "tiny pair (ChatML)"
    if name.startswith("meta-llama/Llama-3."):
        return llama_stand_in(
            tiny_dir, LLAMA31_TEMPLATE
        ), "Llama 3.1 template (public), stand-in vocab"
    local = spec.get("local_path")
    if local and "${" not in str(local) and Path(local).is_dir():
        return AutoTokenizer.from_pretrained(local), f"local_path {local}"
    if spec.get("pinned") and (pinned_cache_dir(spec) / COMPLETE_MARKER).exists():
        return AutoTokenizer.from_pretrained(pinned_cache_dir(spec)), "pinned model cache"
    if spec.get("hub_id"):
        try:
            return AutoTokenizer.from_pretrained(spec["hub_id"], local_files_only=True), "hub cache"
        except (OSError, ValueError):
            pass
    pytest.skip(f"pair {cfg['name']}: no offline tokenizer or chat template for {name}")


def evalplus_ids(tok: Any, sample: Any) -> list[int]:
    from evalplus.provider.utility import make_raw_chat_prompt

    from runners.datasets.humaneval import INSTRUCTION_PREFIX, RESPONSE_PREFIX

    text = make_raw_chat_prompt(
        sample.reference["prompt"].strip() + "\n", INSTRUCTION_PREFIX, RESPONSE_PREFIX, tok
    )
    assert text.endswith("```python\n")
    return tok(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def humaneval(make_dataset) -> list[Any]:
    return make_dataset("humaneval", limit=N_PROBLEMS).load()


@pytest.mark.parametrize("path", PAIR_CONFIGS, ids=[p.stem for p in PAIR_CONFIGS])
def test_humaneval_prompt_ids_equal_evalplus_for_every_pair(
    path: Path, humaneval, tiny_pair_dir: Path
) -> None:
    cfg = yaml.safe_load(path.read_text())
    tok, source = offline_tokenizer(cfg, tiny_pair_dir)
    kwargs = dict(cfg.get("chat_template_kwargs") or {})
    for s in humaneval:
        ours = prompt_token_ids(tok, s.messages, kwargs)
        assert ours == evalplus_ids(tok, s), (cfg["name"], source, s.sample_id)
        assert tok.decode(ours).endswith("```python\n"), source


@pytest.mark.parametrize(
    "which", ["llama3.1 (public template)", "llama3 (llama-cpp-python's copy)"]
)
def test_trimming_templates_keep_the_code_fence_newline(
    which: str, humaneval, tiny_pair_dir
) -> None:
    """Before: transformers' continue_final_message cut the trimmed "\\n": one id fewer than EvalPlus's."""
    template = LLAMA31_TEMPLATE if which.startswith("llama3.1") else llama_cpp_template()
    if template is None:
        pytest.skip(
            "llama-cpp-python is not installed (its Llama 3 template is read from its source)"
        )
    assert "| trim" in template
    tok = llama_stand_in(tiny_pair_dir, template)
    for s in humaneval[:5]:
        theirs = evalplus_ids(tok, s)
        trimmed = tok.apply_chat_template(
            s.messages, tokenize=False, add_generation_prompt=False, continue_final_message=True
        )
        assert trimmed.endswith("```python")  # what a trimming template gives transformers' method
        assert prompt_text(tok, s.messages).endswith("```python\n")
        assert prompt_token_ids(tok, s.messages) == theirs
        assert len(tok(trimmed, add_special_tokens=False)["input_ids"]) < len(theirs)


def test_lm_eval_gen_prefix_prompts_are_unchanged(make_dataset, tiny_pair_dir: Path) -> None:
    """lm-eval's HFLM renders a gen_prefix with transformers' continue_final_message. No lm-eval dataset here
    pre-fills an answer start with trailing whitespace, so continuing it verbatim gives lm-eval's own text,
    under a trimming template (Llama 3.1) and ChatML alike."""
    from transformers import AutoTokenizer

    windows = {
        "gsm8k": {"limit": 2},
        "ifeval": {"limit": 2},
        "mmlu": {"subjects": ["high_school_physics"], "limit": 3, "num_fewshot": 0},
    }
    samples = [s for name, w in windows.items() for s in make_dataset(name, **w).load()]
    prefilled = [s for s in samples if s.messages[-1]["role"] == "assistant"]
    assert {s.sample_id.split("/")[0] for s in prefilled} == {"mmlu"}
    assert all(s.messages[-1]["content"] == s.messages[-1]["content"].rstrip() for s in prefilled)
    toks = [
        llama_stand_in(tiny_pair_dir, LLAMA31_TEMPLATE),
        AutoTokenizer.from_pretrained(tiny_pair_dir / "target"),
    ]
    for tok in toks:
        for s in samples:
            cont = s.messages[-1]["role"] == "assistant"
            hflm = tok.apply_chat_template(
                s.messages,
                tokenize=False,
                add_generation_prompt=not cont,
                continue_final_message=cont,
            )
            assert prompt_text(tok, s.messages) == hflm
            assert (
                prompt_token_ids(tok, s.messages)
                == tok(hflm, add_special_tokens=False)["input_ids"]
            )
        assert prompt_text(tok, prefilled[0].messages).endswith("The best answer is")
