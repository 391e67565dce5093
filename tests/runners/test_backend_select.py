"""``backend: auto`` (the default profile's engine): which backend it resolves to, and why, before anything loads."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

import runners.backends.select as select
import runners.config.validate as validate
from runners.config.errors import ConfigError
from runners.config.resolve import resolve_run_config
from runners.paths import REPO_ROOT
from runners.records.run_id import run_id_of


def _cfg(*overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return compose(config_name="run", overrides=list(overrides))


@pytest.fixture
def machine(monkeypatch):
    """``machine(bf16=..., llama_cpp=...)``: the CPU's native bf16 and whether llama-cpp-python is installed."""

    def set_(bf16: bool, llama_cpp: bool = True) -> None:
        monkeypatch.setattr("runners.models.dtype.cpu_has_fast_bf16", lambda flags=None: bf16)
        monkeypatch.setattr(select, "llama_cpp_installed", lambda: llama_cpp)
        # validation's own package check (backend=llamacpp needs llama_cpp), as on that machine: the tests run
        # where llama-cpp-python is not built too (a native-bf16 CPU skips the build)
        real = validate.installed
        monkeypatch.setattr(
            validate,
            "installed",
            lambda package: llama_cpp if package == "llama_cpp" else real(package),
        )

    return set_


def resolved(*overrides: str) -> dict:
    return resolve_run_config(_cfg(*overrides), identify_models=False)


def test_the_default_profile_asks_for_auto():
    assert _cfg().backend.name == "auto"
    assert _cfg("profile=smoke").backend.name == "hf"
    assert _cfg("profile=paper").backend.name == "vllm"
    assert _cfg("backend=hf").backend.name == "hf"


def test_native_bf16_resolves_to_exactly_backend_hf(machine):
    machine(bf16=True)
    auto = resolved("experiment=table6", "method=sd")
    explicit = resolved("experiment=table6", "method=sd", "backend=hf")
    assert auto["backend"] == explicit["backend"] == {
        "name": "hf", "version": 1, "prefix_caching": True, "batch_size": 10,
    }  # fmt: skip
    # same config, same run id: records made with backend=hf before auto existed are reused
    assert run_id_of(auto) == run_id_of(explicit)


def test_without_native_bf16_the_gguf_engine(machine):
    machine(bf16=False)
    c = resolved("experiment=table6", "method=dropmatch")
    assert c["backend"]["name"] == "llamacpp" and c["backend"]["batch_size"] == 10
    explicit = resolved("experiment=table6", "method=dropmatch", "backend=llamacpp")
    assert c["backend"] == explicit["backend"]
    assert run_id_of(c) != run_id_of(
        resolved("experiment=table6", "method=dropmatch", "backend=hf")
    )


@pytest.mark.parametrize(
    "overrides, reason",
    [
        ((), "llama-cpp-python is not installed"),
        (("method=autojudge", "method.threshold=0.3"), "no autojudge mode"),
        (("pair.dtype=float32",), "pair.dtype=float32 asks for transformers"),
        (("method=ar", "method.ar_model=draft"), "no draft_only mode"),
    ],
)
def test_falls_back_to_hf_with_the_reason(machine, overrides, reason):
    machine(bf16=False, llama_cpp=not overrides == ())
    c = _cfg(*overrides)
    name, why = select.choose(
        {**c, "L": 5, "method": dict(c.method), "pair": dict(c.pair), "dropmatch": {}}
    )
    assert name == "hf" and reason in why, why


def test_a_pair_without_gguf_stays_on_hf(machine, tiny_pair_dir):
    machine(bf16=False)
    target = {"name": "t", "local_path": str(tiny_pair_dir / "target"), "order": ["local"]}
    cfg = {"pair": {"device": "cpu", "dtype": "auto", "target": target}, "L": 0, "method": {}}
    name, why = select.choose(cfg)
    assert name == "hf" and "pair.target has no GGUF" in why


def test_a_setting_the_chosen_backend_lacks_names_the_field(machine):
    machine(bf16=True)
    with pytest.raises(ConfigError, match="backend.n_threads is not a setting of backend=hf"):
        resolved("+backend.n_threads=2")


