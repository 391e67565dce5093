"""Numerically normalised answer match with Hugging Face's math-verify (``math_verify.parse`` / ``verify``).

lm-eval's GSM8K ``exact_match`` compares strings after deleting ``,`` ``$`` and one final ``.``, so an answer
written as people write numbers ("$18.00", "18...", "1,200.00") scores 0 against the reference "18" / "1200",
and its ``flexible-extract`` regex (``-?[$0-9.,]{2,}``, the last match) takes a run of punctuation after the
answer ("...", ".,") as the answer itself. math-verify parses both sides to numbers (or expressions) and
compares their values: "$18.00" = 18, "1,200" = 1200, "18..." = 18, "17" != 18.

lm-eval itself scores with math-verify this way in its ``minerva_math`` task (``math_verify`` metric:
``verify(gold=parse(gold), target=parse(output))``); this module is the same call with a time limit that
is safe for a caller's own ``SIGALRM`` timer. math-verify is installed with its ``antlr4_9_3`` extra, the ANTLR
runtime hydra-core 1.3.8 / omegaconf 2.3 pin (``lm-eval[math]`` asks for ANTLR 4.11 and cannot be installed
beside hydra).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

TIMEOUT_S = 5  # math-verify's own default for one parse / one comparison, seconds


def _with_timer_kept(fn: Callable[[int | None], Any]) -> Any:
    """Call ``fn(timeout_s)``; math-verify's limit uses ``signal.alarm``, which works in the main thread only
    and cancels any timer already set (pytest-timeout, a caller's own limit): re-arm that timer afterwards."""
    if threading.current_thread() is not threading.main_thread():
        return fn(None)  # no SIGALRM off the main thread: math-verify then runs without a limit
    pending, interval = signal.getitimer(signal.ITIMER_REAL)
    t0 = time.monotonic()
    try:
        return fn(TIMEOUT_S)
    finally:
        if pending > 0:
            left = max(pending - (time.monotonic() - t0), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def parsed(text: str) -> list:
    """math-verify's extraction from ``text`` (LaTeX, then plain expressions; ``[]`` when nothing parses)."""
    from math_verify import parse

    return _with_timer_kept(lambda t: parse(str(text), parsing_timeout=t))


def answer_matches(gold: str, answer: str) -> float:
    """1.0 when math-verify finds ``answer`` equal in value to ``gold``, else 0.0 (also when either side has
    no parsable number or expression).

    Args:
        gold: the reference answer (GSM8K: the number after ``####``).
        answer: the model's answer: an extracted string (an lm-eval filter's output) or the whole output
            (math-verify extracts the answer, preferring a "final answer is ..." phrase, else the last one).
    """
    from math_verify import verify

    g, a = parsed(gold), parsed(answer)
    if not g or not a:
        return 0.0
    return float(bool(_with_timer_kept(lambda t: verify(g, a, timeout_seconds=t))))
