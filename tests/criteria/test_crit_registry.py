"""``import criteria.rules`` fills the CRITERIA registry with every rule under its key."""

from __future__ import annotations

import pytest

import criteria.rules  # noqa: F401  (fills the registry)
from criteria.base import Criterion
from criteria.registry import CRITERIA, UnknownNameError

EXPECTED = {
    "greedy_match": (0, 0.0, False),
    "rejection": (0, 0.0, True),
    "dropmatch_naive": (5, 0.3, False),
    "dropmatch_js": (5, 0.3, True),
}


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_every_rule_is_registered_under_its_name(key):
    rule = CRITERIA.get(key)()
    assert isinstance(rule, Criterion)
    assert rule.name == key
    assert (rule.num_heads, rule.p_drop, rule.needs_draft_probs) == EXPECTED[key]


def test_registry_holds_the_four_rules_and_suggests_close_names():
    assert set(EXPECTED) <= set(CRITERIA.names())
    with pytest.raises(UnknownNameError, match="dropmatch_js"):
        CRITERIA.get("dropmatch_jss")


def test_dropmatch_kwargs_from_config():
    rule = CRITERIA.get("dropmatch_js")(K=3, p_drop=0.1)
    assert (rule.num_heads, rule.p_drop) == (3, 0.1)
