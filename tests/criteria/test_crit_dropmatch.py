"""DropMatch rules (Eq. 4-7, Algorithm 1): hand cases, edge cases, p_drop = 0 equals greedy_match, trace, sampling."""

from __future__ import annotations

import math

import pytest
import torch

from criteria.base import Criterion, VerifyInputs
from criteria.divergence import agreement_pattern_names, js_divergence
from criteria.dropmatch_js import DropMatchJS
from criteria.dropmatch_naive import DropMatchNaive
from criteria.dropout_heads import dropout_head_logits
from criteria.greedy_match import GreedyMatch

CHI2_CRIT_DF9 = 27.877  # df = 9, alpha = 1e-3 (scipy.stats.chi2.ppf(0.999, 9))
CHI2_CRIT_DF8 = 26.124  # df = 8, alpha = 1e-3
RULES = [DropMatchNaive, DropMatchJS]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def js_reference(p: list[float], q: list[float]) -> float:
    m = [(a + b) / 2 for a, b in zip(p, q)]
    return 0.5 * sum(a * math.log(a / c) for a, c in zip(p, m) if a > 0) + 0.5 * sum(
        b * math.log(b / c) for b, c in zip(q, m) if b > 0
    )


def softmax_list(x: list[float]) -> list[float]:
    e = [math.exp(v) for v in x]
    return [v / sum(e) for v in e]


def chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs.double() * counts.sum()
    return float(((counts.double() - expected) ** 2 / expected).sum())


def heads_from_tokens(tokens: list[list[list[int]]], vocab: int) -> torch.Tensor:
    """[B, P, K, vocab] head logits with argmax = tokens (8 on the token, 0 elsewhere)."""
    return 8.0 * torch.nn.functional.one_hot(torch.tensor(tokens), vocab).float()


def model_round(
    B: int,
    L: int,
    K: int,
    p_drop: float,
    seed: int,
    V: int = 12,
    d: int = 16,
    temperature: float = 0.0,
):
    """A round whose target/head logits come from dropout_head_logits on random hidden states."""
    g = gen(seed)
    hidden, W = torch.randn(B * (L + 1), d, generator=g), torch.randn(V, d, generator=g) / 2
    out = dropout_head_logits(
        hidden, W, num_heads=K, p_drop=p_drop, generator=gen(seed + 1)
    )  # [N, 1+K, V]
    target = out[:, 0].reshape(B, L + 1, V)
    heads = out[:, 1:].reshape(B, L + 1, K, V)
    draft_probs = torch.softmax(torch.randn(B, L, V, generator=g), -1)
    drafts = torch.where(
        torch.rand(B, L, generator=g) < 0.75,
        target[:, :L].argmax(-1),
        torch.randint(0, V, (B, L), generator=g),
    )
    return VerifyInputs(drafts, target, draft_probs, heads, temperature=temperature)


class TestSettings:
    @pytest.mark.parametrize("rule", RULES)
    def test_defaults_and_protocol(self, rule):
        r = rule()
        assert isinstance(r, Criterion)
        assert (r.majority, r.include_target, r.needs_heads) == ("strict", False, True)
        assert r.needs_draft_probs is (rule is DropMatchJS)
        assert not hasattr(r, "num_heads") and not hasattr(
            r, "p_drop"
        )  # K / p_drop travel in a HeadSpec
        r = rule(majority="plurality", include_target=True)
        assert (r.majority, r.include_target) == ("plurality", True)

    @pytest.mark.parametrize("rule", RULES)
    @pytest.mark.parametrize(
        "kwargs, field",
        [
            (dict(majority="most"), "dropmatch.majority"),
            (dict(include_target=1), "dropmatch.include_target"),
        ],
    )
    def test_invalid_settings_raise(self, rule, kwargs, field):
        with pytest.raises(ValueError, match=rf"{field}=.*allowed values"):
            rule(**kwargs)

    @pytest.mark.parametrize("rule", RULES)
    def test_missing_or_mismatched_heads_raise(self, rule):
        inputs = model_round(2, 3, K=4, p_drop=0.3, seed=0)
        inputs.head_logits = inputs.head_logits[:, :2]  # wrong number of positions
        with pytest.raises(ValueError, match="head_logits.*K"):
            rule()(inputs)
        inputs.head_logits = None
        with pytest.raises(ValueError, match="head_logits"):
            rule()(inputs)

    def test_js_requires_draft_probs(self):
        inputs = model_round(2, 3, K=4, p_drop=0.3, seed=0)
        inputs.draft_probs = None
        with pytest.raises(ValueError, match="draft_probs"):
            DropMatchJS()(inputs)
        DropMatchNaive()(inputs)  # the naive rule does not need them


