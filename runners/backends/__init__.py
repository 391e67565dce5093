"""Generation backends; importing this package registers them in ``runners.registry.BACKENDS``."""

from runners.registry import BACKENDS

from runners.backends import hf_loop  # noqa: F401,E402

if "vllm" not in BACKENDS:
    BACKENDS.register_lazy("vllm", "runners.backends.vllm_engine:VLLMBackend")
