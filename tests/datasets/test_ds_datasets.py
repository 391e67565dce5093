"""Dataset loaders: registry/config agreement, loading, offset/limit windows, stable ids, prompt format."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import runners.datasets  # noqa: F401  (registration)
import runners.scorers  # noqa: F401,E402  (registration)
from runners.datasets.base import Sample, TaskDataset
from runners.paths import REPO_ROOT
from runners.registry import DATASETS, SCORERS

NAMES = ("gsm8k", "mmlu", "ifeval", "humaneval")
FULL_SIZES = {"gsm8k": 1319, "mmlu": 14042, "ifeval": 541, "humaneval": 164}


class TestConfigs:
    @pytest.mark.parametrize("name", NAMES)
    def test_yaml_stem_equals_key_and_name(self, name: str) -> None:
        cfg = yaml.safe_load((REPO_ROOT / "conf" / "dataset" / f"{name}.yaml").read_text())
        assert cfg["name"] == name and name in DATASETS
        assert isinstance(cfg["version"], int)
        assert cfg["scorer"] in SCORERS

    @pytest.mark.parametrize("name", NAMES)
    def test_yaml_keys_are_constructor_kwargs(self, name: str) -> None:
        cfg = yaml.safe_load((REPO_ROOT / "conf" / "dataset" / f"{name}.yaml").read_text())
        cls = DATASETS.get(name)
        accepted = set()
        for klass in cls.__mro__:
            if "__init__" in vars(klass):
                accepted |= set(inspect.signature(klass.__init__).parameters)
        assert set(cfg) - {"name", "version"} <= accepted
        assert set(cfg["source"]) <= {"local_path", "hub_id", "hub_config", "pinned", "order"}
        if name == "humaneval":
            assert all(isinstance(s, str) and s for s in cfg["stop"])
        else:  # lm-eval tasks: stops and cap come from the task, never typed into the YAML
            assert cfg["stop"] is None and cfg["max_new_tokens"] is None and cfg["lm_eval_task"]

    @pytest.mark.parametrize("name", NAMES)
    def test_protocol(self, name: str, make_dataset) -> None:
        ds = make_dataset(name, limit=2)
        assert isinstance(ds, TaskDataset)
        ds.load()
        assert ds.name == name and ds.max_new_tokens > 0 and isinstance(ds.stop, list)


class TestLoading:
    @pytest.mark.parametrize("name", NAMES)
    def test_full_size_unique_ids_json(self, name: str, make_dataset) -> None:
        ds = make_dataset(name)
        docs = (
            ds.selected_docs()
        )  # the whole canonical order (ids and docs; prompts are built per window)
        assert len(docs) == FULL_SIZES[name]
        assert ds.provenance.startswith("local:")
        ids = [i for i, _ in docs]
        assert len(set(ids)) == len(ids) and all(i.startswith(f"{name}/{ds.split}/") for i in ids)
        samples = make_dataset(name, limit=50).load()
        assert [s.sample_id for s in samples] == ids[:50]
        for s in samples:
            assert isinstance(s, Sample)
            json.dumps({"m": s.messages, "r": s.reference, "meta": s.meta})  # JSON-serialisable
            # MMLU (mmlu_llama) and HumanEval (EvalPlus) end with a pre-filled assistant turn
            assert s.messages[-1]["role"] == (
                "assistant" if name in ("mmlu", "humaneval") else "user"
            )

    @pytest.mark.parametrize("name", NAMES)
    def test_offset_limit_window_is_stable(self, name: str, make_dataset) -> None:
        wide = make_dataset(name, offset=0, limit=20).load()
        window = make_dataset(name, offset=5, limit=7).load()
        assert [s.sample_id for s in window] == [s.sample_id for s in wide[5:12]]
        assert [s.messages for s in window] == [s.messages for s in wide[5:12]]
        assert make_dataset(name, offset=FULL_SIZES[name] + 3, limit=5).load() == []
        assert make_dataset(name, limit=0).load() == []

    def test_gsm8k_ids_are_row_indices(self, make_dataset, shared_data: Path) -> None:
        rows = [
            json.loads(line) for line in (shared_data / "gsm8k/test.jsonl").read_text().splitlines()
        ]
        samples = make_dataset("gsm8k", offset=17, limit=2).load()
        assert samples[0].sample_id == "gsm8k/test/17"
        assert samples[0].reference == {
            "question": rows[17]["question"],
            "answer": rows[17]["answer"],
        }
        assert samples[0].meta["target"] == rows[17]["answer"].split("####")[-1].strip()

    def test_local_path_may_be_a_folder(self, make_dataset, shared_data: Path) -> None:
        ds = make_dataset(
            "humaneval", limit=3, source={"local_path": str(shared_data / "humaneval")}
        )
        assert [s.sample_id for s in ds.load()] == [
            "humaneval/test/0",
            "humaneval/test/1",
            "humaneval/test/2",
        ]

    def test_bad_window_rejected(self, make_dataset) -> None:
        with pytest.raises(ValueError):
            make_dataset("gsm8k", offset=-1)
        with pytest.raises(ValueError):
            make_dataset("gsm8k", limit=-2)


def lm_eval_task(name: str, docs: list[dict], tmp_path: Path, **overrides) -> Any:
    """lm-eval's own task, loaded the way a user does (TaskManager + a local JSON data file)."""
    from lm_eval.tasks import TaskManager

    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    spec = {
        "task": name,
        "dataset_path": "json",
        "dataset_name": None,
        "test_split": "test",
        "validation_split": None,
        "fewshot_split": None,
        "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(tmp_path / "hf")},
        **overrides,
    }
    return TaskManager().load([{"group": "user", "task": [spec]}])["tasks"][name]