class TestPDropZeroIsGreedy:
    @pytest.mark.parametrize("rule", RULES)
    @pytest.mark.parametrize("K", [1, 5])
    def test_decisions_equal_greedy_match(self, rule, K):
        inputs = model_round(B=64, L=5, K=K, p_drop=0.0, seed=3)
        a, b = rule()(inputs), GreedyMatch()(inputs)
        assert torch.equal(a.accept_mask, b.accept_mask)
        assert torch.equal(a.num_accepted, b.num_accepted) and torch.equal(
            a.next_token_ids, b.next_token_ids
        )
        assert len(set(b.num_accepted.tolist())) >= 4  # a non-trivial mix of acceptance lengths

    def test_dropout_changes_decisions(self):
        # Sanity that the comparison above is not vacuous: with dropout the rules do differ from greedy.
        inputs = model_round(B=256, L=5, K=5, p_drop=0.5, seed=4)
        greedy = GreedyMatch()(inputs).num_accepted
        naive = DropMatchNaive()(inputs).num_accepted
        assert not torch.equal(naive, greedy)


class TestNaive:
    def test_hand_case_and_prefix_closure(self):
        V = 5
        heads = heads_from_tokens(
            [[[1, 2, 2], [3, 3, 3], [0, 0, 0], [4, 4, 4]]], V
        )  # [1, L+1=4, K=3, V]
        target = 8.0 * torch.nn.functional.one_hot(torch.tensor([[1, 1, 0, 4]]), V).float()
        drafts = torch.tensor(
            [[2, 4, 0]]
        )  # pos 0: in heads (not target argmax); pos 1: miss; pos 2: hit after a miss
        out = DropMatchNaive()(VerifyInputs(drafts, target, None, heads), trace=True)
        assert out.accept_mask.tolist() == [[True, False, False]]
        assert out.num_accepted.tolist() == [1] and out.next_token_ids.tolist() == [
            1
        ]  # target argmax at pos 1
        assert out.trace["accepted_by_naive"].tolist() == [[True, False, True]]
        assert GreedyMatch()(VerifyInputs(drafts, target)).num_accepted.tolist() == [0]

    def test_all_accepted_gives_bonus_and_mixed_batch(self):
        V = 6
        heads = heads_from_tokens(
            [[[1, 1], [2, 3], [0, 0]], [[4, 4], [5, 5], [0, 0]]], V
        )  # [2, 3, K=2, V]
        target = 8.0 * torch.nn.functional.one_hot(torch.tensor([[1, 2, 5], [4, 1, 2]]), V).float()
        drafts = torch.tensor([[1, 3], [0, 5]])
        out = DropMatchNaive()(VerifyInputs(drafts, target, None, heads))
        assert out.accept_mask.tolist() == [[True, True], [False, False]]
        assert out.next_token_ids.tolist() == [
            5,
            4,
        ]  # bonus at L for row 0; target argmax at 0 for row 1

    def test_k1_is_match_with_the_single_head(self):
        V = 4
        heads = heads_from_tokens([[[2], [3]]], V)
        target = torch.zeros(1, 2, V)
        out = DropMatchNaive()(VerifyInputs(torch.tensor([[2]]), target, None, heads))
        assert out.num_accepted.tolist() == [1] and out.next_token_ids.tolist() == [0]
        out = DropMatchNaive()(VerifyInputs(torch.tensor([[1]]), target, None, heads))
        assert out.num_accepted.tolist() == [0]

    def test_bonus_position_heads_are_not_used(self):
        inputs = model_round(8, 3, K=3, p_drop=0.4, seed=5)
        a = DropMatchNaive()(inputs)
        inputs.head_logits = inputs.head_logits.clone()
        inputs.head_logits[:, -1] = torch.randn(8, 3, 12)
        b = DropMatchNaive()(inputs)
        assert torch.equal(a.accept_mask, b.accept_mask) and torch.equal(
            a.next_token_ids, b.next_token_ids
        )


