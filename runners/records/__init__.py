"""Run records and what they say about themselves.

``record`` (``results/runs/<run_id>/``: append-only, crash-safe, resumable), ``run_id`` (what the id hashes),
``io`` (strict JSON: NaN written as null; atomic writes, file hashes), ``strict_json`` (rewrites older files
holding a bare NaN), ``counters`` (spec-decode counters), ``summary`` (a run's summary from its samples),
``provenance`` (date, commit, versions, device), ``fingerprint`` and ``legacy_fingerprints`` (the decision code a
record was made by), ``reuse`` (what a rerun does with a record made by other code).
"""
