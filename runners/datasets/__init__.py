"""Benchmark datasets; importing this package registers every one in ``runners.registry.DATASETS``.

Keys: ``gsm8k``, ``mmlu``, ``ifeval``, ``humaneval`` (one module each). Heavy libraries (lm-eval,
``datasets``) are imported only inside ``load()``.
"""

from runners.datasets import gsm8k, humaneval, ifeval, mmlu  # noqa: F401  (registration)
from runners.datasets import spec_bench  # noqa: F401  (registration)
from runners.datasets import eagle_bench  # noqa: F401  (registration: eagle_gsm8k, mt_bench, alpaca, komt_bench)
from runners.datasets import livecodebench  # noqa: F401  (registration)
