"""Judged quality of open-ended answers (MT-Bench, KoMT-Bench, Alpaca): judge stored answers, record every judgment.

- :mod:`runners.judging.prompts`: FastChat's judge prompts and reference answers, AlpacaEval's annotator prompt
  (bundled data), turned into chat messages as those tools do.
- :mod:`runners.judging.parse`: replies to scores (``[[rating]]``, ``[[A]]/[[B]]/[[C]]``, AlpacaEval logprobs).
- :mod:`runners.judging.judges`: the judge config group ``conf/judge/`` (``api``: an OpenAI-compatible endpoint;
  ``local``: a causal LM on this machine, the embedded target by default, a weak judge).
- :mod:`runners.judging.protocols`: ``single``, ``pairwise``, ``alpaca_eval``: requests, judgment lines, summaries.
- :mod:`runners.judging.measurement`: the judging run (a measurement run: resumable record per judged run).
- :mod:`runners.judging.runs`: which runs are judged and the judging run's config (its run id).
- :mod:`runners.judging.agreement`: two judges compared on a fixed calibration subset.
- :mod:`runners.judging.cli`: ``python -m runners.judging <runs | artefact> [judge=api] ...``.
"""
