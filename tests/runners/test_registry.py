from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import criteria.rules  # noqa: F401
import runners.backends  # noqa: F401
import runners.datasets  # noqa: F401
import runners.scorers  # noqa: F401
from criteria.registry import Registry, UnknownNameError
from runners.backends.select import AUTO
from runners.registry import BACKENDS, CRITERIA, DATASETS, SCORERS

CONF = Path(__file__).resolve().parents[2] / "conf"


def test_collision_and_suggestions():
    r = Registry("thing")
    r.register("alpha")(object)
    with pytest.raises(ValueError, match="already registered"):
        r.register("alpha")(int)
    with pytest.raises(UnknownNameError, match="did you mean alpha"):
        r.get("alpah")


@pytest.mark.parametrize("group,registry", [("backend", BACKENDS), ("dataset", DATASETS)])
def test_yaml_stems_match_registry_keys(group, registry):
    for f in (CONF / group).glob("*.yaml"):
        name = yaml.safe_load(f.read_text())["name"]
        assert name == f.stem, f
        # backend=auto is resolved to one of the registered backends before anything is built
        assert name in registry or (group, name) == ("backend", AUTO), f


def test_methods_name_known_criteria():
    for f in (CONF / "method").glob("*.yaml"):
        m = yaml.safe_load(f.read_text())
        assert m["name"] == f.stem
        assert m["criterion"] is None or m["criterion"] in CRITERIA


def test_dataset_scorers_registered():
    for f in (CONF / "dataset").glob("*.yaml"):
        assert yaml.safe_load(f.read_text())["scorer"] in SCORERS, f
