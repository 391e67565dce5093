"""Auto-Judge: accept a mismatching draft token when a linear judge head scores it unimportant.

Paper: Garipov et al. 2025 (arXiv 2504.20039), Sec. 3 (important-token classifier, inference rule);
DropMatch (arXiv 2603.03333) Sec. 4.3 (Auto-Judge baseline, Table 8, Fig. 5).

The judge is a logistic regression on final hidden states at the draft token's position (the authors'
"DD-DT" features: the draft model's and the target's hidden state after each model has read the draft
token; "DT": the target's only, the authors' vLLM setting). At inference it is
``p_important = sigmoid(w . (x - mean) / scale + b)``, evaluated here in pure torch from the saved
coefficients (no scikit-learn at decode time). A draft token is accepted when it equals the target's
argmax (exact match) or when ``p_important < threshold`` (the authors' ``head_mask = p_head < thr``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import check_inputs, finish_round
from criteria.registry import CRITERIA

FEATURES = ("dd_dt", "dt")


@dataclass
class JudgeHead:
    """A trained linear judge: standardisation + logistic regression, as tensors.

    Paper: Garipov et al. 2025, Sec. 3.2 (logistic regression on hidden states; StandardScaler first).

    Attributes:
        weight: ``[F]`` float32, coefficients on standardised features.
        bias: intercept (logit units).
        mean: ``[F]`` float32, feature means of the training split.
        scale: ``[F]`` float32 (> 0), feature standard deviations of the training split.
        features: ``"dd_dt"`` (F = d_draft + d, ``cat[draft_hidden, target_hidden]``) or ``"dt"`` (F = d).
        key: the artefact key it was loaded from (pair + mining + training config), for records.
    """

    weight: torch.Tensor
    bias: float
    mean: torch.Tensor
    scale: torch.Tensor
    features: str = "dd_dt"
    key: str = ""

    def __post_init__(self) -> None:
        if self.features not in FEATURES:
            raise ValueError(
                f"judge features={self.features!r} unknown; allowed: {', '.join(FEATURES)}"
            )
        F = self.weight.shape[-1]
        if self.weight.ndim != 1 or self.mean.shape != (F,) or self.scale.shape != (F,):
            raise ValueError(
                f"judge weight/mean/scale must be [F]; got {tuple(self.weight.shape)}, "
                f"{tuple(self.mean.shape)}, {tuple(self.scale.shape)}"
            )

    @classmethod
    def from_state(cls, state: Mapping[str, Any], key: str = "") -> JudgeHead:
        """Build from the dict saved by ``runners.autojudge.train`` (``weight``, ``bias``, ``mean``, ``scale``, ``features``)."""
        f32 = lambda v: torch.as_tensor(v, dtype=torch.float32).flatten()  # noqa: E731
        return cls(
            weight=f32(state["weight"]),
            bias=float(state["bias"]),
            mean=f32(state["mean"]),
            scale=f32(state["scale"]),
            features=str(state["features"]),
            key=key or str(state.get("key", "")),
        )

    @classmethod
    def load(cls, path: str | Path) -> JudgeHead:
        """Read a saved judge (``judge.pt``, tensors only: ``torch.load(weights_only=True)``)."""
        return cls.from_state(torch.load(Path(path), map_location="cpu", weights_only=True))

    def feature_rows(
        self, target_hidden: torch.Tensor, draft_hidden: torch.Tensor | None
    ) -> torch.Tensor:
        """Features at each draft position.

        Args:
            target_hidden: ``[B, L+1, d]`` float; rows 1..L sit at the draft tokens.
            draft_hidden: ``[B, L, d_draft]`` float (required for ``"dd_dt"``).

        Returns:
            ``[B, L, F]`` float32.
        """
        at_draft = target_hidden[:, 1:].float()  # [B, L, d]
        if self.features == "dt":
            return at_draft
        if draft_hidden is None:
            raise ValueError("judge features 'dd_dt' need draft_hidden [B, L, d_draft]; got None")
        return torch.cat([draft_hidden.float(), at_draft], dim=-1)  # [B, L, d_draft + d]

    def prob_important(
        self, target_hidden: torch.Tensor, draft_hidden: torch.Tensor | None
    ) -> torch.Tensor:
        """``p_important`` ``[B, L]`` float32 in [0, 1] = ``sigmoid(w . (x - mean) / scale + b)``.

        Raises:
            ValueError: the feature width differs from the head's F (wrong pair or feature set).
        """
        x = self.feature_rows(target_hidden, draft_hidden)  # [B, L, F]
        if x.shape[-1] != self.weight.shape[0]:
            raise ValueError(
                f"judge expects {self.weight.shape[0]} features ({self.features}); the round gives "
                f"{x.shape[-1]}: was it trained on another pair?"
            )
        z = ((x - self.mean) / self.scale) @ self.weight + self.bias  # [B, L]
        return torch.sigmoid(z)


def judge_accepts(head: JudgeHead, inputs: VerifyInputs, threshold: float) -> torch.Tensor:
    """Per-position Auto-Judge test: exact match with the target argmax, or ``p_important < threshold``.

    Paper: Garipov et al. 2025, Sec. 3.3 (``match | head_mask``); ``threshold >= 1`` accepts every
    mismatch (also where the sigmoid rounds to 1.0), ``threshold <= 0`` none (exact match only).

    Returns:
        ``[B, L]`` bool, before the prefix closure.
    """
    L = inputs.draft_token_ids.shape[1]
    match = inputs.draft_token_ids == inputs.target_logits[:, :L].argmax(dim=-1)  # [B, L]
    if threshold >= 1.0:
        return torch.ones_like(match)
    if threshold <= 0.0:
        return match
    if inputs.target_hidden is None:
        raise ValueError(
            "autojudge: target_hidden [B, L+1, d] is required (needs_hidden) but is None"
        )
    p = head.prob_important(inputs.target_hidden, inputs.draft_hidden)  # [B, L]
    return match | (p < threshold)


def check_threshold(name: str, threshold: Any) -> float:
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not 0.0 <= float(threshold) <= 1.0
    ):
        raise ValueError(
            f"{name}: threshold={threshold!r} is invalid; allowed values: a number in [0, 1]"
        )
    return float(threshold)


def as_head(judge: Any) -> JudgeHead:
    """A :class:`JudgeHead`, its saved state dict, or the path of a saved ``judge.pt``."""
    if isinstance(judge, JudgeHead):
        return judge
    if isinstance(judge, Mapping):
        return JudgeHead.from_state(judge)
    if isinstance(judge, (str, Path)):
        return JudgeHead.load(judge)
    raise ValueError(
        f"judge={type(judge).__name__} is invalid; allowed: a JudgeHead, its state dict or a judge.pt path"
    )


@CRITERIA.register("autojudge")
class AutoJudge:
    """Accept draft i iff it equals the target argmax at i, or the judge scores it unimportant.

    Paper: Garipov et al. 2025 (AutoJudge), Sec. 3.3; DropMatch Sec. 4.3 (Table 8 "Auto-Judge").

    Greedy only (T = 0), as the authors' decoding: ``temperature > 0`` raises. The next token is the target
    argmax at the first rejected position (the authors' correction), or the bonus argmax at L. No RNG.
    With a judge that scores every mismatch important (``p_important >= threshold``) the rule equals
    ``greedy_match``.

    Args:
        threshold: in [0, 1]; a mismatch is accepted iff ``p_important < threshold``.
        judge: a :class:`JudgeHead`, its state dict or a ``judge.pt`` path (loaded once, here).

    Attributes:
        name: ``"autojudge"``; needs_heads False; needs_draft_probs False; needs_hidden True.
    """

    name = "autojudge"
    needs_heads = False
    needs_draft_probs = False
    needs_hidden = True

    def __init__(self, threshold: float = 0.5, judge: Any = None) -> None:
        self.threshold = check_threshold(self.name, threshold)
        if judge is None:
            raise ValueError(
                f"{self.name}: judge is required (a trained judge head; see runners.autojudge.build)"
            )
        self.head = as_head(judge)
        self.judge_features = self.head.features

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round (greedy).

        Args:
            inputs: ``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``, ``target_hidden``
                ``[B, L+1, d]``, ``draft_hidden`` ``[B, L, d_draft]`` (features ``dd_dt``). Not mutated.
            trace: if True, ``trace = {"target_token_ids": [B, L], "p_important": [B, L]}``.

        Raises:
            ValueError: malformed inputs, missing hidden states, or ``temperature > 0``.
        """
        check_inputs(inputs, rule=self.name)
        if inputs.temperature != 0:
            raise ValueError(
                f"{self.name}: temperature={inputs.temperature} unsupported; allowed: 0 (greedy, as Auto-Judge)"
            )
        ok = judge_accepts(self.head, inputs, self.threshold)  # [B, L]
        return finish_round(
            ok, inputs.target_logits, 0.0, None, self._trace(inputs) if trace else None
        )

    def _trace(self, inputs: VerifyInputs) -> dict[str, torch.Tensor]:
        L = inputs.draft_token_ids.shape[1]
        out = {"target_token_ids": inputs.target_logits[:, :L].argmax(dim=-1)}
        if inputs.target_hidden is not None:
            out["p_important"] = self.head.prob_important(inputs.target_hidden, inputs.draft_hidden)
        return out

    def __repr__(self) -> str:
        return f"AutoJudge(threshold={self.threshold}, judge={self.head.key or self.head.features})"
