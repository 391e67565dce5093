"""Build a tiny random Qwen2 draft/target pair with a small BPE tokenizer, fully offline.

For tests, CI smoke runs and the vLLM CPU mechanism checks: seconds to build, milliseconds per step.
The draft is the target's weights plus Gaussian noise, so drafts are often (not always) accepted.

    python -m runners.models.tiny /tmp/tiny_pair     # writes /tmp/tiny_pair/{target,draft}
    python -m runners.main pair=tiny pair.target.local_path=/tmp/tiny_pair/target \\
        pair.draft.local_path=/tmp/tiny_pair/draft profile=smoke
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from runners.sweep.console import console

logger = logging.getLogger(__name__)

CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _corpus() -> list[str]:
    base = [
        "Janet has 3 apples and buys 5 more. The final answer is 8.",
        "def add(a, b):\n    return a + b\n",
        "Question: what is 12 times 7? Answer: 84. The final answer is 84.",
        "Write a short answer. Step by step, we add the numbers and then subtract.",
        "A B C D. The answer is (B). Therefore the result is correct.",
    ]
    return base * 20 + [" ".join(str(i) for i in range(200))]


def build_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer with ChatML special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_tiny_pair(
    out_dir: str | Path,
    seed: int = 0,
    noise: float = 0.5,
    hidden_size: int = 64,
    num_layers: int = 2,
) -> tuple[Path, Path]:
    """Write ``out_dir/target`` and ``out_dir/draft`` (safetensors + tokenizer); return both paths."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    tok = build_tokenizer()
    vocab = len(tok)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    target = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # sharper logits than the default init, so argmax is well defined
        target.lm_head.weight.mul_(20.0)
    draft = Qwen2ForCausalLM(cfg).eval()
    draft.load_state_dict(target.state_dict())
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * p.std() * torch.randn(p.shape, generator=g))
    paths = []
    for name, model in (("target", target), ("draft", draft)):
        d = out / name
        model.save_pretrained(d)
        tok.save_pretrained(d)
        (d / "tiny_pair.json").write_text(json.dumps({"seed": seed, "noise": noise, "role": name}))
        paths.append(d)
    return paths[0], paths[1]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise", type=float, default=0.5)
    a = ap.parse_args()
    t, d = build_tiny_pair(a.out_dir, seed=a.seed, noise=a.noise)

    console()
    logger.info("target: %s\ndraft:  %s", t, d)


if __name__ == "__main__":
    main()
