"""Logging of the entry points: what a user sees on the terminal, what Hydra's job log keeps, one verbosity switch.

Every module logs with ``logging.getLogger(__name__)``; functions that report progress take ``log=`` callables
defaulting to their logger's ``.info``. Where the records go:

- terminal: INFO and below on stdout as plain text (progress lines, tables), WARNING and above on stderr with
  their level and logger name (:class:`Console`, :class:`UpTo`);
- ``python -m runners.main``: Hydra configures logging per job from ``conf/hydra/job_logging/dropmatch.yaml``:
  the same two console handlers plus ``<run dir>/<job name>.log`` (``main.log``; time, logger, level, message);
- other command lines (``python -m analysis.render``, ``python -m runners.rescore``): :func:`console`.

Verbosity: ``DROPMATCH_LOG_LEVEL`` = DEBUG | INFO | WARNING | ERROR (default INFO) for both; with Hydra also
``hydra.verbose=true`` (DEBUG everywhere) or ``hydra.verbose=[runners.run]`` (DEBUG for those loggers).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

LEVEL_ENV = "DROPMATCH_LOG_LEVEL"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
ERR_FORMAT = "%(levelname)s [%(name)s] %(message)s"
OURS = ("runners", "analysis", "criteria", "__main__")  # __main__: a module run with python -m


def level() -> str:
    """The level named by ``DROPMATCH_LOG_LEVEL`` (default INFO).

    Raises:
        ValueError: a value outside :data:`LEVELS` (the message names the variable and the allowed values).
    """
    v = os.environ.get(LEVEL_ENV, "INFO").strip().upper() or "INFO"
    if v not in LEVELS:
        raise ValueError(
            f"{LEVEL_ENV}={os.environ.get(LEVEL_ENV)!r} is invalid; allowed: {', '.join(LEVELS)}"
        )
    return v


class UpTo(logging.Filter):
    """Passes records at or below ``level`` (``"INFO"``: DEBUG and INFO), for the stdout handler."""

    def __init__(self, level: str | int = "INFO") -> None:
        super().__init__()
        self.max = logging.getLevelName(level) if isinstance(level, str) else int(level)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno <= self.max


class Console(logging.StreamHandler):
    """A handler writing to the *current* ``sys.stdout`` (``err=False``) or ``sys.stderr`` at each record, so a
    replaced stream (pytest's capture, a redirect) is honoured and never written after it was closed."""

    def __init__(self, err: bool = False) -> None:
        self.err = bool(err)
        super().__init__()

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stderr if self.err else sys.stdout

    @stream.setter
    def stream(
        self, _value: Any
    ) -> None:  # StreamHandler.__init__ / setStream: the stream is looked up per record
        pass


def console_handlers() -> list[logging.Handler]:
    """stdout (INFO and below, plain message) and stderr (WARNING and above, with level and logger)."""
    out, err = Console(err=False), Console(err=True)
    out.addFilter(UpTo("INFO"))
    out.setFormatter(logging.Formatter("%(message)s"))
    err.setLevel(logging.WARNING)
    err.setFormatter(logging.Formatter(ERR_FORMAT))
    return [out, err]


@contextlib.contextmanager
def to_stderr(*names: str) -> Iterator[None]:
    """While active, the records of loggers ``names`` (a library's progress lines, e.g. lm-eval's "Building
    contexts ...") and everything written to stdout (the library's prints) go to the terminal's stderr, so a
    command's stdout holds only its own lines (pipeable): wrap only the library's calls. INFO and below as plain
    lines, WARNING and above with level and logger as usual; the root's other handlers (a job's log file) still
    get those records."""
    root = logging.getLogger()
    kept = [h for h in root.handlers if not isinstance(h, Console)]
    out, err = console_handlers()
    out.err = True
    saved = []
    for name in names:
        lg = logging.getLogger(name)
        saved.append((lg, lg.propagate, list(lg.handlers)))
        lg.propagate = False
        for h in (out, err, *kept):
            lg.addHandler(h)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for lg, propagate, handlers in saved:
            lg.propagate = propagate
            lg.handlers[:] = handlers


def console(level_name: str | None = None, logger: logging.Logger | None = None) -> None:
    """Send ``logger``'s records (default: the root's) to the terminal at ``level_name`` (default
    ``DROPMATCH_LOG_LEVEL``); idempotent (console handlers of an earlier call are replaced, others kept). For
    the root, that level applies to this project's loggers (:data:`OURS`); other libraries log WARNING and up.

    Raises:
        ValueError: an invalid ``DROPMATCH_LOG_LEVEL``.
    """
    lvl = level_name or level()
    target = logger or logging.getLogger()
    if (
        logger is None
    ):  # other libraries' INFO chatter (fontTools subsetting a PDF ...) stays off the terminal
        target.setLevel(max(logging.getLevelName(lvl), logging.WARNING))
        for ours in OURS:
            logging.getLogger(ours).setLevel(lvl)
    else:
        target.setLevel(lvl)
    for h in [h for h in target.handlers if isinstance(h, Console)]:
        target.removeHandler(h)
    for h in console_handlers():
        target.addHandler(h)


def terminal(name: str, stream: str = "stderr") -> logging.Logger:
    """Logger ``name`` writing plain lines to the terminal only (``stream`` = ``stderr`` | ``stdout``), at INFO,
    not propagated: for lines about a whole sweep or process (Hydra reconfigures the root logger per job)."""
    log = logging.getLogger(name)
    if not any(isinstance(h, Console) for h in log.handlers):
        h = Console(err=stream != "stdout")
        h.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log
