"""Import every acceptance rule so that :data:`criteria.registry.CRITERIA` holds all of them.

``import criteria.rules`` registers ``autoregressive``, ``greedy_match``, ``rejection``, ``dropmatch_naive``,
``dropmatch_js``, ``dropout_path``, ``autojudge`` and
``autojudge_dropmatch``; then ``CRITERIA.get(name)`` returns the rule class.
"""

from __future__ import annotations

from criteria.autojudge import AutoJudge
from criteria.autojudge_dropmatch import AutoJudgeDropMatch
from criteria.autoregressive import Autoregressive
from criteria.dropmatch_js import DropMatchJS
from criteria.dropmatch_naive import DropMatchNaive
from criteria.dropout_path import DropoutPath
from criteria.greedy_match import GreedyMatch
from criteria.rejection import RejectionSampling

__all__ = [
    "AutoJudge",
    "AutoJudgeDropMatch",
    "Autoregressive",
    "DropMatchJS",
    "DropMatchNaive",
    "DropoutPath",
    "GreedyMatch",
    "RejectionSampling",
]
