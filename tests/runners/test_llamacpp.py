"""The llama.cpp loop on the tiny pair written as GGUF: equivalences with the HF loop, rollback, prefix reuse.

The tiny pair (``runners.models.tiny``) is exported to GGUF by ``runners.models.gguf_export``: float32 (the same
numbers as the transformers weights, so the two loops can be compared token for token) and Q8_0 (a quantised file,
as the embedded pair's; only within-engine equalities are claimed there). Where numerics may differ (llama.cpp keeps
its KV cache in float16), a divergence is allowed only at a near-tie: the first differing position's top-2 logit
gap is computed and bounded.
"""

from __future__ import annotations

import shutil

import pytest
import torch

import criteria.rules  # noqa: F401
from criteria.dropout_heads import HeadSpec, LMHead
from criteria.registry import CRITERIA
from criteria.verify import verify_round
from runners.backends.base import DecodingConfig
from runners.datasets.base import Sample
from runners.models.loader import load_pair

pytestmark = pytest.mark.llamacpp

PROMPTS = [
    "Janet has 3 apples and buys 5 more. How many apples?",
    "def add(a, b):",
    "Question: what is 12 times 7?",
    "A B C D. The answer is",
]
# llama.cpp's float16 KV cache moves the tiny float32 model's logits by < 0.01 (measured: 0.005): a divergence
# from the transformers loop is only allowed where the top-2 gap is below this
NEAR_TIE = 0.05


@pytest.fixture(scope="module", autouse=True)
def _llama_cpp():
    pytest.importorskip(
        "llama_cpp",
        reason="llama-cpp-python is not installed (built by ./reproduce.sh setup; see README 'Engines on a CPU')",
    )


@pytest.fixture(scope="module")
def gguf_pairs(tiny_pair_dir, tmp_path_factory):
    """``{qtype: pair config}``: copies of the tiny pair, each model dir with its ``model.gguf`` (f32, q8_0)."""
    from runners.models.gguf_export import export_qwen2

    out = {}
    for qtype in ("f32", "q8_0"):
        root = tmp_path_factory.mktemp(f"tiny_gguf_{qtype}")
        for role in ("target", "draft"):
            shutil.copytree(tiny_pair_dir / role, root / role)
            export_qwen2(root / role, root / role / "model.gguf", qtype)
        out[qtype] = {
            "name": "tiny",
            "dtype": "float32",
            **{
                r: {"name": r, "local_path": str(root / r), "order": ["local"]}
                for r in ("target", "draft")
            },
        }
    return out


def backend(cfg, **kw):
    from runners.backends.llamacpp_loop import LlamaCppBackend

    return LlamaCppBackend(load_pair(cfg, load_weights=False), **kw)


def samples():
    return [Sample(f"t/{i}", [{"role": "user", "content": p}]) for i, p in enumerate(PROMPTS)]


def decode(be, L, rule=None, heads=HeadSpec(), B=1, n=40, **kw):
    rule = rule or CRITERIA.get("autoregressive")()
    dec = DecodingConfig(num_speculative_tokens=L, max_new_tokens=n, **kw)
    return {r.sample_id: r for r in be.generate(samples(), dec, rule, heads, batch_size=B)}


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def test_gguf_export_reproduces_the_transformers_logits(gguf_pairs):
    from transformers import AutoModelForCausalLM

    from runners.backends.llamacpp_context import Feed, GGUFModel, SeqContext

    d = gguf_pairs["f32"]["target"]["local_path"]
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    ids = list(range(5, 45))
    with torch.no_grad():
        ref = hf(torch.tensor([ids]), output_hidden_states=True)
    model = GGUFModel.load(f"{d}/model.gguf")
    assert (model.file_type, model.n_vocab, model.n_embd) == ("F32", 512, 64)
    ctx = SeqContext(model, n_seq=1, n_ctx=256, hidden=True)
    logits, hidden = ctx.decode([Feed(0, i, t, True) for i, t in enumerate(ids)])
    assert abs(logits - ref.logits[0].numpy()).max() < 0.02
    assert abs(hidden - ref.hidden_states[-1][0].numpy()).max() < 0.01
    # the extracted hidden state is the LM head's input: W h reproduces llama.cpp's own logits
    assert abs(hidden @ hf.lm_head.weight.detach().numpy().T - logits).max() < 1e-3


