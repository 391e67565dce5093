"""Judge stored answers without decoding again.

    python -m runners.judging <run id | run dir | artefact> ... [--profile P] [overrides]
    python -m runners.judging table7 --profile default                    # the judge of conf/judging.yaml
    python -m runners.judging table7 judge=api                            # DROPMATCH_JUDGE_MODEL=gpt-4 ...
    python -m runners.judging table10 judge=local subset=calibration      # the calibration subset only
    python -m runners.judging --check judge=api judge.max_tokens=512      # validate the judge config only

Selectors: a table or figure name (the runs it shows: ``analysis`` selects them, e.g. ``table7``), a run id, a
run directory, or another artefact name (every run whose config says ``artefact: <name>``, as ``runners.rescore``);
``--profile`` keeps the runs of one profile (default: any). Every complete decode run whose
dataset has a protocol in ``conf/judging.yaml`` gets a judging run (:mod:`runners.judging.measurement`), which is
skipped when finished and resumed when not. Overrides are Hydra overrides of ``conf/judging.yaml`` and the judge
group ``conf/judge/`` (``judge=local|api``, ``judge.max_tokens=...``, ``protocol.mt_bench=pairwise``,
``baseline=sd|ar|reference``, ``subset=all|calibration``, ``calibration_n=10``). Without ``judge=``: ``api`` when
``DROPMATCH_JUDGE_MODEL`` (or ``OPENAI_MODEL``) is set, else ``local``.

``--check`` validates the overrides (and the ``--calibrate-with`` judge) and exits, selecting and judging
nothing: ``./reproduce.sh table7`` / ``table10`` run it before their decoding sweep, so a bad judge override is
refused before anything decodes.

``--calibrate-with local`` also judges the calibration subset of every selected run with that second judge. At the
end, for every judged run that two judges have judged, their agreement on the calibration subset is printed
(:mod:`runners.judging.agreement`).

Exit status: 0 every selected run judged completely; 1 some judging incomplete (failed calls: rerun to retry) or
a baseline missing; 2 bad arguments, an invalid judge config, or no run selected.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from analysis.artefact import Profile, profile_arg
from analysis.load import load_runs
from analysis.render import ARTEFACTS, module
from runners.config.errors import ConfigError
from runners.judging.agreement import describe, pairs_for
from runners.judging.judges import ENV_MODEL, first_env
from runners.judging.measurement import JudgeMeasurement
from runners.judging.protocols import PROTOCOLS
from runners.judging.runs import (
    SUBSETS,
    find_baseline,
    is_decode,
    judge_block,
    judge_config,
    protocol_of,
)
from runners.measure.base import MissingRecordsError, run_resolved
from runners.paths import REPO_ROOT, directory_env_errors, results_dir
from runners.records.run_id import run_id_of
from runners.rescore import select_runs
from runners.sweep.console import console

logger = logging.getLogger(__name__)


def default_judge(overrides: Sequence[str]) -> list[str]:
    """``overrides`` plus ``judge=api`` or ``judge=local`` when they do not choose a judge (module docstring)."""
    if any(o.split("=", 1)[0].lstrip("+~") == "judge" for o in overrides):
        return list(overrides)
    return [f"judge={'api' if first_env(ENV_MODEL) else 'local'}", *overrides]


def judge_options() -> list[str]:
    """The judge group's options: the stems of ``conf/judge/*.yaml``, sorted."""
    return sorted(f.stem for f in (REPO_ROOT / "conf" / "judge").glob("*.yaml"))


def compose_judging(overrides: Sequence[str]) -> dict:
    """``conf/judging.yaml`` with the judge group and ``overrides`` applied, as a plain dict.
    Raises:
        runners.config.errors.ConfigError: a ``judge=`` option with no ``conf/judge/`` file (named with the
            allowed ones), or an override Hydra refuses (unknown key).
    """
    for o in overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+~") == "judge" and value not in judge_options():
            raise ConfigError(f"judge={value!r} is unknown; allowed: {', '.join(judge_options())}")
    try:
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
            cfg = compose("judging", overrides=list(overrides))
        return OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(f"judging overrides {list(overrides)}: {e}") from None


