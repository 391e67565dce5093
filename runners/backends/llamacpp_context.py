"""llama.cpp through ``llama-cpp-python``'s C API: one model, one context with one KV sequence per row.

The draft-verify loop (``runners.backends.llamacpp_loop``) needs four things from the engine, all in the C API:
  - ``decode(feed)``: one ``llama_decode`` of a batch that holds tokens of several sequences (each token with its
    sequence id, its position and whether its output is wanted), returning the logits ``[n_out, V]`` and, with
    ``hidden=True``, the final normed hidden states ``[n_out, d]`` (the LM head's input: ``llama_get_embeddings``
    with pooling off) of the wanted positions, in batch order;
  - ``truncate(seq, n)``: rollback, the sequence's KV entries from position ``n`` on removed
    (``llama_memory_seq_rm``);
  - ``copy(src, dst, n)``: the first ``n`` positions of one sequence given to another (``llama_memory_seq_cp``),
    for a prompt prefix computed once;
  - ``clear(seq)``.
Positions of a sequence are ``0..n-1`` with no gaps; the caller keeps ``n`` per sequence (``lengths``).

Numerics: llama.cpp computes in the GGUF's own types (quantised weights, activations quantised to 8 bits for the
dot products, f16 KV cache by default), so its logits differ from a float32 transformers forward on dequantised
weights by a few hundredths; a token's result can also depend on the batch it was computed in (the matmul kernel
depends on the number of rows). Tests bound both.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runners.models.identity import file_type_name
from runners.config.isa import check_llama

_MODELS: dict[tuple[str, int], GGUFModel] = {}


_LOG_CALLBACK = None  # the ctypes callback must outlive every call into llama.cpp


def _quiet(lc) -> None:
    """Route llama.cpp's C log to Python's ``logging`` (``llama_cpp`` logger): errors as errors, warnings as
    debug (the loading chatter and e.g. "n_ctx_seq > n_ctx_train" are not problems here), the rest dropped.

    Levels are ggml's enum (``ggml.h``: DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5).
    """
    global _LOG_CALLBACK
    if _LOG_CALLBACK is not None:
        return
    log = logging.getLogger("llama_cpp")

    @lc.llama_log_callback
    def callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if level in (3, 4):
            log.log(
                logging.ERROR if level == 4 else logging.DEBUG,
                text.decode(errors="replace").rstrip(),
            )

    _LOG_CALLBACK = callback
    lc.llama_log_set(callback, ctypes.c_void_p(0))


def _llama_cpp():
    """The ``llama_cpp`` module, its C log routed to ``logging`` (:func:`_quiet`).

    Raises:
        ImportError: ``llama-cpp-python`` is not installed; the message says how to install it.
    """
    try:
        import llama_cpp
    except ImportError as e:  # pragma: no cover - exercised where the engine is not built
        raise ImportError(
            "backend=llamacpp needs llama-cpp-python (compiled at install: ./reproduce.sh setup builds it, "
            "or pip install -e '.[llamacpp]' with CMAKE_ARGS from reproduce.sh); or use backend=hf"
        ) from e
    _quiet(llama_cpp)
    info = llama_cpp.llama_print_system_info()
    check_llama(info.decode() if isinstance(info, bytes) else str(info))
    return llama_cpp


def threads(n_threads: int | None) -> int:
    """Threads for llama.cpp: ``n_threads``, else ``DROPMATCH_THREADS``, else every core."""
    if n_threads:
        return int(n_threads)
    return int(os.environ.get("DROPMATCH_THREADS") or os.cpu_count() or 1)


class GGUFModel:
    """A GGUF file loaded by llama.cpp (weights memory-mapped), shared by the contexts made from it.

    ``repack``: llama.cpp's CPU weight repacking (``use_extra_bufts``: k-quant and Q4_0/Q8_0 weights re-laid out
    for multi-row kernels). Off by default here: the repacked kernels compute a token differently in a batch of
    several rows than alone (up to 0.39 in the Q4_K_M target's logits between a 6-token verify pass and 6 decode
    steps, measured), which breaks greedy SD == AR; without repacking every matmul row is the same dot product
    whatever the batch (difference 0.0, measured).

    Attributes:
        path: the GGUF file.
        n_vocab: V, rows of the output head (the GGUF vocabulary, padding included).
        n_embd: d, hidden size.
        file_type: the GGUF's ``general.file_type`` as llama.cpp names it (e.g. ``Q4_K_M``, ``F32``).
        desc: llama.cpp's one-line description (architecture, size, type).
    """

    def __init__(self, path: str | Path, repack: bool = False) -> None:
        lc = _llama_cpp()
        lc.llama_backend_init()
        self.path, self.repack = Path(path), bool(repack)
        params = lc.llama_model_default_params()
        params.use_extra_bufts = self.repack
        self.ptr = lc.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.ptr:
            raise RuntimeError(f"llama.cpp could not load {self.path}")
        vocab = lc.llama_model_get_vocab(self.ptr)
        self.n_vocab = int(lc.llama_vocab_n_tokens(vocab))
        self.n_embd = int(lc.llama_model_n_embd(self.ptr))
        buf = ctypes.create_string_buffer(256)
        lc.llama_model_desc(self.ptr, buf, len(buf))
        self.desc = buf.value.decode(errors="replace")
        self.file_type = file_type_name(int(lc.llama_model_ftype(self.ptr)))

    @classmethod
    def load(cls, path: str | Path, repack: bool = False) -> GGUFModel:
        """The model of ``path``, loaded once per process (keyed by path, file size and ``repack``)."""
        key = (str(Path(path).resolve()), Path(path).stat().st_size, bool(repack))
        if key not in _MODELS:
            _MODELS[key] = cls(path, repack)
        return _MODELS[key]


@dataclass
class Feed:
    """One token of a batch: sequence, position, token id, and whether its output (logits/hidden) is wanted."""

    seq: int
    pos: int
    token: int
    out: bool


class SeqContext:
    """A llama.cpp context with ``n_seq`` KV sequences (ids ``0..n_seq-1``).

    Each sequence has its own KV stream of ``n_ctx`` cells by default (``unified=False``): its cells then lie in
    position order whatever the other sequences did (rollback frees the tail, the next tokens refill it), so a
    token's attention sums the same cells in the same order as in a fresh decode of its sequence. In a unified
    cache (one buffer shared by all sequences) a sequence's cells interleave with others' in an order that
    depends on the batch's history; attention then sums in another order, and with quantised activations (every
    k-quant or Q8_0 matmul rounds its input to 8 bits) last-bit differences grow into logit differences of
    ~0.01-0.05, enough to flip a greedy near-tie between an AR and an SD decode (measured on the tiny Q8_0 pair).

    Args:
        model: the :class:`GGUFModel`.
        n_seq: sequences the cache holds at once (rows of the batch, plus any the caller keeps for a prefix).
        n_ctx: KV cells per sequence (prompt + output + L tokens must fit); the cache holds ``n_seq * n_ctx``.
        n_batch: tokens per ``llama_decode`` call (longer feeds are split).
        n_threads: CPU threads (:func:`threads`).
        hidden: also extract the final normed hidden states (``embeddings`` with pooling off).
        flash_attn: llama.cpp's flash attention (``auto`` / ``on`` / ``off``).
        unified: one KV buffer for all sequences (a shared prefix stored once) instead of one stream each.

    Raises:
        RuntimeError: llama.cpp could not create the context (e.g. the KV cache does not fit in memory).
    """

    def __init__(
        self,
        model: GGUFModel,
        n_seq: int,
        n_ctx: int,
        n_batch: int = 512,
        n_threads: int | None = None,
        hidden: bool = False,
        flash_attn: str = "auto",
        unified: bool = False,
    ) -> None:
        lc = _llama_cpp()
        self.lc, self.model = lc, model
        p = lc.llama_context_default_params()
        p.n_ctx = int(n_ctx) * (1 if unified else n_seq)
        p.n_batch, p.n_ubatch, p.n_seq_max = int(n_batch), int(n_batch), n_seq
        p.n_outputs_max, p.n_outputs_max_per_seq = 0, 0  # every wanted position of every sequence
        p.n_threads = p.n_threads_batch = threads(n_threads)
        p.embeddings = bool(hidden)
        if hidden:  # per-token hidden states, not pooled
            p.pooling_type = lc.LLAMA_POOLING_TYPE_NONE
        p.kv_unified = bool(unified)
        p.flash_attn_type = {
            "auto": lc.LLAMA_FLASH_ATTN_TYPE_AUTO,
            "on": lc.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            "off": lc.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        }[flash_attn]
        self.ptr = lc.llama_init_from_model(model.ptr, p)
        if not self.ptr:
            raise RuntimeError(
                f"llama.cpp could not create a context (n_ctx={n_ctx}, n_seq={n_seq}) for {model.path}"
            )
        self.mem = lc.llama_get_memory(self.ptr)
        self.n_seq, self.n_ctx, self.n_batch, self.hidden = n_seq, int(n_ctx), int(n_batch), hidden
        self.unified = bool(unified)
        self.lengths = [0] * n_seq
        self._embeddings = bool(hidden)
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)

    def close(self) -> None:
        if getattr(self, "ptr", None):
            self.lc.llama_batch_free(self._batch)
            self.lc.llama_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order
        try:
            self.close()
        except Exception:
            pass

    def decode(
        self, feed: Sequence[Feed], hidden: bool | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Run the tokens of ``feed`` (any sequences, each sequence's positions continuing its cache).

        ``hidden=False`` on a context made with ``hidden=True`` skips the hidden states for this call: llama.cpp
        extracts hidden states of EVERY fed token when they are on (e.g. a whole prompt, each then also through the
        output head), so a prompt prefill that needs only its last position's logits turns them off.

        Returns:
            ``(logits [n_out, V] float32, hidden [n_out, d] float32 or None)``: the rows of the tokens with
            ``out`` set, in feed order (copies; the engine's buffers are reused by the next call).

        Raises:
            RuntimeError: ``llama_decode`` failed (its return code; 1 = no KV slot: raise ``n_ctx``).
        """
        lc, b = self.lc, self._batch
        want = self.hidden if hidden is None else (self.hidden and hidden)
        if want != self._embeddings:
            lc.llama_set_embeddings(self.ptr, want)
            self._embeddings = want
        logits, states = [], []
        for start in range(0, len(feed), self.n_batch):
            part = feed[start : start + self.n_batch]
            n = len(part)
            toks = np.fromiter((f.token for f in part), dtype=np.int32, count=n)
            pos = np.fromiter((f.pos for f in part), dtype=np.int32, count=n)
            outs = np.fromiter((f.out for f in part), dtype=np.int8, count=n)
            ctypes.memmove(b.token, toks.ctypes.data, 4 * n)
            ctypes.memmove(b.pos, pos.ctypes.data, 4 * n)
            ctypes.memmove(b.logits, outs.ctypes.data, n)
            for i, f in enumerate(part):
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = f.seq
            b.n_tokens = n
            rc = lc.llama_decode(self.ptr, b)
            if rc != 0:
                raise RuntimeError(
                    f"llama_decode returned {rc} for {n} tokens (1: no KV slot; raise backend.n_ctx)"
                )
            for f in part:
                self.lengths[f.seq] = max(self.lengths[f.seq], f.pos + 1)
            # rows by batch index (llama_get_*_ith): with hidden states on, llama.cpp outputs EVERY token of the
            # batch whatever was asked, so the output buffer's row order is not the wanted subset's
            V, d = self.model.n_vocab, self.model.n_embd
            for i in np.flatnonzero(outs):
                logits.append(
                    np.ctypeslib.as_array(lc.llama_get_logits_ith(self.ptr, int(i)), (V,)).copy()
                )
                if want:
                    states.append(
                        np.ctypeslib.as_array(
                            lc.llama_get_embeddings_ith(self.ptr, int(i)), (d,)
                        ).copy()
                    )
        V, d = self.model.n_vocab, self.model.n_embd
        lg = np.stack(logits) if logits else np.empty((0, V), np.float32)
        hd = (np.stack(states) if states else np.empty((0, d), np.float32)) if want else None
        return lg, hd

    def truncate(self, seq: int, n: int) -> None:
        """Keep positions ``0..n-1`` of sequence ``seq`` (its KV entries from ``n`` on are removed)."""
        if n < self.lengths[seq]:
            if not self.lc.llama_memory_seq_rm(self.mem, seq, n, -1):
                raise RuntimeError(f"llama.cpp could not remove positions >= {n} of sequence {seq}")
            self.lengths[seq] = n

    def clear(self, seq: int) -> None:
        """Remove every entry of sequence ``seq``."""
        self.lc.llama_memory_seq_rm(self.mem, seq, -1, -1)
        self.lengths[seq] = 0

    def copy(self, src: int, dst: int, n: int) -> None:
        """Sequence ``dst`` becomes positions ``0..n-1`` of ``src`` (``dst`` is cleared first).

        Unified cache: the cells are shared (tagged with ``dst``). One stream per sequence: llama.cpp copies the
        whole stream (its cells keep their order), then positions from ``n`` on are removed.
        """
        self.clear(dst)
        if n <= 0:
            return
        if self.unified:
            self.lc.llama_memory_seq_cp(self.mem, src, dst, 0, n)
        else:
            self.lc.llama_memory_seq_cp(self.mem, src, dst, -1, -1)
            self.lengths[dst] = self.lengths[src]
            self.truncate(dst, n)
        self.lengths[dst] = n