def js_hand_round():
    """B=2, L=3, K=3, V=4 with three kinds of positions:

    J: heads dispersed (tokens 0, 1, 2), draft token 3 with draft_probs = centroid -> Eq. 6 only.
    M: heads identical (token 2), draft token 2, draft_probs = softmax([0, 0, 1, 0]) -> Eq. 7 only.
    R: heads identical (token 2), draft token 1, same draft_probs -> neither.
    Row 0 = J, M, R; row 1 = R, M, J.
    """
    disp = [[2.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 2.0, 0]]
    same = [[0, 0, 3.0, 0]] * 3
    centroid = softmax_list([2 / 3, 2 / 3, 2 / 3, 0])
    dq = softmax_list([0, 0, 1.0, 0])
    J, M, R = (disp, 3, centroid), (same, 2, dq), (same, 1, dq)
    rows = [[J, M, R], [R, M, J]]
    heads = torch.tensor([[c[0] for c in row] + [same] for row in rows])  # [2, 4, 3, V]
    drafts = torch.tensor([[c[1] for c in row] for row in rows])
    draft_probs = torch.tensor([[c[2] for c in row] for row in rows])
    target = torch.tensor(
        [[[0, 5.0, 0, 0], [0, 0, 0, 5.0], [5.0, 0, 1.0, 0], [0, 0, 5.0, 0]]] * 2
    )  # [2, 4, V]
    return VerifyInputs(drafts, target, draft_probs, heads), disp, centroid, dq


