"""dropmatch.sparse_top_n: validated before anything loads, carried into the run's HeadSpec."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from runners.config.decode_spec import head_spec
from runners.config.errors import ConfigError
from runners.config.resolve import resolve_run_config
from runners.paths import REPO_ROOT


def _cfg(*overrides):
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return compose(
            config_name="run", overrides=["profile=smoke", "method=dropmatch", "L=5", *overrides]
        )


def test_default_is_exact():
    assert head_spec(resolve_run_config(_cfg())).top_n is None


def test_value_reaches_the_head_spec():
    spec = head_spec(resolve_run_config(_cfg("dropmatch.sparse_top_n=64")))
    assert (spec.K, spec.p_drop, spec.top_n) == (5, 0.3, 64)


@pytest.mark.parametrize("bad", ["0", "-1", "2.5", "true"])
def test_bad_values_are_config_errors(bad):
    with pytest.raises(ConfigError, match="dropmatch.sparse_top_n"):
        resolve_run_config(_cfg(f"dropmatch.sparse_top_n={bad}"))


def test_check_reaches_the_head_spec_with_trace():
    spec = head_spec(resolve_run_config(_cfg("+dropmatch.sparse_check_top_n=64", "trace=true")))
    assert (spec.top_n, spec.check_top_n) == (None, 64)


@pytest.mark.parametrize(
    "extra, match",
    [
        ((), "trace=true"),
        (("trace=true", "dropmatch.sparse_top_n=8"), "sparse_top_n=null"),
        (("trace=true",), None),
    ],
)
def test_check_needs_trace_and_the_exact_rule(extra, match):
    bad = "0" if match is None else "64"
    with pytest.raises(ConfigError, match=match or "dropmatch.sparse_check_top_n"):
        resolve_run_config(_cfg(f"+dropmatch.sparse_check_top_n={bad}", *extra))


def test_table3_resolves_to_the_runs_of_table2():
    """conf/experiment/table3.yaml must name exactly Table 2's runs (it renders their traces, loading nothing)."""
    from runners.records.run_id import run_id_of

    def rid(exp):
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            cfg = compose(
                config_name="run",
                overrides=[f"experiment={exp}", "dataset=humaneval", "method=dropmatch"],
            )
        return run_id_of(resolve_run_config(cfg, identify_models=False))

    assert rid("table2") == rid("table3")


@pytest.mark.parametrize(
    "first, second, swept",
    [("fig3", "fig3_measure", "dataset=spec_bench"), ("table2", "table3", "dataset=humaneval")],
)
def test_paired_experiments_share_the_settings_their_run_ids_hash(first, second, swept):
    """A second step that finds the first step's runs by run id (fig3_measure reads fig3's decodes) must resolve
    the same pair, backend (batch size), dataset and caps (seen: fig3_measure without fig3's batch size)."""
    from omegaconf import OmegaConf

    def blocks(exp):
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            cfg = OmegaConf.to_container(
                compose(config_name="run", overrides=[f"experiment={exp}", swept]), resolve=True
            )
        return {k: cfg[k] for k in ("pair", "backend", "dataset", "decoding", "profile")}

    assert blocks(first) == blocks(second)


def _dropmatch_block(*overrides):
    """The composed ``dropmatch`` block (interpolations resolved), without validation (which needs a GPU for
    profile=paper and the vllm package for backend=vllm)."""
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="run", overrides=["method=dropmatch", *overrides])
    return OmegaConf.to_container(cfg, resolve=True)["dropmatch"]


def test_default_profile_decides_sparse_and_audits_in_the_hf_loop():
    spec = head_spec(resolve_run_config(_cfg("profile=default")))
    assert (spec.top_n, spec.audit_share) == (64, 0.05)


@pytest.mark.parametrize(
    "overrides",
    [
        ("profile=paper",),
        ("profile=default", "backend=vllm"),
        ("profile=smoke",),
        ("profile=full",),
    ],
)
def test_paper_and_vllm_stay_exact(overrides):
    dm = _dropmatch_block(*overrides)
    assert dm["sparse_top_n"] is None and not dm["audit_share"]


def test_exact_runs_keep_their_run_ids():
    """The audit share is dropped where nothing is audited: an exact run's config (and id) is that of a run
    made before the field existed, whatever audit_share says."""
    from runners.records.run_id import run_id_of

    exact = resolve_run_config(_cfg("profile=default", "dropmatch.sparse_top_n=null"))
    assert "audit_share" not in exact["dropmatch"]
    assert run_id_of(exact) == run_id_of(
        resolve_run_config(
            _cfg("profile=default", "dropmatch.sparse_top_n=null", "dropmatch.audit_share=0.5")
        )
    )
    unaudited = resolve_run_config(_cfg("dropmatch.sparse_top_n=64", "dropmatch.audit_share=0"))
    assert "audit_share" not in unaudited["dropmatch"]