def test_kv_copy_and_truncate_reproduce_a_fresh_forward(gguf_pairs):
    from runners.backends.llamacpp_context import Feed, GGUFModel, SeqContext

    model = GGUFModel.load(f"{gguf_pairs['q8_0']['target']['local_path']}/model.gguf")
    ctx = SeqContext(model, n_seq=2, n_ctx=256)
    ids = list(range(5, 45))
    full, _ = ctx.decode([Feed(0, i, t, True) for i, t in enumerate(ids)])
    ctx.copy(0, 1, 20)  # a shared prefix, then the rest
    rest, _ = ctx.decode([Feed(1, 20 + i, t, True) for i, t in enumerate(ids[20:])])
    assert abs(rest - full[20:]).max() < 1e-4
    ctx.truncate(0, 30)  # rollback, then the same tokens again
    again, _ = ctx.decode([Feed(0, 30 + i, t, True) for i, t in enumerate(ids[30:])])
    assert abs(again - full[30:]).max() < 1e-4
    assert ctx.lengths == [40, 40]


def test_ar_matches_the_transformers_loop_up_to_near_ties(gguf_pairs):
    from runners.backends.hf_loop import HFLoopBackend

    cfg = gguf_pairs["f32"]
    hf = decode(HFLoopBackend(load_pair(cfg)), 0)
    lc = decode(backend(cfg), 0)
    pair = load_pair(cfg)
    for sid, ref in hf.items():
        i = first_divergence(ref.output_token_ids, lc[sid].output_token_ids)
        if i is None:
            continue
        prompt = HFLoopBackend(pair).encode(next(s for s in samples() if s.sample_id == sid))
        with torch.no_grad():
            top = pair.target(torch.tensor([prompt + ref.output_token_ids[:i]])).logits[0, -1]
        gap = float(top.topk(2).values.diff().abs())
        assert gap < NEAR_TIE, f"{sid}: first divergence at {i}, top-2 gap {gap:.4f}"


@pytest.mark.parametrize("qtype", ["f32", "q8_0"])
@pytest.mark.parametrize("B", [1, 3])
def test_greedy_sd_and_dm_p0_equal_ar_within_the_engine(gguf_pairs, qtype, B):
    be = backend(gguf_pairs[qtype])
    ar = decode(be, 0, B=B)
    partial = 0
    for L in (1, 3, 5):
        for name, heads in (
            ("greedy_match", HeadSpec()),
            ("rejection", HeadSpec()),
            ("dropmatch_js", HeadSpec(5, 0.0)),
        ):
            out = decode(be, L, CRITERIA.get(name)(), heads, B=B)
            for sid, r in out.items():
                assert r.output_token_ids == ar[sid].output_token_ids, (L, name, sid)
                c = r.counters
                assert (
                    c.num_drafts + c.num_accepted_tokens
                    == len(r.output_token_ids) - 1 + r.eos_removed
                )
                partial += sum(0 < a < L for a in r.accepted_per_round)
    assert partial > 0, "no round with partial acceptance: rollback untested"


def test_batched_rows_decide_as_alone(gguf_pairs):
    """Each row keeps its own random stream: DropMatch (p_drop 0.3) and sampling at T=1 give a row the same
    output in a batch of 3 as alone (the tiny f32 file: no batch-shape near-tie)."""
    be = backend(gguf_pairs["f32"])
    for kw in ({"temperature": 0.0}, {"temperature": 1.0, "seed": 3}):
        alone = decode(be, 4, CRITERIA.get("dropmatch_js")(), HeadSpec(5, 0.3), B=1, **kw)
        batch = decode(be, 4, CRITERIA.get("dropmatch_js")(), HeadSpec(5, 0.3), B=3, **kw)
        assert {k: v.output_token_ids for k, v in alone.items()} == {
            k: v.output_token_ids for k, v in batch.items()
        }


