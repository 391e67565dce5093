"""Which weights a run uses: the resolved source of each model, its content identity and the dtype.

``model_identity(pair_cfg)`` is computed before anything loads (cheap: no download, no preparation) from the
source :func:`runners.models.sources.pick_source` says will be used, the same function
``resolve_model_dir`` follows, so the recorded identity is the one loaded:

- ``pinned``: ``{"source": "pinned", "kind": ..., "sha256": <sha256 of the joined GGUF>}`` (the embedded pair:
  GGUF files dequantised to safetensors, see ``sources.py``);
- ``built``: ``{"source": "built", "builder": "module:function", "seed": ...}`` (e.g. the random EAGLE-3 head);
- ``hub``: ``{"source": "hub", "hub_id": ..., "revision": <commit sha>}``; the revision is ``spec.revision``
  when it is a full commit sha, else asked from the hub (``HfApi.model_info``, one request per model and
  process), else the ref name with ``"resolved": False``;
- ``local``: a directory prepared from a pinned source (its ``.complete`` marker holds the sha256) has that
  pinned identity; a Hugging Face cache snapshot (``.../models--org--name/snapshots/<commit>``) the hub identity
  of that commit; any other directory ``{"source": "local", "weights_sha256": ...}``, the sha256 over the
  names and contents of its weight files (``*.safetensors``, ``*.bin``, ``*.pt``, ``*.pth``, ``*.gguf``),
  computed once per file version (path, size, mtime) and cached in ``<cache>/weights_sha256.json``;
- no usable source: ``{"source": "unavailable", "reason": ...}`` (the run fails before writing a record).

Every entry also holds ``dtype``: :func:`runners.models.dtype.resolve_dtype`'s value (``auto``: bf16 where the
hardware has fast bf16), the dtype the weights are loaded in. A backend that runs the GGUF file itself
(:data:`GGUF_ENGINES`: llama.cpp) computes in the file's own types instead: its entries name the ``engine`` and hold
``dtype: gguf:<file type>`` (e.g. ``gguf:Q4_K_M``: the pinned source's declared ``file_type``, which the engine
checks against the file's header when it loads it; a local ``*.gguf``'s header), and the sha256 is the GGUF's.
The run id hashes the part of this identity that the config does not already fix
(:func:`runners.records.run_id.identity_of`), and the record keeps all of it (``config.json``, ``meta.json``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from runners.models.dtype import resolve_dtype
from runners.models.sources import (
    COMPLETE_MARKER,
    ModelUnavailableError,
    local_gguf,
    pick_source,
)
from runners.paths import REPO_ROOT, cache_dir
from runners.records.io import atomic_write_json, sha256_file

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_MEMO: dict[Any, dict] = {}


# Backends that run GGUF files at their own precision -> the engine name their identities record.
GGUF_ENGINES = {"llamacpp": "llama.cpp"}


def model_identity(
    pair_cfg: Mapping[str, Any], backend_cfg: Mapping[str, Any] | None = None
) -> dict:
    """``{"target": {...}, "draft": {...}}``: each model's source identity plus ``dtype`` (module docstring).

    Args:
        pair_cfg: the ``pair`` config.
        backend_cfg: the resolved ``backend`` config; a GGUF engine's runs record ``engine`` and the GGUF's
            precision instead of a torch dtype.
    """
    engine = GGUF_ENGINES.get(str((backend_cfg or {}).get("name")))
    dtype = None if engine else resolve_dtype(pair_cfg)
    out = {}
    for role in ("target", "draft"):
        spec = pair_cfg.get(role)
        if isinstance(spec, Mapping):
            ident = source_identity(spec)
            if engine:
                out[role] = {**ident, "engine": engine, "dtype": gguf_precision(spec)}
            else:
                out[role] = {**ident, "dtype": dtype}
    return out


def gguf_precision(spec: Mapping[str, Any]) -> str:
    """``gguf:<file type>`` of a model's GGUF, read without preparing anything: the pinned source's declared
    ``file_type`` (``gguf`` alone when it declares none), or the header of the one ``*.gguf`` in ``local_path``."""
    try:
        source, where = pick_source(spec)
    except ModelUnavailableError:
        return "gguf"
    if source == "pinned":
        declared = (spec.get("pinned") or {}).get("file_type")
        return f"gguf:{declared}" if declared else "gguf"
    if source != "local":
        return "gguf"
    try:
        return f"gguf:{gguf_file_type(local_gguf(str(where)))}"
    except ModelUnavailableError:  # none or several: the engine refuses it when it loads
        return "gguf"


def gguf_file_type(path: Path) -> str:
    """The ``general.file_type`` of a GGUF file's header as llama.cpp names it (``Q4_K_M``, ``F32``, ...)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    field = reader.get_field("general.file_type")
    if field is None:
        return "unknown"
    return file_type_name(int(field.contents()))


