"""Auto-Judge + DropMatch: a draft token is accepted when either rule accepts it.

Paper: DropMatch (arXiv 2603.03333) Sec. 4.3 (Table 8, Table 9, Fig. 5), Sec. 4.5 (Fig. 6); Auto-Judge
(Garipov et al. 2025, arXiv 2504.20039) Sec. 3.3.

Composition implemented: at every draft position t, ``accept_t = AJ_t OR DM_t`` where ``AJ_t`` is Auto-Judge's
test (exact match with the target argmax, or ``p_important < threshold``) and ``DM_t`` is the JS rule of
Algorithm 1 (Eq. 6: ``JS(p_hat || p_bar) <= max_i JS(p^(i) || p_bar)``, or Eq. 7: the heads' majority token
equals the draft); then the usual left-to-right prefix closure, and the target argmax at the first rejected
position. Why OR: the paper "applies DropMatch to the Auto-Judge framework" with Auto-Judge's parameters
unchanged (Sec. 4.3), and reports that AJ + DM always has a longer mean acceptance length than AJ at the
same threshold ("consistently achieves longer acceptance length than the baseline", Table 8; "a rightward
shift of Auto-Judge + DM relative to Auto-Judge", Fig. 5), explaining that "Auto-Judge frequently rejects
tokens that should be accepted" and DropMatch "complements these failure modes" (Sec. 4.5). DropMatch thus
adds acceptances on top of the judge: a token the judge would reject is still accepted when it lies inside
the MC-dropout cluster. An AND would shorten acceptance below AJ and contradict those results. Taking the OR
per position before the prefix closure makes the accepted prefix a superset of both rules' prefixes.

Cost: in a round of the sparse variant (``inputs.sparse_support``, the default CPU decision) DropMatch's JS test
(Eq. 6, with its sampled tail and escape) runs only where it can change the round: at positions neither the judge
nor the heads' majority accepts, up to each row's first position both rules reject (the waves of
:meth:`criteria.dropmatch_js.DropMatchJS._reached_js`, told that the judge's positions are accepted). The decisions
are those of the test at every position; a traced round, and a round of the exact rule, still test every position.
"""

from __future__ import annotations

from typing import Any

import torch

from criteria.autojudge import as_head, check_threshold, judge_accepts
from criteria.base import AcceptResult, VerifyInputs
from criteria.common import check_inputs, finish_round
from criteria.dropmatch_base import dropmatch_trace, majority_vote, round_head_tokens
from criteria.dropmatch_js import DropMatchJS
from criteria.registry import CRITERIA


