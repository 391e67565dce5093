"""The field's rules from conf/method/: every method file builds its rule with the engine's defaults, a knob out of
range (or a draft length / temperature the rule does not define) is refused by name before any model loads, and the
backends declare where the rules run (the HF loop and the vLLM hook; not vLLM's native sampler)."""

from __future__ import annotations

import pytest

import criteria.rules  # noqa: F401
from criteria.registry import CRITERIA
from criteria.rules import FIELD_RULES
from runners.config.errors import ConfigError
from runners.paths import REPO_ROOT

BASE = ["pair=tiny", "profile=smoke", "dataset=gsm8k"]


def compose(overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return hydra_compose("run", overrides=BASE + list(overrides))


@pytest.fixture
def no_model_loads(monkeypatch, tmp_path):
    import runners.models.loader as loader

    def forbidden(*a, **k):
        raise AssertionError("a model was loaded for an invalid config")

    monkeypatch.setattr(loader, "load_pair", forbidden)
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("DROPMATCH_TINY_PAIR", str(tmp_path / "no_pair"))
    return tmp_path / "results"


@pytest.mark.parametrize("method", FIELD_RULES)
def test_method_file_builds_its_rule_with_the_engine_defaults(method, monkeypatch):
    from runners.config.decode_spec import build_rule
    from runners.config.resolve import resolve_run_config

    monkeypatch.setenv("DROPMATCH_TINY_PAIR", "/x")
    c = resolve_run_config(compose([f"method={method}", "L=4"]), identify_models=False)
    rule = build_rule(c)
    assert rule.name == method == c["method"]["criterion"]
    assert repr(rule) == repr(
        CRITERIA.get(method)()
    )  # conf/method defaults = the rule's own defaults
    assert c["dropmatch"] == {"unused": True}


BAD = [
    (
        ["method=fly", "L=4", "method.kwargs.window_size=0"],
        r"^method.kwargs.window_size=0 is invalid; allowed: an integer",
    ),
    (
        ["method=fly", "L=4", "method.kwargs.window_size=4"],
        r"^method.kwargs.window_size=4 is invalid with L=4; allowed: an integer in \[1, 3\]",
    ),
    (
        ["method=fly", "L=1"],
        r"^L=1 is invalid with method.criterion='fly'; allowed: an integer >= 2",
    ),
    (
        ["method=fly", "method.kwargs.entropy_threshold=-1"],
        r"^method.kwargs.entropy_threshold=-1 is invalid",
    ),
    (
        ["method=fsd", "method.kwargs.divergence=tv"],
        r"^method.kwargs.divergence='tv' is invalid; allowed: js, reverse_kl, kl",
    ),
    (
        ["method=fsd", "method.kwargs.threshold=-0.5"],
        r"^method.kwargs.threshold=-0.5 is invalid; allowed: a number >= 0",
    ),
    (
        ["method=typical", "method.kwargs.posterior_threshold=2"],
        r"^method.kwargs.posterior_threshold=2 is invalid; allowed: a number in \[0, 1\]",
    ),
    (
        ["method=relaxed_topk", "method.kwargs.top_k=0"],
        r"^method.kwargs.top_k=0 is invalid; allowed: an integer >= 1",
    ),
    (
        ["method=relaxed_topk", "decoding.temperature=0.7"],
        r"^decoding.temperature=0.7 is not defined for method.criterion='relaxed_topk'; allowed: 0",
    ),
    (
        ["method=prob_threshold", "method.kwargs.threshold_acc=0"],
        r"^method.kwargs.threshold_acc=0 is invalid; allowed: a number in \(0, 1\]",
    ),
    (
        ["method=static_ensemble", "method.kwargs.weight=1.5"],
        r"^method.kwargs.weight=1.5 is invalid; allowed: a number in \[0, 1\]",
    ),
    (
        ["method=bild", "decoding.temperature=1.0"],
        r"^decoding.temperature=1.0 is not defined for method.criterion='bild'",
    ),
    (
        ["method=bild", "method.kwargs.fallback_threshold=1.2"],
        r"^method.kwargs.fallback_threshold=1.2 is invalid",
    ),
    (
        ["method=typical", "+method.kwargs.window=2"],
        r"^method.kwargs.window is not a setting of method.criterion='typical'; allowed: method.kwargs.posterior_threshold, method.kwargs.posterior_alpha",
    ),
    (
        ["method=block_verify", "+method.kwargs.weight=1"],
        r"^method.kwargs.weight is not a setting of method.criterion='block_verify'; allowed: none",
    ),
    (
        ["method=fly", "L=3", "backend=vllm", "backend.native_verify=true"],
        r"^method=fly is not supported by backend=vllm with backend.native_verify=true \(it has no lossy decoding",
    ),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_knob_fails_before_loading(overrides, message, no_model_loads):
    from runners.run import run

    with pytest.raises(ConfigError, match=message):
        run(compose(overrides), log=lambda *_: None)
    assert not (no_model_loads / "runs").exists(), "a run record was created"


def test_where_the_rules_run():
    from runners.backends.modes import LOSSY_RULES, modes_of, supported_modes
    from runners.config.validate import _method_files

    assert LOSSY_RULES == FIELD_RULES
    assert "lossy" in supported_modes({"name": "hf"})
    assert "lossy" in supported_modes({"name": "vllm"})  # through the hook, as DropMatch
    assert "lossy" not in supported_modes(
        {"name": "vllm", "native_verify": True}
    )  # vLLM's own sampler
    files = _method_files()
    for name in FIELD_RULES:
        assert modes_of({"method": files[name], "L": 3, "trace": False}) == ["lossy"]
        assert modes_of({"method": files[name], "L": 3, "trace": True}) == ["lossy", "trace"]
    assert modes_of({"method": files["sd"], "L": 3}) == ["sd"]  # SD stays SD
