"""Auto-Judge (Garipov et al. 2025, arXiv 2504.20039): mining, judge training and the judge artefact.

``mining`` (the search for important tokens), ``mine`` / ``train`` / ``build`` (entry points),
``artefact`` (keys, paths, the check that a run's judge exists). The decoding rule is ``criteria.autojudge``.
"""