def test_engine_hidden_states_give_the_hf_decisions(gguf_pairs):
    """One verify pass of drafted tokens: verify_round on the engine's (logits, hidden states) decides as on the
    transformers target's hidden states with its own LM head, rule by rule, seed by seed."""
    from transformers import AutoModelForCausalLM

    from runners.backends.llamacpp_context import Feed, GGUFModel, SeqContext

    cfg = gguf_pairs["f32"]
    d = cfg["target"]["local_path"]
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    head = LMHead(hf.lm_head.weight.detach())
    ctx = SeqContext(GGUFModel.load(f"{d}/model.gguf"), n_seq=1, n_ctx=256, hidden=True)
    g = torch.Generator().manual_seed(0)
    L, checked = 5, 0
    for trial in range(6):
        ids = torch.randint(3, 512, (12,), generator=g).tolist()
        ctx.clear(0)
        for _ in range(
            L // 2 + 1
        ):  # the first drafts are the target's own greedy tokens (accepted)
            lg, _ = ctx.decode([Feed(0, i, t, True) for i, t in enumerate(ids)])
            ids.append(int(lg[-1].argmax()))
            ctx.clear(0)
        ids += torch.randint(3, 512, (12 + L - len(ids),), generator=g).tolist()
        logits, hidden = ctx.decode([Feed(0, i, t, i >= 11) for i, t in enumerate(ids)])
        with torch.no_grad():
            ref_h = hf.model(torch.tensor([ids])).last_hidden_state[:, 11:]  # [1, L+1, d]
        drafts = torch.tensor([ids[12:]])
        q = torch.softmax(torch.randn(1, L, 512, generator=g), -1)
        for name, heads in (
            ("greedy_match", HeadSpec()),
            ("dropmatch_js", HeadSpec(5, 0.3)),
            ("dropmatch_naive", HeadSpec(3, 0.3)),
        ):
            for seed in range(3):
                kw = dict(temperature=0.0, draft_probs=q)
                a = verify_round(
                    torch.from_numpy(hidden)[None], head, drafts, CRITERIA.get(name)(), heads,
                    generators=[torch.Generator().manual_seed(seed)],
                    target_logits=torch.from_numpy(logits)[None], **kw,
                )  # fmt: skip
                b = verify_round(
                    ref_h, head, drafts, CRITERIA.get(name)(), heads,
                    generators=[torch.Generator().manual_seed(seed)], **kw,
                )  # fmt: skip
                assert torch.equal(a.accept_mask, b.accept_mask), (trial, name, seed)
                assert torch.equal(a.next_token_ids, b.next_token_ids), (trial, name, seed)
                checked += int(a.num_accepted.sum())
    assert checked > 0


def test_no_lm_head_matmul_without_heads(gguf_pairs):
    """SD needs no LM head at all on the engine: verify_round takes the engine's logits, hidden and head None."""
    logits = torch.randn(2, 4, 512)
    drafts = logits[:, :3].argmax(-1)
    res = verify_round(
        None, None, drafts, CRITERIA.get("greedy_match")(), HeadSpec(),
        temperature=0.0, generators=[None, None], target_logits=logits,
    )  # fmt: skip
    assert res.num_accepted.tolist() == [3, 3]
    assert torch.equal(res.next_token_ids, logits[:, 3].argmax(-1))
    with pytest.raises(ValueError, match="hidden and lm_head"):
        verify_round(
            None, None, drafts, CRITERIA.get("dropmatch_js")(), HeadSpec(5, 0.3),
            temperature=0.0, generators=[torch.Generator()] * 2, target_logits=logits,
            draft_probs=torch.softmax(logits[:, :3], -1),
        )  # fmt: skip


@pytest.mark.parametrize("shared", [5, 8, 13, 16, 23, 31])
def test_a_prefill_computes_the_chunks_of_its_fresh_prefill_whatever_was_kept(gguf_pairs, shared):
    """After a kept prompt sharing ``shared`` tokens, a prompt's prefill feeds llama.cpp exactly the calls of its
    fresh prefill less whole reused chunks, and gets the fresh prefill's logits and hidden state bit for bit."""
    import numpy as np

    from runners.backends.llamacpp_context import GGUFModel, SeqContext
    from runners.backends.llamacpp_seqs import SeqPool

    model = GGUFModel.load(f"{gguf_pairs['q8_0']['target']['local_path']}/model.gguf")
    ids = list(range(5, 40))
    kept = ids[:shared] + [300 + i for i in range(20)]

    def prefill(first=None):
        ctx = SeqContext(model, n_seq=3, n_ctx=128, n_batch=16, hidden=True)
        pool = SeqPool(ctx, 1, 2, min_shared=1, chunk=8)
        if first is not None:  # kept when its row is released
            seq = pool.acquire()
            pool.prefill(seq, first)
            pool.release(seq)
        calls, decode = [], ctx.decode
        ctx.decode = lambda feed, **kw: calls.append([f.pos for f in feed]) or decode(feed, **kw)
        out = pool.prefill(pool.acquire(), ids)
        chunks = calls  # the positions of each llama_decode call
        return out, chunks

    (fresh_logits, fresh_hidden), fresh_chunks = prefill()
    (logits, hidden), chunks = prefill(kept)
    reused = shared // 8 * 8
    assert chunks == [c for c in fresh_chunks if c[0] >= reused]
    assert all(c[0] % 8 == 0 for c in chunks[:-1]) and chunks[-1] == [len(ids) - 1]
    assert np.array_equal(logits, fresh_logits) and np.array_equal(hidden, fresh_hidden)