def build_chat_requests(task: Any) -> list[Any]:
    """The requests lm-eval's evaluate() makes for a chat model (apply_chat_template + fewshot_as_multiturn),
    with a chat template that renders ``[messages, add_generation_prompt]`` as JSON."""
    task.build_all_requests(
        apply_chat_template=True,
        fewshot_as_multiturn=True,
        chat_template=lambda msgs, add_generation_prompt=True: json.dumps(
            [msgs, add_generation_prompt]
        ),
    )
    return task.instances


class TestGsm8kPrompt:
    def test_eight_shot_multiturn(self, make_dataset) -> None:
        s = make_dataset("gsm8k", limit=1).load()[0]
        assert len(s.messages) == 17
        assert [m["role"] for m in s.messages] == ["user", "assistant"] * 8 + ["user"]
        for user, assistant in zip(s.messages[0:16:2], s.messages[1:16:2]):
            assert user["content"].startswith(
                "Given the following problem, reason and give a final answer"
            )
            assert "The final answer is [answer]" in user["content"]
            assert assistant["content"].rsplit("The final answer is ", 1)[1].strip().isdigit()
        assert s.reference["question"] in s.messages[-1]["content"]
        assert s.meta == {"lm_eval_task": "gsm8k_cot_llama", "target": "18"}

    def test_stops_and_cap_from_lm_eval(self, make_dataset) -> None:
        ds = make_dataset("gsm8k", limit=1)
        ds.load()
        from lm_eval.tasks import TaskManager

        assert "Q:" in ds.stop and "<|eot_id|>" in ds.stop and ds.max_new_tokens == 256
        custom = make_dataset("gsm8k", limit=1, stop=["\n\n"], max_new_tokens=99)
        custom.load()
        assert custom.stop == ["\n\n"] and custom.max_new_tokens == 99
        assert "gsm8k_cot_llama" in TaskManager().all_subtasks

    def test_all_items_share_the_prefix(self, make_dataset) -> None:
        samples = make_dataset("gsm8k", offset=100, limit=25).load()
        prefix = samples[0].messages[:16]
        assert all(s.messages[:16] == prefix for s in samples)
        assert len({s.messages[-1]["content"] for s in samples}) == 25

    def test_num_fewshot(self, make_dataset) -> None:
        assert len(make_dataset("gsm8k", limit=1, num_fewshot=2).load()[0].messages) == 5
        with pytest.raises(ValueError):
            make_dataset("gsm8k", limit=1, num_fewshot=-1)

    def test_equals_lm_eval_requests(self, make_dataset, shared_data: Path, tmp_path: Path) -> None:
        """The messages lm-eval's evaluate() builds for the same docs, loaded as a user would."""
        rows = [json.loads(x) for x in (shared_data / "gsm8k/test.jsonl").read_text().splitlines()]
        task = lm_eval_task("gsm8k_cot_llama", rows[40:43], tmp_path)
        ds = make_dataset("gsm8k", offset=40, limit=3)
        ours = ds.load()
        requests = build_chat_requests(task)
        assert [json.loads(inst.args[0]) for inst in requests] == [[s.messages, True] for s in ours]
        assert all(inst.args[1]["until"] == ds.stop for inst in requests)