def file_type_name(ftype: int) -> str:
    """``general.file_type`` as a short name: ``15`` -> ``Q4_K_M`` (``gguf.LlamaFileType`` without ``MOSTLY_``)."""
    import gguf

    try:
        name = gguf.LlamaFileType(ftype).name
    except ValueError:
        return f"ftype{ftype}"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def source_identity(spec: Mapping[str, Any]) -> dict:
    """The identity of the weights :func:`pick_source` picks for one model spec (no dtype)."""
    try:
        source, where = pick_source(spec)
    except ModelUnavailableError as e:
        return {"source": "unavailable", "reason": str(e).split(". Provide it by")[0]}
    if source == "pinned":
        pinned = spec["pinned"]
        return {"source": "pinned", "kind": pinned.get("kind"), "sha256": str(pinned["sha256"])}
    if source == "built":
        built = spec["built"]
        return {"source": "built", "builder": str(built.get("builder")), "seed": built.get("seed")}
    if source == "hub":
        return hub_identity(str(where), spec.get("revision"))
    try:
        return local_identity(Path(str(where)))
    except ValueError as e:  # a directory without weights: loading it would fail too
        return {"source": "unavailable", "reason": str(e)}


def hub_identity(hub_id: str, revision: Any = None) -> dict:
    """``{"source": "hub", "hub_id", "revision"}`` with the commit sha of ``revision`` (default ``main``)."""
    rev = str(revision) if revision else "main"
    if _COMMIT.match(rev):
        return {"source": "hub", "hub_id": hub_id, "revision": rev}
    key = ("hub", hub_id, rev)
    if key not in _MEMO:
        try:
            from huggingface_hub import HfApi

            sha = HfApi().model_info(hub_id, revision=rev, timeout=20).sha
            _MEMO[key] = {"source": "hub", "hub_id": hub_id, "revision": str(sha)}
        except Exception:  # noqa: BLE001  (no network, gated repo ...): the ref, marked unresolved
            _MEMO[key] = {"source": "hub", "hub_id": hub_id, "revision": rev, "resolved": False}
    return dict(_MEMO[key])


def hub_revision(spec: Mapping[str, Any]) -> str | None:
    """The commit a hub-sourced model must be loaded at (the one its identity names), else None."""
    try:
        source, where = pick_source(spec)
    except ModelUnavailableError:
        return None
    if source != "hub":
        return None
    ident = hub_identity(str(where), spec.get("revision"))
    return (
        str(ident["revision"])
        if ident.get("resolved", True)
        else (str(spec["revision"]) if spec.get("revision") else None)
    )


def local_identity(path: Path) -> dict:
    """The identity of a local model directory (module docstring, ``local``)."""
    marker = path / COMPLETE_MARKER
    if marker.is_file():  # a pinned source prepared by runners.models.sources.prepare_pinned
        sha = marker.read_text().split()[0] if marker.read_text().strip() else ""
        if re.match(r"^[0-9a-f]{64}$", sha):
            return {"source": "pinned", "kind": "pip_chunk_gguf", "sha256": sha}
    resolved = path.resolve()
    if (
        resolved.parent.name == "snapshots"
        and _COMMIT.match(resolved.name)
        and resolved.parent.parent.name.startswith("models--")
    ):
        hub_id = resolved.parent.parent.name[len("models--") :].replace("--", "/")
        return {"source": "hub", "hub_id": hub_id, "revision": resolved.name}
    return {"source": "local", "weights_sha256": weights_sha256(resolved)}


def weights_sha256(path: Path) -> str:
    """sha256 over ``name\\0<file sha256>\\n`` of every weight file under ``path`` (sorted by relative name).

    Raises:
        ValueError: the directory holds no weight file.
    """
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    if not files:
        raise ValueError(f"{path} holds no weight file ({', '.join(WEIGHT_SUFFIXES)})")
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(path).as_posix()}\0{_file_sha256(f)}\n".encode())
    return h.hexdigest()