def check_judging(judging: dict) -> None:
    """The judging settings of ``conf/judging.yaml`` (protocols, baseline, subset), before anything runs.
    Raises:
        runners.config.errors.ConfigError: a field outside its allowed values, named with them.
    """
    for ds, proto in (judging.get("protocol") or {}).items():
        if proto not in PROTOCOLS:
            raise ConfigError(
                f"protocol.{ds}={proto!r} is unknown; allowed: {', '.join(PROTOCOLS.names())}"
            )
    b = judging.get("baseline")
    if not isinstance(b, str) or not b:
        raise ConfigError(
            f"baseline={b!r} is invalid; allowed: a method name (sd, ar, ...) or reference"
        )
    if judging.get("subset") not in SUBSETS:
        raise ConfigError(
            f"subset={judging.get('subset')!r} is invalid; allowed: {', '.join(SUBSETS)}"
        )
    n = judging.get("calibration_n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"calibration_n={n!r} is invalid; allowed: an integer >= 1")


def artefact_runs(name: str, root: Path, profile: str | None) -> list[Path]:
    """The run directories artefact ``name`` tabulates (its ``select`` in ``analysis/``), for ``profile``."""
    runs = load_runs(root)
    if runs.empty:
        return []
    selected = module(name).select(runs, Profile.load(profile or "any"))
    return [Path(d) for d in selected["run_dir"]] if not selected.empty else []


def select_sources(
    selectors: Sequence[str], root: Path, profile: str | None, judging: dict
) -> list[tuple[dict, dict, Path]]:
    """``(config, summary, dir)`` of the complete decode runs the selectors name whose dataset has a protocol.
    A selector that names a table or figure of ``analysis/render.py`` selects the runs that artefact shows (its
    ``select``: e.g. ``table7`` = the EAGLE-3 runs of its three sets, whichever sweep made them); otherwise as
    ``runners.rescore``: a run id, a run directory, or the runs whose config says ``artefact: <name>``.

    Raises:
        LookupError: a selector matches no run.
    """
    dirs: list[Path] = []
    for sel in selectors:
        hits = artefact_runs(sel, root, profile) if sel in ARTEFACTS else select_runs([sel], root)
        if not hits:
            raise LookupError(f"{sel!r}: no runs of that artefact under {root}")
        dirs += [h for h in hits if h not in dirs]
    out = []
    for d in dirs:
        try:
            cfg = json.loads((d / "config.json").read_text())
            summary = json.loads((d / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        if not is_decode(cfg) or not summary.get("complete"):
            continue
        if profile not in (None, "any") and (cfg.get("profile") or {}).get("name") != profile:
            continue
        if protocol_of(cfg, judging) is None:
            continue
        out.append((cfg, summary, d))
    return out


def result_line(summary: dict) -> str:
    """One line per judged run: the protocol's number, n, failures."""
    proto = summary.get("judge/protocol")
    if proto == "single":
        v, se, what = summary.get("judge/score"), summary.get("judge/score_stderr"), "mean rating"
    else:
        v = summary.get("judge/win_rate")
        se = summary.get("judge/standard_error", summary.get("judge/win_rate_stderr"))
        what = "win rate %"
    num = (
        "n/a"
        if v is None
        else f"{v:.2f}" + ("" if se is None or se != se else f" +- {se:.2f} (SE)")
    )
    return (
        f"{proto}: {what} {num}; scored {summary.get('judge/num_scored')}/{summary.get('num_expected')}, "
        f"parse failures {summary.get('judge/num_parse_failures')}, call failures "
        f"{summary.get('judge/num_call_failures')}, calls {summary.get('judge/num_calls')} "
        f"(+{summary.get('judge/num_reused_calls')} reused)"
    )


def judge_runs(
    sources: Sequence[tuple[dict, dict, Path]],
    judging: dict,
    judge: dict,
    root: Path,
    log: Callable[[str], None],
) -> int:
    """One judging run per source run with ``judge`` (:func:`runners.judging.runs.judge_block`); exit status."""
    status = 0
    for cfg, _, d in sources:
        protocol = protocol_of(cfg, judging)
        baseline = None
        if PROTOCOLS.get(protocol).needs_baseline:
            b = str(judging.get("baseline"))
            if b == "reference":
                baseline = {"method": "reference"}
            else:
                bid = find_baseline(cfg, b, root)
                if bid is None:
                    logger.error(
                        "[judge] run %s (%s, %s): no complete method=%s run with the same setting to compare "
                        "with (protocol %s); decode it first (add method=%s to the sweep) or pass baseline=reference",
                        d.name,
                        cfg["dataset"]["name"],
                        cfg["method"]["name"],
                        b,
                        protocol,
                        b,
                    )
                    status = 1
                    continue
                baseline = {"method": b, "run_id": bid}
        c = judge_config(
            cfg,
            d.name,
            protocol,
            judge,
            baseline,
            subset=str(judging.get("subset", "all")),
            calibration_n=int(judging.get("calibration_n", 10)),
        )
        try:
            JudgeMeasurement.check(c)
            summary = run_resolved(c, log)
        except (ConfigError, MissingRecordsError) as e:
            logger.error("[judge] run %s: %s", d.name, e)
            status = max(status, 2 if not isinstance(e, MissingRecordsError) else 1)
            continue
        if summary.get("running_elsewhere"):
            continue
        log(
            f"[judge] run {run_id_of(c)} judged {d.name} ({cfg['dataset']['name']}, {cfg['method']['name']}, "
            f"L={cfg.get('L')}): {result_line(summary)}"
        )
        if not summary.get("complete"):
            status = max(status, 1)
    return status


def check_overrides(overrides: Sequence[str], calibrate_with: str | None = None) -> tuple:
    """The judging settings, the judge block and the ``calibrate_with`` judge's (settings, block) or None, all
    validated (nothing selected, loaded or asked).

    Raises:
        runners.config.errors.ConfigError: an unknown judge or key, or a field outside its allowed values.
    """
    judging = compose_judging(default_judge(overrides))
    check_judging(judging)
    judge = judge_block(judging["judge"])
    if not calibrate_with:
        return judging, judge, None
    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~").split(".")[0] != "judge"]
    second = compose_judging([f"judge={calibrate_with}", *rest, "subset=calibration"])
    return judging, judge, (second, judge_block(second["judge"]))


def judge_selected(
    selectors: Sequence[str],
    overrides: Sequence[str] = (),
    profile: str | None = None,
    log: Callable[[str], None] = logger.info,
    calibrate_with: str | None = None,
) -> int:
    """Judge the selected runs (module docstring); returns the exit status.
    ``calibrate_with``: another judge (``conf/judge/<name>``) that also judges the calibration subset of every
    selected run, so the two judges' agreement is printed.
    """
    root = results_dir() / "runs"
    try:
        judging, judge, calibration = check_overrides(overrides, calibrate_with)
    except ConfigError as e:
        logger.error("[judge] %s", e)
        return 2
    try:
        sources = select_sources(selectors, root, profile, judging)
    except LookupError as e:
        logger.error("[judge] %s", e)
        return 2
    if not sources:
        logger.error(
            "[judge] no complete decode run of %s%s on a judged dataset (%s)",
            ", ".join(selectors),
            f" with profile={profile}" if profile not in (None, "any") else "",
            ", ".join(sorted(judging.get("protocol") or {})),
        )
        return 2
    status = judge_runs(sources, judging, judge, root, log)
    if calibration is not None:
        second, second_judge = calibration
        if second_judge["identity"] == judge["identity"]:
            log(f"[judge] --calibrate-with {calibrate_with}: the same judge; nothing to compare")
        else:
            log(f"[judge] calibration subset with judge={calibrate_with} (agreement below)")
            status = max(status, judge_runs(sources, second, second_judge, root, log))
    for p in pairs_for(
        root, [d.name for _, _, d in sources], int(judging.get("calibration_n", 10))
    ):
        log(
            f"[judge] agreement on the calibration subset of run {p['source_run_id']} ({p['protocol']}): "
            f"{p['judges'][0]} vs {p['judges'][1]}: {describe(p['agreement'])}"
        )
    return status


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m runners.judging",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument(
        "args", nargs="*", help="run ids / run dirs / artefact names, then key=value overrides"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="validate the overrides (and --calibrate-with) and exit: 0 valid, 2 not; nothing is judged",
    )
    p.add_argument(
        "--profile", default=None, type=profile_arg, help="only runs of this profile ('any': all)"
    )
    p.add_argument(
        "--calibrate-with",
        default=None,
        metavar="JUDGE",
        help="also judge the calibration subset with this judge (conf/judge/JUDGE.yaml) and print the agreement",
    )
    # intermixed: overrides may follow --profile (reproduce.sh passes them last)
    a = p.parse_intermixed_args(list(argv) if argv is not None else None)
    console()
    logging.getLogger("httpx").setLevel(
        logging.WARNING
    )  # one INFO line per judge request otherwise
    overrides = [x for x in a.args if "=" in x]
    selectors = [x for x in a.args if "=" not in x]
    bad_dirs = (
        directory_env_errors()
    )  # as every entry point: a results path naming a file is refused here
    if bad_dirs:
        logger.error("config error: %s", bad_dirs[0])
        return 2
    if a.check:
        try:
            check_overrides(overrides, a.calibrate_with)
        except ConfigError as e:
            logger.error("[judge] %s", e)
            return 2
        return 0
    if not selectors:
        logger.error("[judge] name at least one run id, run directory or artefact")
        return 2
    return judge_selected(
        selectors, overrides, a.profile, log=logger.info, calibrate_with=a.calibrate_with
    )


if __name__ == "__main__":
    sys.exit(main())