class TestJS:
    def test_algorithm1_hand_case(self):
        inputs, *_ = js_hand_round()
        out = DropMatchJS()(inputs, trace=True)
        assert out.accept_mask.tolist() == [[True, True, False], [False, False, False]]
        assert out.num_accepted.tolist() == [2, 0]
        assert out.next_token_ids.tolist() == [0, 1]  # target argmax at the first rejected position
        t = out.trace
        assert t["accepted_by_js"].tolist() == [[True, False, False], [False, False, True]]
        assert t["accepted_by_majority"].tolist() == [[False, True, False], [False, True, False]]
        assert t["draft_agrees_majority"].tolist() == [[False, True, False], [False, True, False]]
        assert t["accepted_by_naive"].tolist() == [[False, True, False], [False, True, False]]
        naive = DropMatchNaive()(inputs)
        assert naive.accept_mask.tolist() == [[False, False, False], [False, False, False]]

    def test_trace_values_by_hand(self):
        inputs, disp, centroid, dq = js_hand_round()
        t = DropMatchJS()(inputs, trace=True).trace
        heads_js = max(js_reference(softmax_list(h), centroid) for h in disp)
        assert t["js_heads_max"][0, 0].item() == pytest.approx(heads_js, rel=1e-4)
        assert t["js_draft"][0, 0].item() == pytest.approx(0.0, abs=1e-6)
        assert t["js_heads_max"][0, 1].item() == pytest.approx(0.0, abs=1e-6)
        m_js = js_reference(dq, softmax_list([0, 0, 3.0, 0]))
        assert t["js_draft"][0, 1].item() == pytest.approx(m_js, rel=1e-4)
        assert t["head_token_ids"][0, 0].tolist() == [0, 1, 2]
        assert t["majority_token_ids"].tolist() == [
            [0, 2, 2],
            [2, 2, 0],
        ]  # 1-1-1 tie -> head 0's token
        assert t["majority_counts"].tolist() == [[1, 3, 3], [3, 3, 1]]
        names = agreement_pattern_names(3)
        assert [names[c] for c in t["agreement_pattern"][0].tolist()] == ["1-1-1", "3", "3"]
        # target prob (T = 1) of the majority token: pos 0 -> token 0 of [0, 5, 0, 0]; pos 2 -> token 2 of [5, 0, 1, 0]
        p0 = softmax_list([0, 5.0, 0, 0])[0]
        p2 = softmax_list([5.0, 0, 1.0, 0])[2]
        torch.testing.assert_close(t["majority_target_prob"][0, [0, 2]], torch.tensor([p0, p2]))
        assert t["target_token_ids"][0].tolist() == [1, 3, 0]

    def test_majority_fallback_needed_when_heads_collapse(self):
        # All heads identical -> max JS = 0: a near-identical draft distribution fails Eq. 6, Eq. 7 saves it.
        inputs, *_ = js_hand_round()
        inputs.head_logits = (
            torch.tensor([0, 0, 3.0, 0]).expand(2, 4, 3, 4).clone()
        )  # every head = token 2
        inputs.draft_token_ids = torch.tensor([[2, 2, 2], [2, 2, 2]])
        inputs.draft_probs = torch.softmax(torch.tensor([0, 0, 2.9, 0]), -1).expand(2, 3, 4).clone()
        out = DropMatchJS()(inputs, trace=True)
        assert out.trace["js_heads_max"].max().item() < 1e-7
        assert out.trace["accepted_by_js"].tolist() == [[False] * 3] * 2
        assert out.num_accepted.tolist() == [3, 3]
        assert out.next_token_ids.tolist() == [2, 2]  # bonus = target argmax at L

    def test_eq6_holds_with_equality(self):
        # Identical heads and a draft distribution equal to theirs: JS(draft||c) = max_i JS = 0, so
        # Eq. 6 (<=) accepts even a draft token that is not the heads' token (row 0); in row 1 the token
        # is the majority too, which Algorithm 1 credits to the first branch (Eq. 6), not to Eq. 7.
        head = torch.tensor([0, 0, 3.0, 0])
        heads = head.expand(2, 2, 3, 4).clone()
        q = torch.softmax(head, -1).expand(2, 1, 4).clone()
        out = DropMatchJS()(
            VerifyInputs(torch.tensor([[1], [2]]), torch.zeros(2, 2, 4), q, heads), trace=True
        )
        assert out.trace["js_draft"].tolist() == [[0.0], [0.0]] and out.trace[
            "js_heads_max"
        ].tolist() == [[0.0], [0.0]]
        assert out.num_accepted.tolist() == [1, 1]
        assert out.trace["accepted_by_js"].tolist() == [[True], [True]]
        assert out.trace["draft_agrees_majority"].tolist() == [[False], [True]]
        assert out.trace["accepted_by_majority"].tolist() == [[False], [False]]

    def test_k1(self):
        V = 4
        heads = torch.tensor([[[[0, 2.0, 0, 0]], [[0, 0, 0, 0.0]]]])  # [1, 2, K=1, V]
        target = torch.zeros(1, 2, V)
        q = torch.softmax(torch.tensor([[[1.0, 0, 0, 0]]]), -1)
        out = DropMatchJS()(VerifyInputs(torch.tensor([[1]]), target, q, heads), trace=True)
        assert out.num_accepted.tolist() == [1]  # majority of one head = its token
        assert out.trace["js_heads_max"].tolist() == [[0.0]]
        out = DropMatchJS()(VerifyInputs(torch.tensor([[0]]), target, q, heads))
        assert out.num_accepted.tolist() == [0]

    @pytest.mark.parametrize("rule", RULES)
    def test_empty_draft(self, rule):
        V = 5
        heads = torch.zeros(2, 1, 3, V)
        target = 8.0 * torch.nn.functional.one_hot(torch.tensor([[3], [1]]), V).float()
        inputs = VerifyInputs(
            torch.zeros(2, 0, dtype=torch.int64), target, torch.zeros(2, 0, V), heads
        )
        out = rule()(inputs, trace=True)
        assert out.accept_mask.shape == (2, 0) and out.num_accepted.tolist() == [0, 0]
        assert out.next_token_ids.tolist() == [3, 1]
        assert out.trace["head_token_ids"].shape == (2, 0, 3)


class TestTrace:
    KEYS = {
        "head_token_ids",
        "target_token_ids",
        "majority_token_ids",
        "majority_counts",
        "agreement_pattern",
        "majority_target_prob",
        "accepted_by_naive",
        "draft_agrees_majority",
    }
    JS_KEYS = {"js_draft", "js_heads_max", "accepted_by_js", "accepted_by_majority"}

    @pytest.mark.parametrize("rule", RULES)
    def test_keys_shapes_dtypes(self, rule):
        B, L, K = 3, 4, 5
        inputs = model_round(B, L, K, p_drop=0.3, seed=6)
        out = rule()(inputs, trace=True)
        assert set(out.trace) == self.KEYS | self.JS_KEYS
        assert out.trace["head_token_ids"].shape == (B, L, K)
        for key in (self.KEYS | self.JS_KEYS) - {"head_token_ids"}:
            assert out.trace[key].shape == (B, L), key
        for key in [
            "accepted_by_naive",
            "draft_agrees_majority",
            "accepted_by_js",
            "accepted_by_majority",
        ]:
            assert out.trace[key].dtype == torch.bool, key
        assert out.trace["js_draft"].dtype == torch.float32
        assert rule()(inputs).trace is None

    def test_naive_without_draft_probs_has_no_js_fields(self):
        inputs = model_round(3, 4, 5, p_drop=0.3, seed=6)
        inputs.draft_probs = None
        assert set(DropMatchNaive()(inputs, trace=True).trace) == self.KEYS

    def test_rule_decisions_agree_with_trace(self):
        inputs = model_round(64, 5, 5, p_drop=0.4, seed=7)
        for rule, key in [(DropMatchNaive, "accepted_by_naive"), (DropMatchJS, None)]:
            out = rule()(inputs, trace=True)
            t = out.trace
            ok = t[key] if key else t["accepted_by_js"] | t["draft_agrees_majority"]
            expected = ok.long().cumprod(-1).bool()
            assert torch.equal(out.accept_mask, expected)


