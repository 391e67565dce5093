"""Console entry point ``dropmatch`` (``pyproject.toml`` ``[project.scripts]``): one front door to the entry points.

    dropmatch run [hydra overrides]           one run             (python -m runners.main ...)
    dropmatch sweep [hydra overrides]         a Hydra multirun    (python -m runners.main --multirun ...)
    dropmatch render <artefact> [args]        rebuild a table/figure from the records (python -m analysis.render ...)
    dropmatch rescore <run|dir|artefact> ...  rescore stored outputs (python -m runners.rescore ...)

Exit code 2 for an unknown command or artefact (nothing is loaded).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from analysis.render import main as render_main
from runners.rescore import main as rescore_main
from runners.sweep.console import terminal

logger = logging.getLogger(__name__)
COMMANDS = ("run", "sweep", "render", "rescore")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        terminal(f"{__name__}.usage").info(__doc__)
        return 0 if args and args[0] in ("-h", "--help") else 2
    cmd, rest = args[0], args[1:]
    if cmd in ("run", "sweep"):
        import runpy

        # exactly `python -m runners.main ...` (Hydra finds conf/ relative to that file when it is __main__)
        sys.argv = ["dropmatch", *(["--multirun"] if cmd == "sweep" else []), *rest]
        runpy.run_module("runners.main", run_name="__main__", alter_sys=True)
        return 0
    if cmd == "rescore":
        return rescore_main(rest)
    if not rest:
        terminal(f"{__name__}.usage").info("usage: dropmatch render <artefact> [--profile P]")
        return 2

    return render_main(rest)


if __name__ == "__main__":
    sys.exit(main())
