"""criteria.verify.verify_round: one verify round for every backend (heads + rule, per-row random streams)."""

from __future__ import annotations

import pytest
import torch

import criteria.rules  # noqa: F401
from criteria.dropout_heads import HeadSpec, LMHead, dropout_head_logits
from criteria.registry import CRITERIA
from criteria.verify import verify_round


def gens(seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


def setup(B=4, L=5, d=16, V=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, L + 1, d, generator=g)
    W = torch.randn(V, d, generator=g) / 2
    head = LMHead(W)
    target = (hidden @ W.T).argmax(-1)  # [B, L+1]
    drafts = torch.where(
        torch.rand(B, L, generator=g) < 0.7, target[:, :L], torch.randint(0, V, (B, L), generator=g)
    )
    draft_probs = torch.softmax(torch.randn(B, L, V, generator=g), -1)
    return hidden, head, drafts, draft_probs


@pytest.mark.parametrize("name", ["dropmatch_js", "dropmatch_naive", "rejection"])
@pytest.mark.parametrize("T", [0.0, 0.8])
def test_a_row_decides_the_same_alone_as_in_a_batch(name, T):
    hidden, head, drafts, q = setup()
    rule = CRITERIA.get(name)()
    heads = HeadSpec(K=5, p_drop=0.3) if rule.needs_heads else HeadSpec()
    batch = verify_round(
        hidden,
        head,
        drafts,
        rule,
        heads,
        temperature=T,
        generators=gens([1, 2, 3, 4]),
        draft_probs=q,
    )
    for i, s in enumerate([1, 2, 3, 4]):
        one = verify_round(
            hidden[i : i + 1],
            head,
            drafts[i : i + 1],
            rule,
            heads,
            temperature=T,
            generators=gens([s]),
            draft_probs=q[i : i + 1],
        )
        assert one.num_accepted.tolist() == batch.num_accepted[i : i + 1].tolist()
        assert one.next_token_ids.tolist() == batch.next_token_ids[i : i + 1].tolist()


def test_masks_come_first_from_each_rows_generator():
    """Row b's heads are dropout_head_logits with generator b: the masks are the first draws of the stream."""
    hidden, head, drafts, q = setup(B=2)
    rule = CRITERIA.get("dropmatch_naive")()
    res = verify_round(
        hidden,
        head,
        drafts,
        rule,
        HeadSpec(K=3, p_drop=0.4),
        temperature=0.0,
        generators=gens([7, 8]),
        trace=True,
    )
    for b, s in enumerate([7, 8]):
        ref = dropout_head_logits(
            hidden[b], head.weight, num_heads=3, p_drop=0.4, generator=gens([s])[0]
        )
        assert torch.equal(res.trace["head_token_ids"][b], ref[:5, 1:].argmax(-1))


def test_p_drop_zero_dropmatch_equals_greedy():
    hidden, head, drafts, q = setup(B=8)
    greedy = verify_round(
        hidden,
        head,
        drafts,
        CRITERIA.get("greedy_match")(),
        HeadSpec(),
        temperature=0.0,
        generators=gens(range(8)),
    )
    for name in ("dropmatch_js", "dropmatch_naive"):
        dm = verify_round(
            hidden,
            head,
            drafts,
            CRITERIA.get(name)(),
            HeadSpec(K=5, p_drop=0.0),
            temperature=0.0,
            generators=gens(range(8)),
            draft_probs=q,
        )
        assert torch.equal(dm.num_accepted, greedy.num_accepted) and torch.equal(
            dm.next_token_ids, greedy.next_token_ids
        )


def test_autoregressive_and_single_path_steps():
    hidden, head, _, _ = setup(B=3, L=0)
    none = torch.zeros((3, 0), dtype=torch.long)
    ar = verify_round(
        hidden,
        head,
        none,
        CRITERIA.get("autoregressive")(),
        HeadSpec(),
        temperature=0.0,
        generators=gens([0, 1, 2]),
    )
    assert ar.next_token_ids.tolist() == (hidden[:, 0] @ head.weight.T).argmax(-1).tolist()
    path = verify_round(
        hidden,
        head,
        none,
        CRITERIA.get("dropout_path")(),
        HeadSpec(K=1, p_drop=0.5),
        temperature=0.0,
        generators=gens([0, 1, 2]),
    )
    ref = [
        dropout_head_logits(
            hidden[b], head.weight, num_heads=1, p_drop=0.5, generator=gens([b])[0]
        )[0, 1].argmax()
        for b in range(3)
    ]
    assert path.next_token_ids.tolist() == [int(t) for t in ref]


def test_errors_name_the_field():
    hidden, head, drafts, q = setup(B=2)
    with pytest.raises(ValueError, match=r"dropmatch.K=0"):
        verify_round(
            hidden,
            head,
            drafts,
            CRITERIA.get("dropmatch_js")(),
            HeadSpec(),
            temperature=0.0,
            generators=gens([0, 1]),
            draft_probs=q,
        )
    with pytest.raises(ValueError, match="one generator per row"):
        verify_round(
            hidden,
            head,
            drafts,
            CRITERIA.get("greedy_match")(),
            HeadSpec(),
            temperature=0.0,
            generators=gens([0]),
        )
    with pytest.raises(ValueError, match="dropmatch.p_drop"):
        HeadSpec(K=5, p_drop=1.0)
    with pytest.raises(ValueError, match="dropmatch.K"):
        HeadSpec(K=-1)


def test_generator_on_another_device_than_the_hidden_states_is_refused():
    """A CPU generator with hidden states on another device must fail clearly, not mix devices."""
    hidden, head, drafts, q = setup(B=1)
    meta = hidden.to("meta")
    with pytest.raises(ValueError, match="generator is on cpu but the hidden states are on meta"):
        verify_round(
            meta,
            LMHead(head.weight.to("meta")),
            drafts.to("meta"),
            CRITERIA.get("dropmatch_naive")(),
            HeadSpec(K=2, p_drop=0.3),
            temperature=0.0,
            generators=gens([0]),
        )