class TestSampling:
    @pytest.mark.parametrize("rule", RULES)
    def test_seeded_determinism_and_no_global_rng(self, rule):
        inputs = model_round(128, 4, 5, p_drop=0.3, seed=8, temperature=1.0)
        state = torch.get_rng_state()
        results = []
        for seed in (1, 1, 2):
            inputs.generator = gen(seed)
            out = rule()(inputs, trace=True)
            results.append((out.accept_mask, out.next_token_ids, out.trace["head_token_ids"]))
        assert torch.equal(torch.get_rng_state(), state)
        assert all(torch.equal(x, y) for x, y in zip(results[0], results[1]))
        assert not torch.equal(results[0][2], results[2][2])

    @pytest.mark.parametrize("rule", RULES)
    def test_requires_generator(self, rule):
        inputs = model_round(2, 2, 5, p_drop=0.3, seed=0, temperature=0.8)
        with pytest.raises(ValueError, match="generator"):
            rule()(inputs)

    def test_js_uses_tempered_heads_and_centroid(self):
        T = 0.5
        inputs = model_round(4, 3, 5, p_drop=0.3, seed=11, temperature=T)
        inputs.generator = gen(0)
        t = DropMatchJS()(inputs, trace=True).trace
        heads = inputs.head_logits[:, :3] / T  # [B, L, K, V]
        centroid = torch.softmax(heads.mean(-2), -1)
        expected_heads = js_divergence(torch.softmax(heads, -1), centroid.unsqueeze(-2)).amax(-1)
        torch.testing.assert_close(t["js_draft"], js_divergence(inputs.draft_probs, centroid))
        torch.testing.assert_close(t["js_heads_max"], expected_heads)
        raw = inputs.head_logits[:, :3]
        untempered = js_divergence(
            torch.softmax(raw, -1), torch.softmax(raw.mean(-2), -1).unsqueeze(-2)
        ).amax(-1)
        assert not torch.allclose(t["js_heads_max"], untempered)

    def test_head_tokens_and_next_token_follow_tempered_softmax(self):
        N, V, K, T = 20000, 10, 2, 0.6
        g = gen(9)
        target_row = torch.randn(V, generator=g)  # [V]
        head_row = torch.randn(V, generator=g)
        head_row[0] = -1e4  # the draft token 0 is never produced by a head -> always rejected
        heads = head_row.expand(N, 2, K, V).clone()
        target = target_row.expand(N, 2, V).clone()
        drafts = torch.zeros(N, 1, dtype=torch.int64)
        inputs = VerifyInputs(drafts, target, None, heads, temperature=T, generator=gen(10))
        out = DropMatchNaive()(inputs, trace=True)
        assert out.num_accepted.sum().item() == 0
        next_counts = torch.bincount(out.next_token_ids, minlength=V)
        assert chi2(next_counts, torch.softmax(target_row / T, -1)) < CHI2_CRIT_DF9
        assert (
            chi2(next_counts, torch.softmax(target_row, -1)) > CHI2_CRIT_DF9
        )  # temperature matters
        head_counts = torch.bincount(out.trace["head_token_ids"].flatten(), minlength=V)
        p_head = torch.softmax(head_row / T, -1)
        assert head_counts[0].item() == 0
        assert chi2(head_counts[1:], p_head[1:] / p_head[1:].sum()) < CHI2_CRIT_DF8
        assert chi2(head_counts[1:], torch.full((V - 1,), 1.0 / (V - 1))) > CHI2_CRIT_DF8