class TestMmlu:
    def test_interleaved_covers_every_subject_first(self, make_dataset) -> None:
        samples = make_dataset("mmlu", limit=57 * 2).load()
        subjects = [s.meta["subject"] for s in samples]
        assert len(set(subjects[:57])) == 57 and subjects[:57] == subjects[57:]
        assert subjects[:57] == sorted(subjects[:57])
        assert samples[0].sample_id == "mmlu/test/abstract_algebra/0"
        assert samples[57].sample_id == "mmlu/test/abstract_algebra/1"

    def test_ids_independent_of_order(self, make_dataset) -> None:
        inter = dict(make_dataset("mmlu").selected_docs())
        by_subject = make_dataset("mmlu", order="subject").selected_docs()
        assert dict(by_subject) == inter
        assert [d["subject"] for _, d in by_subject[:100]] == ["abstract_algebra"] * 100

    def test_subject_filter(self, make_dataset) -> None:
        samples = make_dataset("mmlu", subjects=["virology", "anatomy"], limit=4).load()
        assert [s.sample_id for s in samples] == [
            "mmlu/test/anatomy/0",
            "mmlu/test/virology/0",
            "mmlu/test/anatomy/1",
            "mmlu/test/virology/1",
        ]
        with pytest.raises(ValueError, match="unknown subjects"):
            make_dataset("mmlu", subjects=["astrology"]).load()

    def test_prompt_format(self, make_dataset) -> None:
        ds = make_dataset("mmlu", limit=1)
        s = ds.load()[0]
        doc = s.reference
        assert [m["role"] for m in s.messages] == ["user", "assistant"]
        assert s.messages[0]["content"] == (
            "Given the following question and four candidate answers (A, B, C and D), choose the best answer.\n"
            f"Question: {doc['question'].strip()}\nA. {doc['choices'][0]}\nB. {doc['choices'][1]}\n"
            f'C. {doc["choices"][2]}\nD. {doc["choices"][3]}\nYour response should end with "The best answer is '
            '[the_answer_letter]" where the [the_answer_letter] is one of A, B, C or D.'
        )
        assert s.messages[1] == {
            "role": "assistant",
            "content": "The best answer is",
        }  # gen_prefix, continued
        assert (
            s.meta["target"] == "ABCD"[doc["answer"]] + "."
            and s.meta["lm_eval_task"] == "mmlu_llama_abstract_algebra"
        )
        assert ds.stop == ["."] and ds.max_new_tokens == 10

    def test_older_generative_config_rebuilds_its_prompts(self, make_dataset) -> None:
        """A run configured before mmlu_llama (scorer lm_eval_mmlu_generative, no lm_eval_task) is rescored
        against the zero-shot mmlu_generative prompt it answered."""
        s = make_dataset(
            "mmlu", limit=1, lm_eval_task=None, num_fewshot=None, scorer="lm_eval_mmlu_generative"
        ).load()[0]
        assert s.meta["lm_eval_task"] == "mmlu_abstract_algebra_generative"
        assert s.messages[0] == {
            "role": "system",
            "content": "The following are multiple choice questions (with "
            "answers) about abstract algebra.\n\n",
        }
        assert (
            s.messages[1]["content"].endswith("\nAnswer:")
            and s.meta["target"] == "ABCD"[s.reference["answer"]]
        )

    def test_row_formats(self) -> None:
        from runners.datasets.mmlu import normalize_row

        flat = {
            "question": "q",
            "answer_a": "a",
            "answer_b": "b",
            "answer_c": "c",
            "answer_d": "d",
            "correct_answer": "C",
            "topic": "high school physics",
        }
        hub = {
            "question": "q",
            "subject": "high_school_physics",
            "choices": ["a", "b", "c", "d"],
            "answer": 2,
        }
        assert (
            normalize_row(flat)
            == normalize_row(hub)
            == {
                "question": "q",
                "subject": "high_school_physics",
                "choices": ["a", "b", "c", "d"],
                "answer": 2,
            }
        )
        header = {
            "question": "question",
            "answer_a": "answer_a",
            "answer_b": "answer_b",
            "answer_c": "answer_c",
            "answer_d": "answer_d",
            "correct_answer": "answer",
            "topic": "college mathematics",
        }
        assert normalize_row(header) is None

    def test_equals_lm_eval_requests(self, make_dataset, tmp_path: Path) -> None:
        samples = make_dataset("mmlu", subjects=["college_physics"], limit=3).load()
        task = lm_eval_task(
            "mmlu_llama_college_physics", [s.reference for s in samples], tmp_path, num_fewshot=0
        )
        for s, inst in zip(samples, build_chat_requests(task)):
            msgs, add_generation_prompt = json.loads(inst.args[0])
            assert (
                msgs == s.messages and add_generation_prompt is False
            )  # lm-eval continues the prefill
            assert inst.args[1]["until"] == ["."] and inst.args[1]["max_gen_toks"] == 10


