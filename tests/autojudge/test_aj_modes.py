"""Auto-Judge's decoding mode: the HF loop declares it, vLLM does not (its verify step has no draft hidden
states), so validation refuses AJ methods on backend=vllm before anything loads, naming the field."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from runners.backends.modes import modes_of, supported_modes
from runners.config.errors import ConfigError
from runners.config.resolve import resolve_run_config
from runners.paths import REPO_ROOT


def test_modes_declared():
    assert "autojudge" in supported_modes({"name": "hf"})
    assert "autojudge" not in supported_modes({"name": "vllm"})
    assert modes_of({"method": {"criterion": "autojudge"}, "L": 4}) == ["autojudge"]
    assert modes_of(
        {"method": {"criterion": "autojudge_dropmatch", "uses_dropmatch": True}, "L": 4}
    ) == ["dropmatch", "autojudge"]


@pytest.mark.parametrize("method", ["autojudge", "autojudge_dropmatch"])
def test_vllm_refuses_autojudge(method):
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="run",
            overrides=[f"method={method}", "backend=vllm", "pair=tiny", "profile=smoke"],
        )
    with pytest.raises(
        ConfigError, match=f"method={method} is not supported by backend=vllm .*autojudge"
    ):
        resolve_run_config(cfg, identify_models=False)
