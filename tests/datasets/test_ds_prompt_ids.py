"""The prompt token ids we send equal the ids lm-eval's own HF model wrapper builds for the same doc.

lm-eval side, as ``lm_eval --model hf --apply_chat_template --fewshot_as_multiturn`` runs it: the task is
loaded the way a user loads one (``TaskManager`` + a local JSON file as its test split), ``evaluate``'s
request builder renders each context with ``HFLM.apply_chat_template`` (the tokenizer's chat template,
``continue_final_message`` for a ``gen_prefix``), and ``HFLM.tok_batch_encode`` tokenizes it (what
``generate_until`` feeds the model). Our side: the dataset's ``Sample.messages`` through
:func:`runners.datasets.base.prompt_token_ids` (what both backends' ``encode`` call).

Tokenizer: the real Qwen2.5-Coder-1.5B-Instruct tokenizer when the embedded pair is prepared (loads in
seconds), else the tiny pair's ChatML tokenizer; the model inside HFLM is the tiny random target (only
its tokenizer is used).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runners.datasets.base import prompt_text, prompt_token_ids
from runners.paths import cache_dir

CASES = {
    "gsm8k": ("gsm8k_cot_llama", {}, {"offset": 7, "limit": 2}),
    "mmlu": (
        "mmlu_llama_high_school_physics",
        {"num_fewshot": 0},
        {"subjects": ["high_school_physics"], "limit": 2},
    ),
    "ifeval": ("ifeval", {}, {"offset": 3, "limit": 2}),
}


def real_tokenizer_dir() -> Path | None:
    found = sorted(
        (cache_dir() / "models").glob("Qwen--Qwen2.5-Coder-1.5B-Instruct-*/tokenizer.json")
    )
    return found[0].parent if found else None


@pytest.fixture(scope="module")
def hflm(tiny_pair_dir: Path) -> Any:
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(real_tokenizer_dir() or tiny_pair_dir / "target")
    model = AutoModelForCausalLM.from_pretrained(tiny_pair_dir / "target")
    return HFLM(pretrained=model, tokenizer=tok, batch_size=1, device="cpu")


@pytest.mark.parametrize("name", sorted(CASES))
def test_prompt_ids_equal_lm_evals(name: str, hflm: Any, make_dataset, tmp_path: Path) -> None:
    from lm_eval.tasks import TaskManager

    task_name, overrides, window = CASES[name]
    samples = make_dataset(name, **window).load()
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(s.reference) + "\n" for s in samples))
    spec = {
        "task": task_name,
        "dataset_path": "json",
        "dataset_name": None,
        "test_split": "test",
        "validation_split": None,
        "fewshot_split": None,
        "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(tmp_path / "hf")},
        **overrides,
    }
    task = TaskManager().load([{"group": "user", "task": [spec]}])["tasks"][task_name]
    task.build_all_requests(
        apply_chat_template=True,
        fewshot_as_multiturn=True,
        chat_template=hflm.apply_chat_template,
        tokenizer_name=hflm.tokenizer_name,
    )
    assert len(task.instances) == len(samples) == 2
    for sample, inst in zip(samples, task.instances):
        context = inst.args[0]
        theirs = hflm.tok_batch_encode([context])[0][0].tolist()
        ours = prompt_token_ids(hflm.tokenizer, sample.messages)
        assert prompt_text(hflm.tokenizer, sample.messages) == context
        assert ours == theirs and len(ours) > 20
    if name == "mmlu":  # the pre-filled answer start is the prompt's end, not a closed turn
        assert hflm.tokenizer.decode(ours).endswith("The best answer is")
