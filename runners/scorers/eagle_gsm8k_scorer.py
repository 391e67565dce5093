"""``eagle_gsm8k_exact_match``: EAGLE's 80 GSM8K questions graded on the final number, with lm-eval's code.

Paper: DropMatch Table 7 ("GSM8K provides ground-truth answers, and performance is evaluated based on exact
answer correctness"). The prompt carries no answer-format instruction, so the primary metric is lm-eval
``gsm8k`` (``gsm8k/gsm8k.yaml``) ``exact_match,flexible-extract``: the last number in the output vs the
reference's ``#### N`` (lm-eval's ``regexes_to_ignore`` strip ``,`` ``$`` ``#### `` and a final ``.``).
``exact_match,strict-match`` (an output that itself ends ``#### N``) is reported too. Needs each sample's
``reference`` to be ``{question, answer}`` (``runners.datasets.eagle_bench``).
"""

from __future__ import annotations

from runners.registry import SCORERS
from runners.scorers.lm_eval_scorer import LmEvalGenerateScorer


@SCORERS.register("eagle_gsm8k_exact_match")
class EagleGsm8kScorer(LmEvalGenerateScorer):
    """lm-eval ``gsm8k`` filters + ``exact_match``; primary ``exact_match,flexible-extract``."""

    task_yaml = "gsm8k/gsm8k.yaml"
    metric = "exact_match,flexible-extract"
