"""``eagle_gsm8k_exact_match``: EAGLE's 80 GSM8K questions graded on the final number, by lm-eval's ``gsm8k`` task.

Paper: DropMatch Table 7 ("GSM8K provides ground-truth answers, and performance is evaluated based on exact
answer correctness"). The prompt carries no answer-format instruction, so the primary metric is lm-eval
``gsm8k`` ``exact_match,flexible-extract``: the last number in the output vs the reference's ``#### N``
(lm-eval's ``regexes_to_ignore`` strip ``,`` ``$`` ``#### `` and a final ``.``). ``exact_match,strict-match``
(an output that itself ends ``#### N``) is reported too. Needs each sample's ``reference`` to be
``{question, answer}`` (``runners.datasets.eagle_bench``).
"""

from __future__ import annotations

from runners.registry import SCORERS
from runners.scorers.lm_eval_scorer import LmEvalScorer


@SCORERS.register("eagle_gsm8k_exact_match")
class EagleGsm8kScorer(LmEvalScorer):
    """lm-eval ``gsm8k`` filters + ``exact_match``; primary ``exact_match,flexible-extract``."""

    task_name = "gsm8k"
    metric = "exact_match,flexible-extract"
