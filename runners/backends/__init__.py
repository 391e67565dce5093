"""Generation backends; importing this package registers them in ``runners.registry.BACKENDS``."""

from runners.registry import BACKENDS

from runners.backends import hf_loop  # noqa: F401,E402
from runners.backends import llamacpp_loop  # noqa: F401,E402  (llama_cpp itself is imported on first use)

if "vllm" not in BACKENDS:
    BACKENDS.register_lazy("vllm", "runners.backends.vllm_engine:VLLMBackend")