@pytest.mark.parametrize("rule", RULES)
def test_bfloat16_inputs_match_float32(rule):
    inputs = model_round(16, 4, 5, p_drop=0.3, seed=12)
    low = VerifyInputs(
        inputs.draft_token_ids,
        inputs.target_logits.bfloat16(),
        inputs.draft_probs.bfloat16(),
        inputs.head_logits.bfloat16(),
    )
    high = VerifyInputs(
        inputs.draft_token_ids,
        low.target_logits.float(),
        low.draft_probs.float(),
        low.head_logits.float(),
    )
    a, b = rule()(low, trace=True), rule()(high, trace=True)
    assert torch.equal(a.accept_mask, b.accept_mask) and torch.equal(
        a.next_token_ids, b.next_token_ids
    )
    assert a.trace["majority_target_prob"].dtype == torch.float32


class TestMajorityAndTargetOptions:
    """dropmatch.majority (strict | plurality) on 1-1-1-1-1 and 2-2-1 splits; dropmatch.include_target."""

    @staticmethod
    def collapsed_js_round(head_tokens: list[int], draft: int, target_token: int, V: int = 8):
        # one draft position; the heads are nearly the same distribution (5 on tokens 1-6, +0.01 on each head's
        # own token, so argmaxes differ), so max JS to the centroid is tiny, and a draft distribution peaked on
        # token 7 fails Eq. 6: only Eq. 7 (or the target option) can accept.
        base = torch.zeros(V)
        base[1:7] = 5.0
        heads = base.repeat(1, 2, len(head_tokens), 1)  # [1, L+1=2, K, V]
        for k, tok in enumerate(head_tokens):
            heads[0, :, k, tok] += 0.01
        target = 8.0 * torch.nn.functional.one_hot(torch.tensor([[target_token, 0]]), V).float()
        draft_probs = (
            torch.nn.functional.one_hot(torch.tensor([[V - 1]]), V).float() * 0.9 + 0.1 / V
        )
        return VerifyInputs(torch.tensor([[draft]]), target, draft_probs, heads)

    @pytest.mark.parametrize(
        "tokens, draft, strict, plurality",
        [
            (
                [1, 2, 3, 4, 5],
                1,
                False,
                True,
            ),  # 1-1-1-1-1: no strict majority; plurality ties -> head 0 (token 1)
            (
                [1, 2, 3, 4, 5],
                2,
                False,
                False,
            ),  # ... and only the earliest head's token under plurality
            (
                [4, 6, 4, 6, 5],
                4,
                False,
                True,
            ),  # 2-2-1: no strict majority; plurality -> head 0's token 4
            ([4, 6, 4, 6, 5], 6, False, False),
            ([3, 3, 3, 6, 5], 3, True, True),  # 3-1-1: a strict majority
        ],
    )
    def test_strict_vs_plurality(self, tokens, draft, strict, plurality):
        inputs = self.collapsed_js_round(tokens, draft, target_token=0)
        js = DropMatchJS(majority="strict")(inputs, trace=True)
        assert js.trace["accepted_by_js"].tolist() == [[False]]  # only Eq. 7 can decide
        assert js.num_accepted.tolist() == [int(strict)]
        assert DropMatchJS(majority="plurality")(inputs).num_accepted.tolist() == [int(plurality)]
        assert js.trace["draft_agrees_majority"].tolist() == [[strict]]

    @pytest.mark.parametrize("rule", RULES)
    def test_include_target_accepts_the_targets_own_token(self, rule):
        inputs = self.collapsed_js_round(
            [1, 2, 3, 4, 5], draft=6, target_token=6
        )  # no head proposes 6
        assert rule()(inputs).num_accepted.tolist() == [
            0
        ]  # Algorithm 1 / Eq. 4 reject the target's token
        assert rule(include_target=True)(inputs).num_accepted.tolist() == [1]

    @pytest.mark.parametrize("rule", RULES)
    def test_include_target_is_a_superset_of_greedy_sd(self, rule):
        inputs = model_round(B=128, L=5, K=5, p_drop=0.5, seed=11)
        dm = rule(include_target=True)(inputs).num_accepted
        sd = GreedyMatch()(inputs).num_accepted
        assert bool((dm >= sd).all()) and bool((dm > sd).any())
