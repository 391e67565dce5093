"""``profile=smoke`` is seconds-long for every dataset: each ``conf/dataset/*.yaml`` has an item limit and a
token cap there (a dataset without one would decode its whole set at its own cap)."""

from __future__ import annotations

import yaml

from runners.paths import REPO_ROOT


def test_smoke_caps_every_dataset():
    smoke = yaml.safe_load((REPO_ROOT / "conf" / "profile" / "smoke.yaml").read_text())
    names = sorted(p.stem for p in (REPO_ROOT / "conf" / "dataset").glob("*.yaml"))
    assert names, "no conf/dataset/*.yaml"
    for key, most in (("limit", 2), ("max_new_tokens", 16)):
        missing = [n for n in names if n not in smoke[key]]
        assert not missing, f"profile=smoke has no {key} for {missing}"
        assert all(1 <= int(smoke[key][n]) <= most for n in names), smoke[key]
