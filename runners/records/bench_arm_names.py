"""The benchmark's arm names and the engines they run on (names only, pure): one vocabulary for the measurement
(:mod:`runners.measure.bench`), its summaries and the tables (:mod:`analysis.tables.bench`, which may not import
the measurement package).

Our loop runs the arms ``ar`` (L = 0), ``sd`` and ``sd_dm`` on three engines, named by a prefix:
  - ``""``: the transformers loop on the pair in ``pair.dtype`` (the reference backend);
  - ``"f32_"``: the same loop on a second copy of the pair in float32, loaded beside it (the fallback precision
    of CPUs without fast bf16, measured in the same process as the others);
  - ``"lc_"``: the llama.cpp loop on the pair's GGUF files at their own precision.
transformers' own ``generate`` adds ``hf_ar`` and ``hf_assisted`` (assisted generation), decoding one prompt.
"""

from __future__ import annotations

OUR_ARMS = ("ar", "sd", "sd_dm")  # what our loop decodes, on every engine
ENGINES = ("", "f32_", "lc_")  # the prefixes: the pair's dtype, float32, llama.cpp
ENGINE_NAMES = {"": "our loop", "f32_": "our loop in float32", "lc_": "llama.cpp"}
FP32_ARMS = tuple(f"f32_{a}" for a in OUR_ARMS)
GGUF_ARMS = tuple(f"lc_{a}" for a in OUR_ARMS)
ARMS = ("ar", "hf_ar", "sd", "hf_assisted", "sd_dm", *FP32_ARMS, *GGUF_ARMS)
# our loops decode several prompts at once; transformers' arms decode one
BATCHED_ARMS = tuple(f"{e}{a}" for e in ENGINES for a in OUR_ARMS)
SPEC_ARMS = ("hf_assisted", *(f"{e}{a}" for e in ENGINES for a in ("sd", "sd_dm")))  # they draft


def engine_of(arm: str) -> str:
    """The engine prefix of one of our arms (``""``, ``"f32_"``, ``"lc_"``); ``""`` for transformers' arms.

    Raises:
        ValueError: ``arm`` is not one of :data:`ARMS`.
    """
    if arm not in ARMS:
        raise ValueError(f"unknown bench arm {arm!r}; allowed: {', '.join(ARMS)}")
    return next((e for e in ENGINES[1:] if arm.startswith(e)), "")


def engine_ar(arm: str) -> str:
    """The AR arm of ``arm``'s engine (the reference of its speculative ratios and token equality)."""
    return f"{engine_of(arm)}ar"


def loop_arm(arm: str) -> str:
    """``arm`` without its engine prefix: which of :data:`OUR_ARMS` it decodes (``hf_*`` arms unchanged)."""
    return arm.removeprefix(engine_of(arm))
