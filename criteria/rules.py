"""Import every acceptance rule so that :data:`criteria.registry.CRITERIA` holds all of them.

``import criteria.rules`` registers ``autoregressive``, ``greedy_match``, ``rejection``, ``dropmatch_naive``,
``dropmatch_js``, ``dropout_path``, ``autojudge`` and ``autojudge_dropmatch``, and the field's training-free lossy
rules ``fly``, ``fsd``, ``typical``, ``relaxed_topk``, ``prob_threshold``, ``static_ensemble``, ``bild`` and
``block_verify``; then ``CRITERIA.get(name)`` returns the rule class.
"""

from __future__ import annotations

from criteria.autojudge import AutoJudge
from criteria.autojudge_dropmatch import AutoJudgeDropMatch
from criteria.autoregressive import Autoregressive
from criteria.bild import BigLittleDecoder
from criteria.block import BlockVerification
from criteria.dropmatch_js import DropMatchJS
from criteria.dropmatch_naive import DropMatchNaive
from criteria.dropout_path import DropoutPath
from criteria.ensemble import StaticEnsemble
from criteria.fly import FLy
from criteria.fsd import FuzzySpeculative
from criteria.greedy_match import GreedyMatch
from criteria.rejection import RejectionSampling
from criteria.relaxed import RelaxedTopK
from criteria.thresholds import ProbThreshold
from criteria.typical import TypicalAcceptance

__all__ = [
    "AutoJudge",
    "AutoJudgeDropMatch",
    "Autoregressive",
    "BigLittleDecoder",
    "BlockVerification",
    "DropMatchJS",
    "DropMatchNaive",
    "DropoutPath",
    "FLy",
    "FuzzySpeculative",
    "GreedyMatch",
    "ProbThreshold",
    "RejectionSampling",
    "RelaxedTopK",
    "StaticEnsemble",
    "TypicalAcceptance",
]

# The field's training-free rules compared with DropMatch (all lossy but block_verify), one conf/method/ file each.
FIELD_RULES = (
    "fly",
    "fsd",
    "typical",
    "relaxed_topk",
    "prob_threshold",
    "static_ensemble",
    "bild",
    "block_verify",
)