class TestIfevalAndHumaneval:
    def test_ifeval_prompt_verbatim(self, make_dataset, shared_data: Path) -> None:
        first = json.loads((shared_data / "ifeval/input_data.jsonl").read_text().splitlines()[0])
        s = make_dataset("ifeval", limit=1).load()[0]
        assert s.sample_id == f"ifeval/train/{first['key']}"
        assert s.messages == [{"role": "user", "content": first["prompt"]}]
        assert {k: s.reference[k] for k in ("key", "prompt", "instruction_id_list")} == {
            k: first[k] for k in ("key", "prompt", "instruction_id_list")
        }
        for ours, theirs in zip(
            s.reference["kwargs"], first["kwargs"]
        ):  # lm-eval's doc: unused args are None
            assert {k: v for k, v in ours.items() if v is not None} == theirs

    def test_humaneval_prompt_is_evalplus_instruct(self, make_dataset, tiny_pair_dir: Path) -> None:
        """The rendered prompt (user turn + pre-filled assistant start) equals EvalPlus's make_raw_chat_prompt."""
        from evalplus.provider.utility import make_raw_chat_prompt
        from transformers import AutoTokenizer

        from runners.datasets.base import prompt_text
        from runners.datasets.humaneval import INSTRUCTION_PREFIX, RESPONSE_PREFIX

        tok = AutoTokenizer.from_pretrained(tiny_pair_dir / "target")  # ChatML, as Qwen's
        for s in make_dataset("humaneval", offset=30, limit=3).load():
            theirs = make_raw_chat_prompt(
                s.reference["prompt"].strip() + "\n", INSTRUCTION_PREFIX, RESPONSE_PREFIX, tok
            )
            assert prompt_text(tok, s.messages) == theirs and theirs.endswith("tests:\n```python\n")
            assert [m["role"] for m in s.messages] == ["user", "assistant"]
            assert (
                s.meta["task_id"]
                == s.reference["task_id"]
                == f"HumanEval/{s.sample_id.split('/')[-1]}"
            )


@pytest.mark.subprocess
def test_import_is_light() -> None:
    """Registering datasets and scorers imports neither lm-eval, EvalPlus, HF datasets nor NLTK."""
    import subprocess
    import sys

    code = (
        "import sys, runners.datasets, runners.scorers; "
        "heavy = [m for m in ('lm_eval', 'evalplus', 'datasets', 'nltk', 'torch') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", NAMES)
def test_builds_from_hydra_config(name: str, data_files: dict[str, Path]) -> None:
    """The YAML as Hydra hands it over (DictConfig / ListConfig values) builds and loads."""
    from omegaconf import OmegaConf

    from runners.registry import build

    cfg = OmegaConf.load(REPO_ROOT / "conf" / "dataset" / f"{name}.yaml")
    cfg.source.local_path = str(data_files[name])
    cfg.limit = 3
    samples = build(DATASETS, cfg).load()
    assert len(samples) == 3 and all(type(m["content"]) is str for s in samples for m in s.messages)
    json.dumps([s.reference for s in samples])
