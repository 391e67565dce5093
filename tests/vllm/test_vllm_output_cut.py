"""Where a vLLM output ends: stop strings and EOS cut the ids exactly as the HF backend does.

Tiny pair, greedy. References: the HF backend's AR decode (L = 0) and its SD decode, both cut by
``runners.backends.output.finalize``. Stops and EOS tokens are chosen so that the cut falls INSIDE a round of
the uncut SD run (vLLM's own per-step metrics then count drafts past the output's end).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it

from tests.helpers.vllm import L  # noqa: E402

PROMPTS = [
    "def add(a, b):",
    "The quick brown fox",
    "for i in range(10):",
    "Janet has 3 apples",
    "Question: what is 12 times 7?",
    "Write a short answer.",
    "A B C D. The answer is",
    "Step by step, we add",
]
CAP = 32


def _samples():
    from runners.datasets.base import Sample

    return [Sample(f"cut/{i}", [{"role": "user", "content": c}]) for i, c in enumerate(PROMPTS)]


def _rules():
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA

    return CRITERIA.get("autoregressive")(), CRITERIA.get("greedy_match")(), HeadSpec()


def _round_ends(accepted_per_round: list[int]) -> set[int]:
    """Output lengths at which a round of an uncut run ends (1: the prefill's token)."""
    ends, n = {1}, 1
    for a in accepted_per_round:
        n += a + 1
        ends.add(n)
    return ends


def _identity(r) -> bool:
    return (
        r.counters.num_drafts + r.counters.num_accepted_tokens
        == len(r.output_token_ids) - 1 + r.eos_removed
    )


def _inner_stops(tokenizer, r) -> list[str]:
    """Stop strings of 2-3 characters from ``r``'s text, one per completing token, each first completed by a
    token that does not end a round of ``r`` (so the cut falls inside a round)."""
    ids, text, ends = r.output_token_ids, r.output_text, _round_ends(r.accepted_per_round)
    offsets = [
        len(tokenizer.decode(ids[:k], skip_special_tokens=True)) for k in range(len(ids) + 1)
    ]
    stops = {}
    for k in range(1, len(ids)):  # token k completes the stop: an output of k + 1 tokens
        for j in range(offsets[k], offsets[k + 1]):  # the stop's last character lies in token k
            for m in (2, 3):
                stop = text[max(j - m + 1, 0) : j + 1]
                if (
                    len(stop) == m
                    and "\ufffd" not in stop
                    and stop.strip()
                    and text.find(stop) + m - 1 == j
                    and k + 1 not in ends
                    and k not in stops
                ):
                    stops[k] = stop
    return list(stops.values())


def test_stop_strings_cut_sd_ids_as_ar_ids(backends):
    """Stops taken from the greedy text: vLLM SD ids == HF AR ids == HF SD ids (and text, stop
    reason), through the hook's rule and through vLLM's own sampler; the ids end at the token that completes the
    stop, the counters count only what is in the output (vLLM returns no per-request metrics for these requests)."""
    from runners.backends.base import DecodingConfig

    hf, vb = backends
    ar, gm, no_heads = _rules()
    samples = _samples()
    sd0 = list(
        hf.generate(
            samples, DecodingConfig(num_speculative_tokens=L, max_new_tokens=CAP), gm, no_heads
        )
    )
    cases = [(s, stop) for s, r in zip(samples, sd0) for stop in _inner_stops(hf.tokenizer, r)]
    assert len(cases) >= 6, cases
    for sample, stop in cases:
        ar_dec = DecodingConfig(num_speculative_tokens=0, max_new_tokens=CAP, stop=[stop])
        sd_dec = DecodingConfig(num_speculative_tokens=L, max_new_tokens=CAP, stop=[stop])
        want = list(hf.generate([sample], ar_dec, ar, no_heads))[0]
        assert want.stop_reason == "stop" and stop not in want.output_text, stop
        got_all = [list(hf.generate([sample], sd_dec, gm, no_heads))[0]]
        for native in (
            False,
            True,
        ):  # the hook's rule, and vLLM's own sampler (its rounds logged by the hook)
            vb.native_verify = native
            got_all.append(list(vb.generate([sample], sd_dec, gm, no_heads))[0])
        vb.native_verify = False
        for got in got_all:
            assert (got.output_token_ids, got.output_text, got.stop_reason) == (
                want.output_token_ids,
                want.output_text,
                want.stop_reason,
            ), stop
            assert _identity(got), stop


def test_eos_inside_a_round_is_cut_and_counted_as_hf(backends):
    """An end-of-sequence token that arrives inside a round: both backends drop it, end the ids before it and
    count only the round tokens up to it (vLLM's per-step metrics count the whole round)."""
    from runners.backends.base import DecodingConfig

    hf, vb = backends
    assert vb.eos_ids == set(hf.eos_ids) and vb.eos_ids  # one end-of-sequence set for both backends
    _, gm, no_heads = _rules()
    dec = DecodingConfig(num_speculative_tokens=L, max_new_tokens=CAP)
    base = list(hf.generate(_samples()[:1], dec, gm, no_heads))[0]
    ids, ends = base.output_token_ids, _round_ends(base.accepted_per_round)
    # tokens whose first occurrence is neither the prefill's token nor the last token of a round
    eos_tokens = [
        t for k, t in enumerate(ids) if ids.index(t) == k and k >= 1 and k + 1 not in ends
    ][:4]
    assert eos_tokens, (ids, base.accepted_per_round)
    hf_eos, vb_eos = set(hf.eos_ids), vb.eos_ids
    try:
        for tok in eos_tokens:
            hf.eos_ids, vb._eos_ids = hf_eos | {tok}, vb_eos | {tok}
            h = list(hf.generate(_samples()[:1], dec, gm, no_heads))[0]
            v = list(vb.generate(_samples()[:1], dec, gm, no_heads))[0]
            assert (
                v.output_token_ids,
                v.accepted_per_round,
                v.counters.to_dict(),
                v.stop_reason,
                v.eos_removed,
            ) == (
                h.output_token_ids,
                h.accepted_per_round,
                h.counters.to_dict(),
                h.stop_reason,
                h.eos_removed,
            )
            assert (
                v.stop_reason == "eos"
                and v.eos_removed == 1
                and v.output_token_ids == ids[: ids.index(tok)]
            )
            assert _identity(v)
    finally:
        hf.eos_ids, vb._eos_ids = hf_eos, vb_eos