@CRITERIA.register("autojudge_dropmatch")
class AutoJudgeDropMatch:
    """Accept draft t iff Auto-Judge accepts it or DropMatch's JS rule (Algorithm 1) accepts it.

    Paper: DropMatch Sec. 4.3 ("Auto-Judge + DM"); composition and its justification: module docstring.

    Greedy only (T = 0), as Auto-Judge: ``temperature > 0`` raises. No RNG (head tokens are argmax; the
    dropout masks are drawn by the backend when it builds ``head_logits``).

    Args:
        threshold: judge threshold in [0, 1] (accept a mismatch iff ``p_important < threshold``).
        judge: a :class:`criteria.autojudge.JudgeHead`, its state dict or a ``judge.pt`` path.
        majority, include_target: DropMatch's own settings (:class:`criteria.dropmatch_base.DropMatchBase`).
            K and p_drop travel in the run's :class:`criteria.dropout_heads.HeadSpec` (the rule reads K off
            ``head_logits``).

    Attributes:
        name: ``"autojudge_dropmatch"``; needs_heads, needs_draft_probs, needs_hidden, heads_at_drafts_only: True.
    """

    name = "autojudge_dropmatch"
    needs_heads = True
    needs_draft_probs = True
    needs_hidden = True
    heads_at_drafts_only = True  # the judge and DropMatch read positions 1..L only

    def __init__(
        self,
        threshold: float = 0.5,
        judge: Any = None,
        majority: str = "strict",
        include_target: bool = False,
    ) -> None:
        self.threshold = check_threshold(self.name, threshold)
        if judge is None:
            raise ValueError(
                f"{self.name}: judge is required (a trained judge head; see runners.autojudge.build)"
            )
        self.head = as_head(judge)
        self.judge_features = self.head.features
        self._dm = DropMatchJS(majority=majority, include_target=include_target)
        self.majority = self._dm.majority

    def tests(self, inputs: VerifyInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple]:
        """The two per-position tests: ``(aj [B, L] bool, dm [B, L] bool, head_token_ids [B, L, K], js)``."""
        L = inputs.draft_token_ids.shape[1]
        heads = round_head_tokens(inputs, L, 0.0, None)  # [B, L, K]
        dm, js = self._dm.accept_test(inputs, heads)  # [B, L]
        if self._dm.include_target:
            dm = dm | self._target_match(inputs, L)
        return judge_accepts(self.head, inputs, self.threshold), dm, heads, js

    def _decide(self, inputs: VerifyInputs) -> torch.Tensor:
        """``AJ OR DM`` per position, ``[B, L]`` bool, exact up to each row's first position both reject.

        The sparse variant asks Eq. (6) only where neither the judge, the majority (Eq. 7) nor, with
        ``include_target``, the target's argmax accepts, up to that position (module docstring); other rounds
        ask it everywhere (:meth:`tests`).
        """
        if inputs.sparse_support is None:
            aj, dm, _, _ = self.tests(inputs)
            return aj | dm
        L = inputs.draft_token_ids.shape[1]
        heads = round_head_tokens(inputs, L, 0.0, None)  # [B, L, K]
        majority, valid = majority_vote(heads, self._dm.majority)  # [B, L] each
        accepted = judge_accepts(self.head, inputs, self.threshold) | (
            valid & (majority == inputs.draft_token_ids)
        )  # [B, L]: positions Eq. (6) need not decide
        if self._dm.include_target:
            accepted = accepted | self._target_match(inputs, L)
        return DropMatchJS._reached_js(inputs, accepted)

    @staticmethod
    def _target_match(inputs: VerifyInputs, L: int) -> torch.Tensor:
        """``include_target``'s test: the draft equals the plain head's argmax, ``[B, L]`` bool."""
        return inputs.draft_token_ids == inputs.target_logits[:, :L].argmax(dim=-1)

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round (greedy).

        Args:
            inputs: ``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``, ``head_logits``
                ``[B, L or L+1, K, V]``, ``draft_probs`` ``[B, L, V]``, ``target_hidden`` ``[B, L+1, d]``,
                ``draft_hidden`` ``[B, L, d_draft]`` (features ``dd_dt``). Not mutated.
            trace: if True, DropMatch's trace (:func:`criteria.dropmatch_base.dropmatch_trace`) plus
                ``accepted_by_judge`` and ``accepted_by_dropmatch`` ``[B, L]`` bool (before the prefix closure).

        Raises:
            ValueError: malformed inputs, missing hidden states / heads / draft_probs, or ``temperature > 0``.
        """
        check_inputs(inputs, rule=self.name, need_draft_probs=True, need_heads=True)
        if inputs.temperature != 0:
            raise ValueError(
                f"{self.name}: temperature={inputs.temperature} unsupported; allowed: 0 (greedy, as Auto-Judge)"
            )
        if not trace:
            return finish_round(self._decide(inputs), inputs.target_logits, 0.0, None, None)
        aj, dm, heads, js = self.tests(inputs)
        info = {
            **dropmatch_trace(inputs, heads, js, self.majority),
            "accepted_by_judge": aj,
            "accepted_by_dropmatch": dm,
        }
        return finish_round(aj | dm, inputs.target_logits, 0.0, None, info)

    def __repr__(self) -> str:
        return (
            f"AutoJudgeDropMatch(threshold={self.threshold}, judge={self.head.key or self.head.features}, "
            f"majority={self.majority!r})"
        )
