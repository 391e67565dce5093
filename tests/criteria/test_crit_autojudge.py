"""Auto-Judge and Auto-Judge + DropMatch rules: threshold ends, always-important head == greedy SD,
hand-made separation, AJ+DM accepts a superset of AJ and of DM on the same round."""

from __future__ import annotations

import pytest
import torch

from criteria.autojudge import AutoJudge, JudgeHead
from criteria.autojudge_dropmatch import AutoJudgeDropMatch
from criteria.base import Criterion, VerifyInputs
from criteria.dropmatch_js import DropMatchJS
from criteria.dropout_heads import dropout_head_logits
from criteria.greedy_match import GreedyMatch

D_DRAFT, D = 6, 8


def head(weight: torch.Tensor, bias: float, features: str = "dd_dt") -> JudgeHead:
    F = weight.shape[0]
    return JudgeHead(
        weight=weight.float(),
        bias=bias,
        mean=torch.zeros(F),
        scale=torch.ones(F),
        features=features,
    )


def always_important() -> JudgeHead:
    return head(torch.zeros(D_DRAFT + D), bias=50.0)


def rnd_round(
    seed: int, B: int = 3, L: int = 6, V: int = 11, K: int = 5, p_drop: float = 0.3
) -> VerifyInputs:
    g = torch.Generator().manual_seed(seed)
    hid = torch.randn(B * (L + 1), D, generator=g)
    W = torch.randn(V, D, generator=g)
    out = dropout_head_logits(
        hid, W, num_heads=K, p_drop=p_drop, generator=torch.Generator().manual_seed(seed + 1)
    )
    target = out[:, 0].reshape(B, L + 1, V)
    drafts = torch.where(
        torch.rand(B, L, generator=g) < 0.6,
        target[:, :L].argmax(-1),
        torch.randint(0, V, (B, L), generator=g),
    )
    return VerifyInputs(
        drafts,
        target,
        torch.softmax(torch.randn(B, L, V, generator=g), -1),
        out[:, 1:].reshape(B, L + 1, K, V),
        target_hidden=hid.reshape(B, L + 1, D),
        draft_hidden=torch.randn(B, L, D_DRAFT, generator=g),
    )


def test_protocol_and_flags():
    aj = AutoJudge(0.5, always_important())
    ajdm = AutoJudgeDropMatch(0.5, always_important(), majority="plurality")
    assert isinstance(aj, Criterion) and isinstance(ajdm, Criterion)
    assert (
        aj.needs_hidden
        and ajdm.needs_hidden
        and ajdm.needs_draft_probs
        and not aj.needs_draft_probs
    )
    assert (
        ajdm.needs_heads
        and not aj.needs_heads
        and ajdm.heads_at_drafts_only
        and ajdm.majority == "plurality"
    )
    with pytest.raises(ValueError, match="dropmatch.majority"):
        AutoJudgeDropMatch(0.5, always_important(), majority="most")


@pytest.mark.parametrize("seed", range(6))
def test_always_important_head_is_greedy_match(seed):
    inp = rnd_round(seed)
    ref = GreedyMatch()(inp)
    for thr in (0.0, 0.3, 0.99):
        res = AutoJudge(thr, always_important())(inp)
        assert torch.equal(res.accept_mask, ref.accept_mask) and torch.equal(
            res.next_token_ids, ref.next_token_ids
        )


@pytest.mark.parametrize("seed", range(4))
def test_threshold_ends(seed):
    inp = rnd_round(seed)
    never = head(
        torch.zeros(D_DRAFT + D), bias=-50.0
    )  # p_important ~ 0: every mismatch unimportant
    assert bool(
        (AutoJudge(1.0, always_important())(inp).num_accepted == inp.draft_token_ids.shape[1]).all()
    )
    assert torch.equal(AutoJudge(0.0, never)(inp).accept_mask, GreedyMatch()(inp).accept_mask)
    assert bool((AutoJudge(0.5, never)(inp).num_accepted == inp.draft_token_ids.shape[1]).all())