def test_the_resolution_is_logged_once(machine):
    machine(bf16=False)
    cfg = {**resolved("method=sd", "backend=hf"), "backend": {"name": "auto", "batch_size": 1}}
    said = []
    select._SAID.clear()
    for _ in range(3):
        assert select.resolve_backend(cfg, log=said.append)["name"] == "llamacpp"
    assert len(said) == 1 and said[0].startswith(
        "[backend] auto -> llamacpp: the CPU has no native bf16"
    )


def test_gguf_runs_record_engine_and_precision(machine):
    from runners.models.identity import model_identity

    machine(bf16=False)
    c = resolved("method=sd", "backend=llamacpp")
    ident = model_identity(c["pair"], c["backend"])
    pinned = c["pair"]["target"]["pinned"]
    assert ident["target"]["engine"] == "llama.cpp"
    assert ident["target"]["sha256"] == pinned["sha256"]
    assert ident["target"]["dtype"] == f"gguf:{pinned['file_type']}"
    assert "engine" not in model_identity(c["pair"], {"name": "hf"})["target"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ("backend=hf", "+backend.n_ctx=4096"),
            "backend.n_ctx is not a setting of backend=hf; allowed:",
        ),
        (
            ("backend=llamacpp", "+backend.gpu_memory_utilization=0.5"),
            "backend.gpu_memory_utilization is not a setting of backend=llamacpp",
        ),
        (("L=abc",), "L='abc' is invalid; allowed: an integer >= 1"),
        (
            ("backend=llamacpp", "backend.n_ctx=-1"),
            "backend.n_ctx=-1 is invalid; allowed: an integer >= 1",
        ),
        (("backend=llamacpp", "backend.kept_prompts=-1"), "backend.kept_prompts=-1 is invalid"),
        (("backend=llamacpp", "backend.n_threads=0"), "backend.n_threads=0 is invalid"),
        (("backend=llamacpp", "backend.kv_unified=maybe"), "allowed: true or false"),
        (("backend=llamacpp", "backend.flash_attn=maybe"), "allowed: auto, on, off"),
    ],
)
def test_bad_backend_settings_and_L_name_the_field_under_any_backend(machine, overrides, message):
    """A setting of another engine given to an explicit backend is refused (it would be ignored by the engine yet
    change the run id), and a non-integer L is named as L even where backend=auto reads L to choose."""
    machine(bf16=False)
    with pytest.raises(ConfigError, match=message):
        resolved(*overrides)


def test_a_bad_thread_count_is_named_before_anything_loads(machine, monkeypatch):
    machine(bf16=False)
    monkeypatch.setenv("DROPMATCH_THREADS", "abc")
    with pytest.raises(
        ConfigError, match="DROPMATCH_THREADS=abc is invalid; allowed: an integer >= 1"
    ):
        resolved("method=sd")


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_thread_count_is_unset(machine, monkeypatch, value):
    """Before: ``DROPMATCH_THREADS=`` (set but empty) was refused ("DROPMATCH_THREADS= is invalid"). Empty means
    unset, as for the other variables: every core."""
    import os

    from runners.paths import cpu_threads, directory_env_errors

    machine(bf16=False)
    monkeypatch.setenv("DROPMATCH_THREADS", value)
    assert not [e for e in directory_env_errors() if "DROPMATCH_THREADS" in e]
    resolved("method=sd")  # no ConfigError
    assert cpu_threads() == (os.cpu_count() or 1)
    monkeypatch.setenv("DROPMATCH_THREADS", "3")
    assert cpu_threads() == 3


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "+calibration_n=5",
            "calibration_n is not a config key",
        ),  # the judging step's, not a run's
        ("+judge.max_tokens=5", "judge is not a config key"),
        ("+profile.limit.gsm8kk=5", "profile.limit.gsm8kk names no dataset; allowed: alpaca"),
        ("+profile.max_new_tokens.humanevl=64", "profile.max_new_tokens.humanevl names no dataset"),
    ],
)
def test_keys_a_run_would_not_read_are_refused(machine, override, message):
    """Keys that would change the run id while nothing reads them: the judging step's settings in a decode run,
    and a profile's per-dataset n or cap under a name no dataset has (the run would silently use the default)."""
    machine(bf16=False)
    with pytest.raises(ConfigError, match=message):
        resolved(override)
