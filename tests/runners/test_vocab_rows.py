"""Draft and target LM heads with different row counts (one tokenizer, heads padded differently, as
Qwen2.5-Coder-0.5B's 151,936 rows vs the 7B/14B/32B's 152,064): both heads are cut to the shared tokenizer's
vocabulary, every rule runs, greedy SD and DropMatch at p_drop = 0 equal AR, no padded id is ever emitted; a
pair whose tokenizers differ is refused at load, before any weights, naming both sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import criteria.rules  # noqa: F401  (registration)
from criteria.dropout_heads import HeadSpec
from criteria.registry import CRITERIA
from runners.backends.base import DecodingConfig
from runners.backends.hf_loop import HFLoopBackend
from runners.config.errors import ConfigError
from runners.datasets.base import Sample
from runners.models import loader
from runners.models.loader import load_pair
from tests.helpers.cli import run_main

PADDED_ROWS = 576  # the tiny tokenizer has 512 ids
PROMPTS = [
    "Janet has 3 apples and buys 5 more. How many apples?",
    "def add(a, b):",
    "Question: what is 12 times 7?",
]
RULES = [  # every rule that reads draft probabilities, and greedy SD
    ("greedy_match", HeadSpec()),
    ("rejection", HeadSpec()),
    ("dropmatch_js", HeadSpec(5, 0.0)),
    ("dropmatch_naive", HeadSpec(3, 0.0)),
]


def pad_head(src: Path, dst: Path, rows: int, logit: float) -> Path:
    """A copy of the model at ``src`` with ``rows`` embedding / LM-head rows (the tokenizer unchanged). The extra
    head rows point along the mean final hidden state of :data:`PROMPTS`, scaled to give it logit ``logit``:
    they would win argmax and hold most of the probability if they were not cut, so any use of a padded row
    shows in the output."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src)
    m = AutoModelForCausalLM.from_pretrained(src)
    with torch.no_grad():
        hs = [m.model(**tok(p, return_tensors="pt")).last_hidden_state[0] for p in PROMPTS]
    u = torch.cat(hs).mean(dim=0)  # [d]
    n = m.get_output_embeddings().weight.shape[0]
    m.resize_token_embeddings(rows, mean_resizing=False)
    with torch.no_grad():
        m.get_output_embeddings().weight[n:] = logit * u / u.dot(u)
    m.save_pretrained(dst)
    tok.save_pretrained(dst)
    return dst


def spec(path: Path) -> dict:
    return {"name": path.name, "local_path": str(path), "order": ["local"]}