@pytest.mark.parametrize(
    "overrides, match",
    [
        (("dropmatch.sparse_top_n=64", "dropmatch.audit_share=1.5"), "dropmatch.audit_share=1.5"),
        (("dropmatch.sparse_top_n=64", "dropmatch.audit_share=-1"), "dropmatch.audit_share=-1"),
        (
            ("backend=vllm", "dropmatch.sparse_top_n=64", "dropmatch.audit_share=0.05"),
            "audit_share=0.05 audits the sparse variant in the HF or llama.cpp loop, but backend=vllm",
        ),
    ],
)
def test_bad_audit_settings_are_config_errors(overrides, match):
    with pytest.raises(ConfigError, match=match):
        resolve_run_config(_cfg(*overrides))


def test_sparse_escape_reaches_the_head_spec_and_keeps_other_run_ids():
    """dropmatch.sparse_escape=true reaches the HeadSpec and makes another run; false is the config (and run id)
    of a run made before the field existed; so is true where it changes nothing (an exact run, the naive rule)."""
    from runners.records.run_id import run_id_of

    plain = resolve_run_config(_cfg("dropmatch.sparse_top_n=64"))
    assert "sparse_escape" not in plain["dropmatch"] and not head_spec(plain).escape
    escaped = resolve_run_config(_cfg("dropmatch.sparse_top_n=64", "dropmatch.sparse_escape=true"))
    assert head_spec(escaped).escape and head_spec(escaped).top_n == 64
    assert run_id_of(escaped) != run_id_of(plain)
    for moot, base in (
        (("dropmatch.sparse_top_n=null", "dropmatch.sparse_escape=true"), ()),
        (
            ("method=dropmatch_naive", "dropmatch.sparse_top_n=64", "dropmatch.sparse_escape=true"),
            ("method=dropmatch_naive", "dropmatch.sparse_top_n=64"),
        ),
    ):
        got, want = resolve_run_config(_cfg(*moot)), resolve_run_config(_cfg(*base))
        assert "sparse_escape" not in got["dropmatch"] and not head_spec(got).escape
        assert run_id_of(got) == run_id_of(want)


def test_default_profile_escapes_its_sparse_runs():
    """The default profile's CPU decision is the sparse variant with the sampled tail (the escape); the paper
    profile's vLLM runs stay exact."""
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        composed = compose(
            config_name="run", overrides=["profile=default", "method=dropmatch", "backend=hf"]
        )
    cfg = resolve_run_config(composed, identify_models=False)
    assert head_spec(cfg).top_n == 64 and head_spec(cfg).escape


def test_bad_escape_settings_are_config_errors():
    with pytest.raises(ConfigError, match="dropmatch.sparse_escape=2"):
        resolve_run_config(_cfg("dropmatch.sparse_top_n=64", "dropmatch.sparse_escape=2"))


def test_escape_is_kept_where_a_rule_computes_eq6():
    """The escape changes Eq. (6) only: kept for the JS rules and bench's DropMatch arm, not for the naive rule."""
    from runners.config.resolve import _reads_js

    assert _reads_js({"uses_dropmatch": True, "criterion": "dropmatch_js"})
    assert _reads_js({"uses_dropmatch": True, "criterion": "autojudge_dropmatch"})
    assert not _reads_js({"uses_dropmatch": True, "criterion": "dropmatch_naive"})
    assert _reads_js({"measure": "bench", "criterion": "rejection", "dm_criterion": "dropmatch_js"})
    assert not _reads_js({"criterion": "rejection"})


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("dropmatch.sparse_top_n=64",),
        ("dropmatch.sparse_top_n=64", "dropmatch.sparse_escape=true", "dropmatch.audit_share=0.05"),
        ("+dropmatch.sparse_check_top_n=64", "trace=true"),
        ("method=sd",),
    ],
)
def test_head_spec_reaches_the_vllm_worker_whole(overrides):
    """The vLLM backend hands its worker the run's HeadSpec as a dict, and the worker builds it again with
    ``HeadSpec(**heads)``: the same spec must come out (the config names ``HeadSpec.as_dict`` writes, e.g.
    ``sparse_top_n``, once reached the worker: TypeError for every sparse run)."""
    from criteria.dropout_heads import HeadSpec
    from runners.backends.vllm_engine import worker_heads

    spec = head_spec(resolve_run_config(_cfg(*overrides)))
    assert HeadSpec(**worker_heads(spec)) == spec
