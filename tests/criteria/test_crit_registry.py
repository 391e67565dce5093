"""``import criteria.rules`` fills the CRITERIA registry with every rule under its key."""

from __future__ import annotations

import pytest

import criteria.rules  # noqa: F401  (fills the registry)
from criteria.base import Criterion
from criteria.registry import CRITERIA, UnknownNameError

EXPECTED = {  # (needs_heads, needs_draft_probs, needs_hidden)
    "autoregressive": (False, False, False),
    "greedy_match": (False, False, False),
    "rejection": (False, True, False),
    "dropmatch_naive": (True, False, False),
    "dropmatch_js": (True, True, False),
    "dropout_path": (True, False, False),
}


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_every_rule_is_registered_under_its_name(key):
    rule = CRITERIA.get(key)()
    assert isinstance(rule, Criterion)
    assert rule.name == key
    assert (rule.needs_heads, rule.needs_draft_probs, rule.needs_hidden) == EXPECTED[key]


def test_registry_holds_every_rule_and_suggests_close_names():
    assert set(EXPECTED) <= set(CRITERIA.names())
    with pytest.raises(UnknownNameError, match="dropmatch_js"):
        CRITERIA.get("dropmatch_jss")


def test_dropmatch_rule_settings_from_config_heads_elsewhere():
    rule = CRITERIA.get("dropmatch_js")(majority="plurality", include_target=True)
    assert (rule.majority, rule.include_target) == ("plurality", True)
    with pytest.raises(TypeError):  # K / p_drop are a HeadSpec, not rule settings
        CRITERIA.get("dropmatch_js")(K=3, p_drop=0.1)