def _file_sha256(path: Path) -> str:
    """sha256 of one file, cached by (path, size, mtime_ns) in memory and in ``<cache>/weights_sha256.json``."""

    st = path.stat()
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    if key in _MEMO:
        return _MEMO[key]
    store = cache_dir() / "weights_sha256.json"
    try:
        known = json.loads(store.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        digest = sha256_file(path)
        try:  # re-read: another process may have added entries meanwhile
            known = json.loads(store.read_text())
        except (OSError, ValueError):
            known = {}
        known = {
            k: v for k, v in known.items() if _current(k)
        }  # forget files that changed or are gone
        known[key] = digest
        try:
            store.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(store, known)
        except OSError:  # a read-only cache still gets the right identity, just not remembered
            pass
    _MEMO[key] = known[key]
    return known[key]


def _current(key: str) -> bool:
    """True if the file of a cache key ``path|size|mtime_ns`` still exists unchanged."""
    path, size, mtime = key.rsplit("|", 2)
    try:
        st = Path(path).stat()
    except OSError:
        return False
    return str(st.st_size) == size and str(st.st_mtime_ns) == mtime


def check_available(identity: Mapping[str, Any], roles: list[str]) -> None:
    """Refuse a run whose models (``roles`` of a resolved ``model_identity``) have no usable source, before a
    record is made under the id of weights that cannot be loaded.

    Raises:
        ModelUnavailableError: ``pair.<role>: <why>``.
    """
    for role in roles:
        ident = identity.get(role) or {}
        if ident.get("source") == "unavailable":
            raise ModelUnavailableError(f"pair.{role}: {ident.get('reason')}")


PUBLISHED = {
    "pinned": "pinned",
    "hub": "hub_id",
    "built": "built",
}  # source -> the spec key that defines it


def own_weights_label(spec: Mapping[str, Any]) -> str | None:
    """The label of weights a user's ``local_path`` puts in place of a model its pair names by a published
    source (pinned, hub or built), else None.

    None when the spec has no published source (a local-only pair such as ``tiny``, or a user's own pair file:
    its names are the user's), when the local directory is that same model (a prepared copy of the pinned
    source, or a hub cache snapshot of the same ``hub_id``), or when no source is usable. Otherwise
    ``local:<directory name>``, or the other model's hub id for a hub cache snapshot of another model.
    """
    order = list(spec.get("order") or ["local", "hub", "pinned"])
    if not any(spec.get(PUBLISHED[o]) for o in order if o in PUBLISHED):
        return None
    try:
        source, where = pick_source(spec)
    except ModelUnavailableError:
        return None
    if source != "local":
        return None
    path = Path(str(where)).resolve()
    marker = path / COMPLETE_MARKER
    pinned = spec.get("pinned") if isinstance(spec.get("pinned"), Mapping) else {}
    if (
        marker.is_file()
        and pinned
        and marker.read_text().split()[:1] == [str(pinned.get("sha256"))]
    ):
        return None
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        hub_id = path.parent.parent.name[len("models--") :].replace("--", "/")
        return None if hub_id == spec.get("hub_id") else hub_id
    return f"local:{path.name}"


@functools.cache
def builtin_pairs() -> dict[str, dict]:
    """``{name: conf/pair/<file>.yaml}`` of the pairs the project ships (their labels, uninterpolated)."""
    out = {}
    for f in sorted((REPO_ROOT / "conf" / "pair").glob("*.yaml")):
        spec = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        out[str(spec.get("name", f.stem))] = spec
    return out


def label_own_weights(pair_cfg: Mapping[str, Any]) -> dict:
    """``pair_cfg`` with labels that name the weights that run: a model whose ``local_path`` replaces the
    published weights its built-in pair names (:func:`own_weights_label`) is called by that label instead of the
    built-in model's name, and the pair, if it still has its built-in name, ``<draft>_<target>`` of the models'
    short labels (the last part of a hub id). Names the user set (different from the built-in pair's) are kept.

    Returns a new dict (``pair_cfg`` is not changed); the same dict's content when nothing is relabelled.
    """
    pair = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in pair_cfg.items()}
    builtin = builtin_pairs().get(str(pair.get("name")))
    if builtin is None:  # a pair the user named: its labels are the user's
        return pair
    changed = False
    for role in ("target", "draft"):
        spec = pair.get(role)
        label = own_weights_label(spec) if isinstance(spec, Mapping) else None
        if label and spec.get("name") == (builtin.get(role) or {}).get("name"):
            spec["name"] = label
            changed = True
    if changed:
        short = {
            r: str((pair.get(r) or {}).get("name", "-")).rsplit("/", 1)[-1]
            for r in ("draft", "target")
        }
        pair["name"] = f"{short['draft']}_{short['target']}"
    return pair


def check_sources(pair_cfg: Mapping[str, Any], roles: list[str]) -> None:
    """Refuse a config whose models (``roles``) have no usable source, without preparing, hashing or downloading
    anything (:func:`pick_source` only): the check a sweep or a single run makes before Hydra writes anything.

    Raises:
        ModelUnavailableError: ``pair.<role>: <why>`` (e.g. a ``local_path`` that does not exist).
    """
    for role in roles:
        spec = pair_cfg.get(role)
        if isinstance(spec, Mapping):
            try:
                pick_source(spec)
            except ModelUnavailableError as e:
                hint = pair_cfg.get("setup_hint")
                raise ModelUnavailableError(
                    f"pair.{role}: {e}" + (f"; pair={pair_cfg.get('name')}: {hint}" if hint else "")
                ) from None


def clear_memo() -> None:
    """Forget the in-process memo (tests; a hub revision asked again)."""
    _MEMO.clear()