def test_prefix_reuse_gives_the_same_output(gguf_pairs):
    """A prompt decoded after one sharing its prefix (kept prefix reused) decodes as without reuse."""
    long = "Question: " + " ".join(str(i) for i in range(60))
    s = [Sample(f"p/{i}", [{"role": "user", "content": long + f" item {i}?"}]) for i in range(3)]
    dec = DecodingConfig(num_speculative_tokens=3, max_new_tokens=24)
    rule = CRITERIA.get("greedy_match")()
    reuse = list(backend(gguf_pairs["q8_0"]).generate(s, dec, rule, HeadSpec()))
    fresh = list(
        backend(gguf_pairs["q8_0"], prefix_caching=False).generate(s, dec, rule, HeadSpec())
    )
    assert [r.output_token_ids for r in reuse] == [r.output_token_ids for r in fresh]


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"n_ctx": "big"}, "n_ctx"),
        ({"flash_attn": "yes"}, "flash_attn"),
    ],
)
def test_bad_settings_name_the_field(gguf_pairs, kw, field):
    with pytest.raises(ValueError, match=f"backend.{field}"):
        backend(gguf_pairs["q8_0"], **kw)


def test_a_row_that_cannot_fit_names_n_ctx(gguf_pairs):
    be = backend(gguf_pairs["q8_0"], n_ctx=32)
    with pytest.raises(
        ValueError, match=r"prompts do not fit backend.n_ctx=32: .*, or backend.n_ctx >= "
    ):
        decode(be, 3, CRITERIA.get("greedy_match")(), n=40)


def test_gguf_file_of_a_local_dir(gguf_pairs, tmp_path):
    from runners.models.sources import ModelUnavailableError, gguf_file

    spec = gguf_pairs["q8_0"]["target"]
    assert gguf_file(spec).name == "model.gguf"
    with pytest.raises(ModelUnavailableError, match="0 \\*.gguf"):
        gguf_file({"name": "x", "local_path": str(tmp_path), "order": ["local"]})


@pytest.fixture(scope="module")
def padded_gguf(tiny_pair_dir, tmp_path_factory):
    """The tiny pair with both heads padded to 576 rows (the tokenizer has 512 ids) whose extra rows would win
    argmax if read (:func:`tests.runners.test_vocab_rows.pad_head`), as f32 GGUF files."""
    from runners.models.gguf_export import export_qwen2
    from tests.runners.test_vocab_rows import PADDED_ROWS, pad_head

    root = tmp_path_factory.mktemp("tiny_gguf_padded")
    cfg = {"name": "tiny", "dtype": "float32"}
    for role in ("target", "draft"):
        d = pad_head(tiny_pair_dir / role, root / role, PADDED_ROWS, 60.0)
        export_qwen2(d, d / "model.gguf", "f32")
        cfg[role] = {"name": role, "local_path": str(d), "order": ["local"]}
    return cfg


@pytest.mark.parametrize(
    "name,heads,T",
    [
        ("greedy_match", HeadSpec(), 0.0),
        ("dropmatch_js", HeadSpec(5, 0.0), 0.0),
        ("rejection", HeadSpec(), 1.0),
        ("dropmatch_js", HeadSpec(5, 0.3, top_n=8, audit_share=0.5), 1.0),
    ],
)
def test_padded_rows_carry_no_mass(padded_gguf, name, heads, T):
    """Both engines' rows beyond the tokenizer's 512 ids are cut: greedy SD / DM(p=0) equal AR, and at T = 1 no
    emitted id reaches a padded row (they hold almost all the probability if read)."""
    be = backend(padded_gguf)
    assert be.vocab_size == 512
    ar = decode(be, 0, n=24, temperature=T)
    out = decode(be, 4, CRITERIA.get(name)(), heads, n=24, temperature=T)
    seen = [t for r in (*ar.values(), *out.values()) for t in r.output_token_ids]
    assert len(seen) > 60 and max(seen) < 512
    if T == 0:
        assert {k: r.output_token_ids for k, r in out.items()} == {
            k: r.output_token_ids for k, r in ar.items()
        }


