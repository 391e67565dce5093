"""Scorers; importing this package registers every one in ``runners.registry.SCORERS``.

Keys: ``lm_eval_gsm8k_cot_llama``, ``lm_eval_mmlu_llama``, ``lm_eval_mmlu_generative``, ``lm_eval_ifeval``
(``lm_eval_scorer.py``), ``eagle_gsm8k_exact_match``, ``evalplus_humaneval`` (``evalplus_scorer.py``) and
``none``. lm-eval and EvalPlus are imported only when a scorer first scores.
"""

from runners.scorers import evalplus_scorer, lm_eval_scorer  # noqa: F401  (registration)
from runners.scorers import none_scorer  # noqa: F401  (registration; `none` for unscored datasets)
from runners.scorers import eagle_gsm8k_scorer  # noqa: F401  (registration; EAGLE's GSM8K, final number)
from runners.scorers import livecodebench_scorer  # noqa: F401  (registration; LiveCodeBench pass@1)
