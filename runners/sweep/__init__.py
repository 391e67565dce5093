"""Sweeps and what a terminal shows: the Hydra callbacks (validation, job status, the sweep's lines), the ``dm.*``
config resolvers, progress lines, and the logging setup of every command line (``console``)."""
