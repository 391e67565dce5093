#!/usr/bin/env bash
# Start a single-node Slurm cluster on this machine for the Slurm tests (tests/sweeps/test_sw_slurm.py):
# munged, MariaDB + slurmdbd (so `sacct` works, as submitit needs), slurmctld and slurmd, all with their
# state, sockets, logs and ports under one directory. Idempotent: a cluster already up is reused.
#
#   tests/slurm/start_slurm.sh            # prints `export SLURM_CONF=...`; also written to $DIR/env.sh
#   source /tmp/dropmatch-slurm/env.sh && sinfo && sbatch --wrap hostname
#   tests/slurm/stop_slurm.sh [--purge]
#
# Needs root (the daemons run as root, jobs too) and Debian/Ubuntu packages:
#   apt-get install -y slurm-wlm munge slurmdbd mariadb-server
# Without slurmdbd/mariadb-server it starts without accounting: jobs run, but `sacct` fails, so submitit
# cannot see a job that Slurm killed (its sweep then waits); $DIR/accounting says which mode is up.
# Environment: DROPMATCH_SLURM_DIR (default /tmp/dropmatch-slurm), DROPMATCH_SLURM_PORT (first of four
# ports, default 16817), DROPMATCH_SLURM_CPUS (default 2), DROPMATCH_SLURM_MEM_MB (default 80% of RAM),
# DROPMATCH_SLURM_ACCOUNTING (slurmdbd, the default when installed, or none).
set -euo pipefail

DIR=${DROPMATCH_SLURM_DIR:-/tmp/dropmatch-slurm}
PORT=${DROPMATCH_SLURM_PORT:-16817}
CPUS=${DROPMATCH_SLURM_CPUS:-2}
HOST=$(hostname -s)
MEM_MB=${DROPMATCH_SLURM_MEM_MB:-$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)}
CONF=$DIR/etc/slurm.conf
export SLURM_CONF=$CONF
SOCK=$DIR/munge/munge.socket.2
DBSOCK=$DIR/mysql/mysqld.sock

die() { echo "start_slurm: $*" >&2; exit 1; }
log() { echo "start_slurm: $*" >&2; }
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local n=$1 what=$2; local end=$((SECONDS + n)); shift 2
  while [ $SECONDS -lt $end ]; do timeout 10 "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  die "$what did not come up within ${n}s (logs: $DIR/log)"
}
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
node_state() { sinfo -h -n "$HOST" -o %T 2>/dev/null | head -1; }

[ "$(id -u)" = 0 ] || die "needs root (slurmd runs jobs as their user; this test cluster runs everything as root)"
export PATH=$PATH:/usr/sbin
for b in munged munge unmunge slurmctld slurmd sinfo sbatch scontrol; do
  command -v "$b" >/dev/null || die "$b not found; apt-get install -y slurm-wlm munge (+ slurmdbd mariadb-server for sacct)"
done
ACCOUNTING=${DROPMATCH_SLURM_ACCOUNTING:-slurmdbd}   # or none
[ $ACCOUNTING = slurmdbd ] && for b in slurmdbd mariadbd mariadb-install-db mariadb sacctmgr; do
  command -v "$b" >/dev/null || ACCOUNTING=none
done
[ $ACCOUNTING = none ] && log "starting without accounting (no slurmdbd/mariadb-server, or DROPMATCH_SLURM_ACCOUNTING=none): sacct will not work"

if alive "$DIR/run/slurmctld.pid" && alive "$DIR/run/slurmd.pid" && [ "$(node_state)" = idle ]; then
  log "reusing the cluster in $DIR"
  echo "export SLURM_CONF=$CONF"
  exit 0
fi

t0=$SECONDS
mkdir -p "$DIR"/{etc,munge,mysql,state,spool,run,log}
chmod 700 "$DIR/munge"

# -- munge ---------------------------------------------------------------------------------------
if [ ! -s "$DIR/munge/munge.key" ]; then
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$DIR/munge/munge.key"
fi
if ! alive "$DIR/munge/munged.pid"; then
  munged --force --key-file="$DIR/munge/munge.key" --socket="$SOCK" --pid-file="$DIR/munge/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" --num-threads=10
fi
wait_for 10 munged bash -c "munge -S '$SOCK' -n | unmunge -S '$SOCK'"

# -- configuration -------------------------------------------------------------------------------
: > "$DIR/etc/plugstack.conf"
cat > "$CONF" <<CONF
# Single-node test cluster written by tests/slurm/start_slurm.sh
ClusterName=dropmatch
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
PlugStackConfig=$DIR/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SlurmdParameters=config_overrides
$(if [ $ACCOUNTING = slurmdbd ]; then
  echo "AccountingStorageType=accounting_storage/slurmdbd"
  echo "AccountingStorageHost=localhost"
  echo "AccountingStoragePort=$((PORT + 2))"
  echo "AccountingStoragePass=$SOCK"
else
  echo "AccountingStorageType=accounting_storage/none"
fi)
JobCompType=jobcomp/none
ReturnToService=2
KillWait=5
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
Waittime=0
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$DIR/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$SOCK
DbdHost=localhost
DbdPort=$((PORT + 2))
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$((PORT + 3))
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
CONF
chmod 600 "$DIR/etc/slurmdbd.conf"

# -- MariaDB + slurmdbd (job accounting: sacct) ----------------------------------------------------
if [ $ACCOUNTING = slurmdbd ]; then
if [ ! -d "$DIR/mysql/data/mysql" ]; then
  mariadb-install-db --no-defaults --datadir="$DIR/mysql/data" --user=root --auth-root-authentication-method=normal \
    --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed ($DIR/log/mariadb-install.log)"
fi
if ! alive "$DIR/mysql/mariadbd.pid"; then
  (mariadbd --no-defaults --user=root --datadir="$DIR/mysql/data" --socket="$DBSOCK" --port=$((PORT + 3)) \
     --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$DIR/mysql/mariadbd.pid" \
     --innodb-buffer-pool-size=32M --performance-schema=OFF --innodb-lock-wait-timeout=900 \
     --log-error="$DIR/log/mariadbd.log" </dev/null >/dev/null 2>&1 &)
fi
wait_for 60 mariadbd mariadb --no-defaults -S "$DBSOCK" -uroot -e "select 1"
mariadb --no-defaults -S "$DBSOCK" -uroot -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
alive "$DIR/run/slurmdbd.pid" || slurmdbd
wait_for 30 slurmdbd sacctmgr -n list cluster
sacctmgr -n list cluster format=cluster | grep -qw dropmatch || sacctmgr -i add cluster dropmatch >/dev/null
fi
echo $ACCOUNTING > "$DIR/accounting"

# -- slurmctld + slurmd --------------------------------------------------------------------------
alive "$DIR/run/slurmctld.pid" || slurmctld
wait_for 30 slurmctld scontrol ping
alive "$DIR/run/slurmd.pid" || slurmd -N "$HOST"
for _ in $(seq 120); do
  st=$(node_state)
  case $st in
    idle) break ;;
    down*|drain*|fail*) scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 0.25
done
[ "$(node_state)" = idle ] || die "node $HOST is '$(node_state)', not idle (logs: $DIR/log)"

echo "export SLURM_CONF=$CONF" > "$DIR/env.sh"
echo "export PATH=\$PATH:/usr/sbin" >> "$DIR/env.sh"
log "cluster up in $((SECONDS - t0)) s: $(sinfo -h -o '%P %a %D %T %c CPUs %m MB' | head -1)"
echo "export SLURM_CONF=$CONF"