def test_hand_case_judge_decides_at_the_mismatch():
    """Mismatch at position 1; the judge reads the target hidden at the draft token (row 2) and the draft's."""
    V, L = 5, 3
    target = torch.full((1, L + 1, V), -5.0)
    for i, tok in enumerate([1, 2, 3, 4]):
        target[0, i, tok] = 5.0
    drafts = torch.tensor([[1, 0, 3]])  # position 1 mismatches (target wants 2)
    th = torch.zeros(1, L + 1, D)
    dh = torch.zeros(1, L, D_DRAFT)
    w = torch.zeros(D_DRAFT + D)
    w[D_DRAFT] = 4.0  # judge looks at target_hidden[..., 0]
    judge = head(w, bias=0.0)
    th[0, 2, 0] = -2.0  # p = sigmoid(-8) at the mismatch: unimportant
    res = AutoJudge(0.5, judge)(VerifyInputs(drafts, target, target_hidden=th, draft_hidden=dh))
    assert res.num_accepted.tolist() == [3] and res.next_token_ids.tolist() == [4]
    th[0, 2, 0] = 2.0  # p = sigmoid(8): important -> reject at 1, correct with the target's token 2
    res = AutoJudge(
        0.5,
        judge,
    )(VerifyInputs(drafts, target, target_hidden=th, draft_hidden=dh), trace=True)
    assert res.num_accepted.tolist() == [1] and res.next_token_ids.tolist() == [2]
    assert res.trace["p_important"][0, 1] > 0.99


@pytest.mark.parametrize("seed", range(8))
def test_aj_dm_superset_of_both(seed):
    inp = rnd_round(seed)
    g = torch.Generator().manual_seed(100 + seed)
    judge = head(torch.randn(D_DRAFT + D, generator=g), bias=float(torch.randn(1, generator=g)))
    for thr in (0.2, 0.5, 0.8):
        aj = AutoJudge(thr, judge)(inp)
        dm = DropMatchJS()(inp)
        both = AutoJudgeDropMatch(thr, judge)(inp, trace=True)
        assert bool((both.accept_mask >= aj.accept_mask).all()) and bool(
            (both.accept_mask >= dm.accept_mask).all()
        )
        assert bool((both.num_accepted >= torch.maximum(aj.num_accepted, dm.num_accepted)).all())
        assert "accepted_by_judge" in both.trace and "js_draft" in both.trace


def test_dt_features_and_errors():
    inp = rnd_round(0)
    assert (
        AutoJudge(0.5, head(torch.zeros(D), 50.0, features="dt"))(inp).num_accepted.tolist()
        == GreedyMatch()(inp).num_accepted.tolist()
    )
    with pytest.raises(ValueError, match="threshold"):
        AutoJudge(1.5, always_important())
    with pytest.raises(ValueError, match="judge is required"):
        AutoJudge(0.5)
    with pytest.raises(ValueError, match="temperature"):
        AutoJudge(0.5, always_important())(
            VerifyInputs(
                inp.draft_token_ids,
                inp.target_logits,
                temperature=0.7,
                generator=torch.Generator(),
                target_hidden=inp.target_hidden,
            )
        )
    with pytest.raises(ValueError, match="features"):
        AutoJudge(0.5, head(torch.zeros(D + 1), 0.0))(inp)
    with pytest.raises(ValueError, match="target_hidden"):
        AutoJudge(0.5, always_important())(VerifyInputs(inp.draft_token_ids, inp.target_logits))


def test_state_roundtrip(tmp_path):
    judge = head(torch.arange(D_DRAFT + D).float(), 0.25)
    path = tmp_path / "judge.pt"
    torch.save(
        {
            "weight": judge.weight,
            "bias": torch.tensor(judge.bias),
            "mean": judge.mean,
            "scale": judge.scale,
            "features": "dd_dt",
        },
        path,
    )
    inp = rnd_round(1)
    a = AutoJudge(0.4, judge)(inp, trace=True).trace["p_important"]
    b = AutoJudge(0.4, str(path))(inp, trace=True).trace["p_important"]
    assert torch.allclose(a, b)