def test_mismatch_counter_and_counters_match_the_hf_loop(gguf_pairs):
    """The llama.cpp loop fills the same counters as the HF loop (same keys): exact greedy SD accepts no draft off
    the target's argmax; DropMatch at a high p_drop accepts some (its outputs then leave greedy SD's), never more
    than it accepted."""
    from runners.backends.hf_loop import HFLoopBackend

    cfg = gguf_pairs["f32"]
    be = backend(cfg)
    sd = decode(be, 4, CRITERIA.get("greedy_match")(), n=30)
    dm = decode(be, 4, CRITERIA.get("dropmatch_js")(), HeadSpec(5, 0.9), n=30)
    hf = HFLoopBackend(load_pair(cfg))
    ref = next(iter(hf.generate(samples()[:1], DecodingConfig(num_speculative_tokens=4, max_new_tokens=30),
                                CRITERIA.get("greedy_match")(), HeadSpec())))  # fmt: skip
    for r in (*sd.values(), *dm.values()):
        assert set(vars(r.counters)) == set(vars(ref.counters))
    assert all(r.counters.num_accepted_mismatched == 0 for r in sd.values())
    off = sum(r.counters.num_accepted_mismatched for r in dm.values())
    accepted = sum(r.counters.num_accepted_tokens for r in dm.values())
    assert 0 <= off <= accepted
    # greedy SD == AR within the engine (f32 file): an output leaves it iff an off-argmax draft was accepted
    differs = any(dm[k].output_token_ids != sd[k].output_token_ids for k in dm)
    assert off > 0 and differs


def test_audit_on_llamacpp_keeps_the_run_and_counts_rounds(gguf_pairs):
    """The exactness audit in the llama.cpp loop: the sparse decision and the outputs are the same with and
    without auditing (its choice is its own hashed stream, the exact rule runs on generator copies), the audited
    rounds are exactly those :func:`criteria.audit.is_audited` picks, and the counts are consistent."""
    from criteria.audit import is_audited

    be = backend(gguf_pairs["q8_0"])
    rule = CRITERIA.get("dropmatch_js")()
    kw = dict(n=30, temperature=1.0, seed=3)
    plain = decode(be, 4, rule, HeadSpec(5, 0.3, top_n=8), **kw)
    audited = decode(be, 4, rule, HeadSpec(5, 0.3, top_n=8, audit_share=0.5), **kw)
    total = 0
    for k, r in audited.items():
        assert r.output_token_ids == plain[k].output_token_ids
        assert r.accepted_per_round == plain[k].accepted_per_round
        assert plain[k].audit is None and plain[k].audit_s == 0.0
        assert (r.audit_s > 0.0) == bool(r.audit["rounds"])  # timed apart from the decision
        a = r.audit
        want = [i for i in range(len(r.accepted_per_round)) if is_audited(0.5, 3, k, i)]
        assert a["audited"] == want
        assert a["rounds"] == len(want) and a["rounds_equal"] <= a["rounds"]
        assert a["positions_equal"] <= a["positions"] <= 4 * a["rounds"]
        total += a["rounds"]
    assert total > 0


def test_rows_finishing_together_keep_their_wall_time(gguf_pairs):
    """As the HF loop: rows finishing in the same round (AR, one cap) keep their wall_s although the caller
    spends time on the first result (it was subtracted from the others: negative wall_s)."""
    import time

    be = backend(gguf_pairs["f32"])
    dec = DecodingConfig(num_speculative_tokens=0, max_new_tokens=12)
    same = [Sample(f"same/{i}", samples()[0].messages) for i in range(3)]
    got = []
    for r in be.generate(same, dec, CRITERIA.get("autoregressive")(), HeadSpec(), batch_size=3):
        got.append(r)
        time.sleep(0.3)
    assert [r.num_output_tokens for r in got] == [12, 12, 12]
    walls = [r.wall_s for r in got]
    assert min(walls) > 0 and max(walls) - min(walls) < 0.15, walls
