"""``eagle_gsm8k_exact_match``: EAGLE's 80 GSM8K questions graded on the final number, by lm-eval's ``gsm8k`` task.

Paper: DropMatch Table 7 ("GSM8K provides ground-truth answers, and performance is evaluated based on exact
answer correctness"). The prompt carries no answer-format instruction, so the answer is the output's last
number. Primary metric ``math_verify,none``: math-verify's own extraction from the whole output (a "final answer
is" phrase first, else the last number) equal in value to the reference's ``#### N``
(:mod:`runners.scorers.math_verify_match`). Comparable number: lm-eval ``gsm8k`` ``exact_match,flexible-extract``
(the last match of ``-?[$0-9.,]{2,}``, compared as a string after lm-eval's ``regexes_to_ignore`` strip ``,``
``$`` ``#### `` and a final ``.``; a trailing "..." or "e.g.," is taken as the answer there).
``exact_match,strict-match`` (an output that itself ends ``#### N``) and ``math_verify`` of each filter are
reported too. Needs each sample's ``reference`` to be ``{question, answer}`` (``runners.datasets.eagle_bench``).
"""

from __future__ import annotations

from runners.registry import SCORERS
from runners.scorers.lm_eval_scorer import LmEvalScorer


@SCORERS.register("eagle_gsm8k_exact_match")
class EagleGsm8kScorer(LmEvalScorer):
    """lm-eval ``gsm8k`` filters + ``exact_match`` and math-verify; primary ``math_verify,none``, comparable
    ``exact_match,flexible-extract``."""

    task_name = "gsm8k"
    metric = "math_verify,none"
    math_verify = True
    comparable_metric = "exact_match,flexible-extract"
