#!/usr/bin/env bash
# Stop the test cluster started by tests/slurm/start_slurm.sh: cancel its jobs and wait for them to
# finish, stop its daemons (by their pid files), then end any job process left behind (a slurmstepd, or a
# process with SLURM_JOB_ID, whose environment names this cluster's slurm.conf).
#   tests/slurm/stop_slurm.sh [--purge]      --purge also deletes the directory (state, database, logs)
set -uo pipefail
DIR=${DROPMATCH_SLURM_DIR:-/tmp/dropmatch-slurm}
CONF=$DIR/etc/slurm.conf
export PATH=$PATH:/usr/sbin

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
stop_pid() {  # SIGTERM, wait up to 20 s, then SIGKILL
  local pid=$1
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 80); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
}

if alive "$DIR/run/slurmctld.pid"; then
  jobs=$(SLURM_CONF=$CONF timeout 10 squeue -h -o %A 2>/dev/null | sort -u)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086
    SLURM_CONF=$CONF scancel $jobs 2>/dev/null
    for _ in $(seq 120); do  # KillWait is 5 s; completing steps report back to slurmd
      [ -z "$(SLURM_CONF=$CONF timeout 10 squeue -h -o %A 2>/dev/null)" ] && break
      sleep 0.25
    done
  fi
fi

for pidfile in run/slurmd.pid run/slurmctld.pid run/slurmdbd.pid mysql/mariadbd.pid munge/munged.pid; do
  f=$DIR/$pidfile
  [ -f "$f" ] || continue
  stop_pid "$(cat "$f")"
  rm -f "$f"
done

for proc in /proc/[0-9]*; do  # job processes of this cluster that outlived its slurmd
  pid=${proc#/proc/}
  [ "$pid" = $$ ] && continue
  env=$( { tr '\0' '\n' < "$proc/environ"; } 2>/dev/null ) || continue
  grep -qx "SLURM_CONF=$CONF" <<< "$env" || continue
  comm=$(cat "$proc/comm" 2>/dev/null)
  if [ "$comm" = slurmstepd ] || grep -q "^SLURM_JOB_ID=" <<< "$env"; then
    stop_pid "$pid"
  fi
done

if [ "${1:-}" = "--purge" ]; then rm -rf "$DIR"; fi
echo "stop_slurm: stopped ($DIR)" >&2
