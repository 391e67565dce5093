"""runners.backends.output: where an output ends, and the counter identity rounds + accepted == tokens emitted."""

from __future__ import annotations

import pytest

from runners.backends.output import cut_rounds, finalize, is_finished, round_counters

EOS = 99


class CharTokenizer:
    """id i < 26 -> one letter; 26 -> ' '; EOS decodes to nothing (special)."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(" " if i == 26 else ("" if i == EOS else chr(97 + i)) for i in ids)


TOK = CharTokenizer()


def identity_holds(out, kept) -> bool:
    return len(kept) + sum(kept) == len(out.token_ids) - 1 + out.eos_removed == out.emitted


def test_cap_one_token_into_a_round():
    # prefill token + three L=5 rounds that accepted everything: 1 + 3 * 6 = 19 raw tokens; the cap is 17
    raw = list(range(19))
    out = finalize(raw, TOK, {EOS}, [], max_new_tokens=17)
    kept = cut_rounds([5, 5, 5], out.emitted)
    assert len(out.token_ids) == 17 and out.stop_reason == "length"
    assert kept == [5, 5, 3]  # the third round emitted only 4 tokens before the cap
    assert identity_holds(out, kept)
    c = round_counters(kept, 5)
    assert (c.num_drafts, c.num_accepted_tokens, c.num_accepted_tokens_per_pos) == (
        3,
        13,
        [3, 3, 3, 2, 2],
    )


def test_eos_inside_the_accepted_run():
    raw = [
        0,
        1,
        2,
        3,
        EOS,
        5,
        6,
        7,
    ]  # prefill token, then round 1 accepted 4 drafts + bonus (incl. the EOS at 4th)
    out = finalize(raw, TOK, {EOS}, [], max_new_tokens=50)
    assert out.token_ids == [0, 1, 2, 3] and out.stop_reason == "eos" and out.eos_removed == 1
    kept = cut_rounds([4, 1], out.emitted)  # round 2 never reaches the output
    assert kept == [3] and identity_holds(out, kept)


def test_eos_from_the_prefill_gives_no_rounds():
    out = finalize([EOS, 1, 2], TOK, {EOS}, [], max_new_tokens=10)
    assert out.token_ids == [] and out.emitted == 0 and cut_rounds([1], out.emitted) == []


def test_stop_string_cuts_the_ids_at_the_completing_token():
    raw = [7, 4, 11, 11, 14, 26, 22, 14, 17, 11, 3]  # "hello world"
    out = finalize(raw, TOK, {EOS}, ["lo w"], max_new_tokens=50)
    assert out.text == "hel" and out.stop_reason == "stop"
    assert out.token_ids == raw[:7]  # ends at 'w', the token that completes "lo w"
    kept = cut_rounds(
        [3, 3, 2], out.emitted
    )  # rounds of 4, 4, 3 tokens; 6 of them are in the output
    assert kept == [3, 1] and identity_holds(out, kept)


def test_earliest_of_several_stops_and_cap_before_stop():
    raw = [0, 1, 2, 3, 4, 5]  # "abcdef"
    assert finalize(raw, TOK, set(), ["ef", "cd"], 50).token_ids == [0, 1, 2, 3]
    out = finalize(raw, TOK, set(), ["ef"], max_new_tokens=5)  # the stop lies past the cap
    assert out.token_ids == [0, 1, 2, 3, 4] and out.stop_reason == "length"


def test_is_finished():
    assert not is_finished([0, 1], TOK, {EOS}, ["zz"], 5)
    assert is_finished([0, 1, EOS], TOK, {EOS}, [], 5)
    assert is_finished([0, 1, 2, 3, 4], TOK, {EOS}, [], 5)
    assert is_finished([25, 25], TOK, {EOS}, ["zz"], 5)


def test_rounds_that_committed_too_little_are_an_error():
    with pytest.raises(ValueError, match="rounds committed only 2"):
        cut_rounds([1], 5)
