"""The one ``*.gguf`` file of a ``local_path`` is found by one function (runners.models.sources.local_gguf) that
the engine's file, the precision label and the backend choice all agree with."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runners.backends.select import has_gguf
from runners.models.identity import gguf_precision
from runners.models.sources import ModelUnavailableError, gguf_file, local_gguf
from runners.paths import REPO_ROOT

# Fingerprinted decision code keeps its own copy (runners/backends/select.py has_gguf), checked here to agree.
EXEMPT = {"runners/backends/select.py"}


def write_gguf(path: Path, file_type: int) -> Path:
    """A GGUF file holding only its header (``general.file_type``) and one tiny tensor."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_file_type(file_type)
    w.add_tensor("t", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def spec(d: Path) -> dict:
    return {"name": "m", "local_path": str(d), "order": ["local"]}


@pytest.mark.parametrize("n", [0, 1, 2])
def test_every_caller_agrees_on_the_one_gguf(tmp_path, n):
    for i in range(n):
        write_gguf(tmp_path / f"m{i}.gguf", 15)  # 15: Q4_K_M
    (tmp_path / "notes.txt").write_text("not a gguf")
    if n == 1:
        assert local_gguf(tmp_path) == gguf_file(spec(tmp_path)) == tmp_path / "m0.gguf"
        assert gguf_precision(spec(tmp_path)) == "gguf:Q4_K_M"
        assert has_gguf(spec(tmp_path))
        return
    for find in (lambda: local_gguf(tmp_path), lambda: gguf_file(spec(tmp_path))):
        with pytest.raises(ModelUnavailableError, match=rf"holds {n} \*\.gguf files; .*backend=hf"):
            find()
    assert gguf_precision(spec(tmp_path)) == "gguf"
    assert not has_gguf(spec(tmp_path))


def test_no_other_copy_of_the_gguf_lookup():
    """Before: runners/models/identity.py and sources.py each globbed ``*.gguf`` themselves."""
    copies = []
    for path in sorted(
        [*(REPO_ROOT / "runners").rglob("*.py"), *(REPO_ROOT / "tests").rglob("*.py")]
    ):
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel in EXEMPT or path.name == Path(__file__).name:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"""glob\(\s*["']\*\.gguf["']""", line):
                copies.append(f"{rel}:{i}")
    assert [c.split(":")[0] for c in copies] == ["runners/models/sources.py"], copies
