"""Scorers; importing this package registers every one in ``runners.registry.SCORERS``.

Keys: ``lm_eval_gsm8k_cot_llama``, ``lm_eval_mmlu_llama``, ``lm_eval_mmlu_generative``, ``lm_eval_ifeval``
(``lm_eval_scorer.py``), ``eagle_gsm8k_exact_match``, ``evalplus_humaneval`` (``evalplus_scorer.py``) and
``none``. lm-eval and EvalPlus are imported only when a scorer first scores.
"""

from runners.scorers import (  # noqa: F401  (registration)
    eagle_gsm8k_scorer,  # noqa: F401  (registration; EAGLE's GSM8K, final number)
    evalplus_scorer,
    livecodebench_scorer,  # noqa: F401  (registration; LiveCodeBench pass@1)
    lm_eval_scorer,
    none_scorer,  # noqa: F401  (registration; `none` for unscored datasets)
)