@pytest.fixture(scope="module")
def padded(tiny_pair_dir: Path, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("padded")
    return {
        "target": tiny_pair_dir / "target",
        "draft": tiny_pair_dir / "draft",
        "target_pad": pad_head(tiny_pair_dir / "target", out / "target_pad", PADDED_ROWS, 60.0),
        "draft_pad": pad_head(tiny_pair_dir / "draft", out / "draft_pad", PADDED_ROWS, 60.0),
    }


def generate(pair, prompt: str, L: int, rule=None, heads=HeadSpec(), **kw):
    be = HFLoopBackend(pair)
    s = Sample(f"t/{len(prompt)}", [{"role": "user", "content": prompt}])
    rule = rule or CRITERIA.get("autoregressive")()
    dec = DecodingConfig(num_speculative_tokens=L, max_new_tokens=kw.pop("n", 30), **kw)
    return be.generate_one(s, dec, rule, heads)


@pytest.mark.parametrize(
    "target,draft", [("target_pad", "draft"), ("target", "draft_pad"), ("target_pad", "draft_pad")]
)
def test_padded_heads_run_and_greedy_equals_ar(padded, target, draft) -> None:
    """Before: draft_probs [1, 4, 512] against a 576-row target raised a shape error; a padded draft proposed
    (argmax of its boosted rows) ids the 512-row target does not have (IndexError)."""
    pair = load_pair({"name": "tiny", "target": spec(padded[target]), "draft": spec(padded[draft])})
    for prompt in PROMPTS:
        ar = generate(pair, prompt, 0)
        assert max(ar.output_token_ids) < 512
        for name, heads in RULES:
            out = generate(pair, prompt, 4, CRITERIA.get(name)(), heads)
            assert out.output_token_ids == ar.output_token_ids, (name, prompt)
    assert pair.vocab_size == len(pair.tokenizer) == 512


@pytest.mark.parametrize(
    "name,heads", [("rejection", HeadSpec()), ("dropmatch_js", HeadSpec(5, 0.3))]
)
def test_sampling_never_emits_a_padded_id(padded, name, heads) -> None:
    """T = 1 on padded heads whose extra rows carry large logits: no sampled id (draft or target) reaches them."""
    pair = load_pair(
        {"name": "tiny", "target": spec(padded["target_pad"]), "draft": spec(padded["draft_pad"])}
    )
    seen = []
    for seed in range(4):
        out = generate(
            pair, PROMPTS[seed % 3], 4, CRITERIA.get(name)(), heads, temperature=1.0, seed=seed
        )
        seen += out.output_token_ids
        assert sum(out.accepted_per_round) > 0 or name != "rejection" or seed > 0
    assert len(seen) > 60 and max(seen) < 512


def test_rejection_at_t1_is_the_cut_targets_distribution(padded) -> None:
    """Lossless: the first drafted position's emitted token follows softmax(target logits[:512]) at T = 1
    (the padded target rows, which would hold most of the mass uncut, hold none)."""
    pair = load_pair(
        {"name": "tiny", "target": spec(padded["target_pad"]), "draft": spec(padded["draft_pad"])}
    )
    from runners.backends.kv_state import KVState
    from runners.datasets.base import prompt_token_ids

    s = Sample("t/x", [{"role": "user", "content": PROMPTS[0]}])
    ids = prompt_token_ids(pair.tokenizer, s.messages)
    with torch.inference_mode():
        st = KVState(pair.target)
        h = st.prefill(ids)
        p = torch.softmax(st.logits(h[None])[0, :512].float(), dim=-1)
    uncut = torch.softmax(st.logits(h[None])[0].float(), dim=-1)
    assert uncut[512:].sum() > 0.5  # the padding would dominate if it were not cut
    be = HFLoopBackend(pair)
    firsts = []
    for seed in range(300):
        dec = DecodingConfig(num_speculative_tokens=0, max_new_tokens=1, temperature=1.0, seed=seed)
        firsts.append(
            be.generate_one(s, dec, CRITERIA.get("autoregressive")(), HeadSpec()).output_token_ids[
                0
            ]
        )
    top = int(p.argmax())
    freq = sum(t == top for t in firsts) / len(firsts)
    assert max(firsts) < 512
    assert abs(freq - float(p[top])) < 4 * (float(p[top]) * (1 - float(p[top])) / 300) ** 0.5 + 0.02


def test_different_tokenizers_are_refused_before_weights_load(
    padded, tmp_path, monkeypatch
) -> None:
    from transformers import AutoTokenizer

    other = tmp_path / "draft_other_tok"
    other.mkdir()
    for f in padded["draft"].iterdir():
        if f.suffix in (".json", ".safetensors") and "token" not in f.name:
            (other / f.name).write_bytes(f.read_bytes())
    tok = AutoTokenizer.from_pretrained(padded["draft"])
    tok.add_tokens(["<extra_draft_token>"])
    tok.save_pretrained(other)

    def no_weights(*_a, **_k):
        raise AssertionError("weights loaded before the vocabulary check")

    monkeypatch.setattr(loader, "_load_model", no_weights)
    with pytest.raises(ConfigError) as e:
        load_pair({"name": "mixed", "target": spec(padded["target"]), "draft": spec(other)})
    msg = str(e.value)
    assert "513" in msg and "512" in msg and "mixed" in msg and "tokenizer" in msg


def other_tokenizer_draft(src: Path, dst: Path) -> Path:
    """A copy of the draft at ``src`` whose tokenizer has one more token (513 ids, the target's 512)."""
    from transformers import AutoTokenizer

    dst.mkdir()
    for f in src.iterdir():
        if f.suffix in (".json", ".safetensors") and "token" not in f.name:
            (dst / f.name).write_bytes(f.read_bytes())
    tok = AutoTokenizer.from_pretrained(src)
    tok.add_tokens(["<extra_draft_token>"])
    tok.save_pretrained(dst)
    return dst


@pytest.mark.subprocess
def test_cli_different_tokenizers_exit_2_without_a_record(
    tiny_pair_dir, main_env, tmp_path
) -> None:
    """Before: a ValueError traceback, after the run record was created. Now: ``config error:`` with the sizes,
    exit 2, no weights loaded and no run record."""
    other = other_tokenizer_draft(tiny_pair_dir / "draft", tmp_path / "draft_other_tok")
    p = run_main(main_env, "method=sd", "L=2", f"pair.draft.local_path={other}", timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    assert (
        "config error: pair 'tiny': the draft's tokenizer (513 ids) and the target's (512 ids) differ"
        in p.stderr
    ), p.stderr
    assert "Traceback" not in p.stderr and "Loading weights" not in p.stdout + p.stderr
    assert not (Path(main_env["DROPMATCH_RESULTS"]) / "runs").exists()


def test_a_head_smaller_than_the_tokenizer_is_refused(tmp_path, tiny_pair_dir) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    small = tmp_path / "small_head"
    m = AutoModelForCausalLM.from_pretrained(tiny_pair_dir / "draft")
    m.resize_token_embeddings(500, mean_resizing=False)
    m.save_pretrained(small)
    AutoTokenizer.from_pretrained(tiny_pair_dir / "draft").save_pretrained(small)
    with pytest.raises(
        ConfigError, match=r"draft's LM head has 500 rows, fewer than the tokenizer's 512"
    ):
        load_pair({"name": "small", "target": spec(tiny_pair_dir / "target"), "draft": spec(small)})


@pytest.mark.subprocess
def test_the_run_completes_on_a_padded_pair(padded, main_env, runs_root) -> None:
    """The whole run (CLI, records) on a pair whose draft head is padded: DropMatch records a finished run
    and no output id lies beyond the tokenizer's vocabulary."""
    p = run_main(
        main_env,
        f"pair.target.local_path={padded['target']}",
        f"pair.draft.local_path={padded['draft_pad']}",
        "method=dropmatch",
        "dataset=gsm8k",
        "dataset.limit=1",
        "L=3",
        multirun=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (summary,) = [json.loads(f.read_text()) for f in runs_root.glob("*/summary.json")]
    assert summary["complete"] is True and summary["num_samples"] == 1
    (line,) = (runs_root / summary["run_id"] / "samples.jsonl").read_text().splitlines()
    ids = json.loads(line)["output_token_ids"]
    assert ids and max(ids) < 512
