"""Benchmark datasets; importing this package registers every one in ``runners.registry.DATASETS``.

Keys: ``gsm8k``, ``mmlu``, ``ifeval``, ``humaneval`` (one module each). Heavy libraries (lm-eval,
``datasets``) are imported only inside ``load()``.
"""

from runners.datasets import (  # noqa: F401  (registration)
    eagle_bench,  # noqa: F401  (registration: eagle_gsm8k, mt_bench, alpaca, komt_bench)
    gsm8k,
    humaneval,
    ifeval,
    livecodebench,  # noqa: F401  (registration)
    mmlu,
    spec_bench,  # noqa: F401  (registration)
)
