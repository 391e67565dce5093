"""The DropMatch decision of the working tree's ``criteria/`` against a git ref's, side by side in one process on
the same real rounds: not a test.

Exports ``criteria/`` at ``--ref`` (default HEAD) into a temporary package ``criteria_ref`` (its own imports renamed,
so its rules register in its own registry), loads the embedded pair in bf16 and decides the row-rounds that
``realpair_escape.py --cache DIR`` kept (``DIR/<dataset>-<n>-<batch>-<max_new>.pt``: the target's hidden states, the
drafts, the draft probabilities) in batches of ``--batch`` rows with both codes: the default profile's sparse
``dropmatch_js`` with the escape (greedy, K=5, p_drop=0.3, top-64; row i's masks from seed i). The two alternate,
which one goes first switching every batch round, for ``--reps`` passes. Per file it prints the decision's
milliseconds per batch round after the plain logits (what the round meter charges as ``rule_s``), the geometric
mean of the paired per-round ratios working tree / ref with a bootstrap 95% interval, and whether both made the same
decisions (accepted lengths and next tokens) at every round. The same code on both sides read 0.993 [0.971, 1.017]
(IFEval), 0.969 [0.923, 1.014] (GSM8K) and 1.006 [0.967, 1.052] (HumanEval, two passes) on a 2-vCPU AVX512 CPU
whose host was busy: the pairing resolves about 3-5% there. Cuts that win in isolation often lose inside the round
(cache and allocation effects), so measure a change to the decision here before re-decoding a table with it. Load the real pair only under the machine-wide lock:

    flock /tmp/dropmatch-realpair.lock env PYTHONPATH=$PWD DROPMATCH_THREADS=2 \\
        .venv/bin/python scripts/realpair_decision_ab.py --ref HEAD /tmp/escape_cache/ifeval-10-10-256.pt
"""

from __future__ import annotations

import argparse
import importlib
import io
import math
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from analysis.stats import mean_ci
from runners.backends.round_meter import RoundClock
from runners.backends.seeding import make_generator
from runners.models.loader import load_pair

REPO = Path(__file__).resolve().parents[1]


def export_criteria(ref: str, into: Path) -> None:
    """``criteria/`` at git ``ref`` as the package ``into/criteria_ref`` (``from criteria.x`` -> ``criteria_ref.x``).

    Raises:
        subprocess.CalledProcessError: ``ref`` is not a commit of this repository.
    """
    blob = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref, "criteria"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    (into / "criteria").rename(into / "criteria_ref")
    for f in (into / "criteria_ref").rglob("*.py"):
        text = re.sub(r"\b(from|import) criteria\.", r"\1 criteria_ref.", f.read_text())
        f.write_text(text)


def paired_ratio(new: list[float], old: list[float]) -> tuple[float, float, float]:
    """Geometric mean of ``new[i] / old[i]`` with its 95% interval: :func:`analysis.stats.mean_ci` of the log
    ratios (percentile bootstrap over the pairs), exponentiated."""
    est = mean_ci(np.log(np.asarray(new, dtype=float) / np.asarray(old, dtype=float)))
    return math.exp(est.value), math.exp(est.lo), math.exp(est.hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rounds", nargs="+", help="files realpair_escape.py --cache wrote")
    ap.add_argument("--ref", default="HEAD", help="the git ref whose criteria/ is the baseline")
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--reps", type=int, default=4)
    args = ap.parse_args()
    missing = [p for p in args.rounds if not os.path.isfile(p)]
    if missing:
        ap.error(
            f"rounds: no such file {', '.join(missing)} (write them with realpair_escape.py --cache DIR)"
        )
    if args.batch < 1 or args.reps < 1:
        ap.error(f"--batch={args.batch} --reps={args.reps}: both must be integers >= 1")
    tmp = tempfile.TemporaryDirectory()
    try:
        export_criteria(args.ref, Path(tmp.name))
    except subprocess.CalledProcessError as e:
        ap.error(f"--ref={args.ref!r}: git archive failed: {e.stderr.decode().strip()}")
    sys.path.insert(0, tmp.name)
    codes = {}
    for name, pkg in (("ref", "criteria_ref"), ("tree", "criteria")):
        importlib.import_module(f"{pkg}.rules")
        heads = importlib.import_module(f"{pkg}.dropout_heads")
        codes[name] = (
            heads,
            importlib.import_module(f"{pkg}.registry").CRITERIA.get("dropmatch_js")(),
            heads.HeadSpec(5, 0.3, top_n=64, escape=True),
            importlib.import_module(f"{pkg}.verify").verify_round,
        )
    cfg = OmegaConf.to_container(OmegaConf.load(REPO / "conf/pair/qwen25coder_0.5b_1.5b.yaml"))
    W = load_pair({**cfg, "dtype": "bfloat16"}).target.get_output_embeddings().weight
    B = args.batch
    for path in args.rounds:
        rounds = torch.load(path)
        batches = [
            tuple(torch.cat([r[k] for r in rounds[i : i + B]]) for k in range(3))
            for i in range(0, len(rounds) - B + 1, B)
        ]
        took = {"ref": [], "tree": []}
        out = {"ref": [], "tree": []}
        for rep in range(
            -1, args.reps
        ):  # pass -1 warms both codes up (buffers, first calls), untimed
            for i, (hidden, drafts, q) in enumerate(batches[:3] if rep < 0 else batches):
                order = ("ref", "tree") if (rep + i) % 2 == 0 else ("tree", "ref")
                for name in order:
                    heads, rule, spec, verify_round = codes[name]
                    clock = RoundClock(B)
                    res = verify_round(
                        hidden,
                        heads.LMHead(W),
                        drafts,
                        rule,
                        spec,
                        temperature=0.0,
                        generators=[make_generator(j, W.device) for j in range(B)],
                        draft_probs=q,
                        meter=clock,
                    )
                    clock.stop()
                    if rep < 0:
                        continue
                    took[name].append(clock.rule_s)
                    if rep == 0:
                        out[name].append((res.num_accepted, res.next_token_ids))
        ratio, lo, hi = paired_ratio(took["tree"], took["ref"])
        same = all(
            torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
            for a, b in zip(out["ref"], out["tree"])
        )
        n = len(took["ref"])
        print(
            f"{os.path.basename(path)}: {len(batches)} batch rounds x {args.reps}; ms per batch round after the "
            f"plain logits: {args.ref} {1e3 * sum(took['ref']) / n:.1f}, working tree "
            f"{1e3 * sum(took['tree']) / n:.1f}; tree/ref {ratio:.3f} [{lo:.3f}, {hi:.3f}] (paired, n={n}); "
            f"same decisions: {same}",
            flush=True,
        )
    tmp.cleanup()


if __name__ == "__main__":
    main()
