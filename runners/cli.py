"""Console entry point ``dropmatch`` (``pyproject.toml`` ``[project.scripts]``): one front door to the entry points.

    dropmatch run [hydra overrides]           one run             (python -m runners.main ...)
    dropmatch sweep [hydra overrides]         a Hydra multirun    (python -m runners.main --multirun ...)
    dropmatch render <artefact> [args]        rebuild a table/figure from the records (analysis.tables|figures.<artefact>)
    dropmatch rescore <run|dir|artefact> ...  rescore stored outputs (python -m runners.rescore ...)

Exit code 2 for an unknown command or artefact (nothing is loaded).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from typing import Sequence

logger = logging.getLogger(__name__)
COMMANDS = ("run", "sweep", "render", "rescore")


def artefact_module(name: str) -> str | None:
    """``analysis.tables.<name>`` or ``analysis.figures.<name>`` if it exists."""
    for pkg in ("analysis.tables", "analysis.figures"):
        if importlib.util.find_spec(f"{pkg}.{name}") is not None:
            return f"{pkg}.{name}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    cmd, rest = args[0], args[1:]
    if cmd in ("run", "sweep"):
        import runpy

        # exactly `python -m runners.main ...` (Hydra finds conf/ relative to that file when it is __main__)
        sys.argv = ["dropmatch", *(["--multirun"] if cmd == "sweep" else []), *rest]
        runpy.run_module("runners.main", run_name="__main__", alter_sys=True)
        return 0
    if cmd == "rescore":
        from runners.rescore import main as rescore_main

        return rescore_main(rest)
    if not rest:
        print("usage: dropmatch render <artefact> [args]", file=sys.stderr)
        return 2
    mod = artefact_module(rest[0])
    if mod is None:
        print(f"unknown artefact {rest[0]!r}: no analysis/tables/{rest[0]}.py or analysis/figures/{rest[0]}.py",
              file=sys.stderr)
        return 2
    module = importlib.import_module(mod)
    out = module.main(rest[1:])
    return out if isinstance(out, int) else 0


if __name__ == "__main__":
    sys.exit(main())
