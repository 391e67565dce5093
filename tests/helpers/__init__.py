"""Helpers the tests import (``from tests.helpers.<module> import ...``; fixtures live in the conftest files):
``records`` (hand-built traces and run records), ``cli`` (``python -m runners.main`` command lines and record
readers), ``verify_inputs`` (hand-built verify-round inputs), ``vllm`` (the vLLM tests' generate helper)."""
