#!/usr/bin/env bash
# Process 1 of every container of the docker test cluster (docker/cluster starts them; mounted
# read-only from the working tree). LYASCHED_ROLE says which: ctl | nodeK | login | svc.
# Common: users (same uids as on the host), the cluster's munge key, /etc/slurm from
# /etc/lyasched-cluster (rendered by docker/render.py), munged. Then the role's daemons, in the
# background; this script waits and stops them on SIGTERM (docker stop).
set -euo pipefail
ROLE=${LYASCHED_ROLE:?}
CONF=/etc/lyasched-cluster
STATE=/var/lib/lyasched-cluster
pids=()

log() { printf '%s init[%s]: %s\n' "$(date +%T)" "$ROLE" "$*"; }

stop() {
  log "stopping"
  ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null || true
  wait || true
  exit 0
}
trap stop TERM INT

while read -r user uid gid kind; do
  getent group "$user" >/dev/null || groupadd -g "$gid" "$user"
  id "$user" >/dev/null 2>&1 || useradd -M -d "/home/$user" -u "$uid" -g "$gid" -s /bin/bash "$user"
done <"$CONF/users"

# Users run the jobs' python and scripts from the working tree, mounted at its host path (under
# /root, say): let them traverse the directories above it, in this container only.
d=$(dirname "$LYASCHED_REPO")
while [[ $d != / ]]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done

mkdir -p /etc/slurm "$STATE"/{ctld,run,log,spool} /run/munge /var/log/munge /var/lib/munge
install -m 644 "$CONF/slurm.conf" "$CONF/gres.conf" "$CONF/job_submit.lua" "$CONF/lyasched-managed.conf" /etc/slurm/
install -o munge -g munge -m 400 "$CONF/munge.key" /etc/munge/munge.key
chown munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
runuser -u munge -- /usr/sbin/munged
log "munged started"

start() { "$@" & pids+=($!); }

case $ROLE in
  ctl)
    install -m 600 "$CONF/slurmdbd.conf" /etc/slurm/slurmdbd.conf
    if [[ ! -d /var/lib/mysql/mysql ]]; then
      mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    fi
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
    start mariadbd --user=mysql --datadir=/var/lib/mysql --skip-networking=0 --bind-address=127.0.0.1
    for _ in $(seq 120); do mariadb -e 'select 1' >/dev/null 2>&1 && break; sleep 0.5; done
    mariadb -e "create database if not exists slurm_acct_db;
                create user if not exists 'slurm'@'localhost' identified by 'lyasched';
                grant all on slurm_acct_db.* to 'slurm'@'localhost';"
    start slurmdbd -D
    for _ in $(seq 120); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.5; done
    sacctmgr -i -Q add cluster lyatest >/dev/null 2>&1 || true
    # The service account: a Slurm operator (may release/update other users' jobs); job_submit.lua
    # lists its uid in PRIVILEGED_UIDS (docker/render.py).
    sacctmgr -i -Q add user lyasched account=root adminlevel=Operator >/dev/null 2>&1 || true
    # The test users' associations (AccountingStorageEnforce=associations: no association, no job).
    sacctmgr -i -Q add account research description=tests organization=lyasched >/dev/null 2>&1 || true
    sacctmgr -i -Q add user lyatest,lyaother account=research >/dev/null 2>&1 || true
    start slurmctld -D
    log "mariadb, slurmdbd, slurmctld started"
    ;;
  node*)
    mkdir -p /dev/lyafake "$STATE/spool/$ROLE"
    for ((i = 0; i < ${LYASCHED_GPUS:-4}; i++)); do
      [[ -c /dev/lyafake/$ROLE-gpu$i ]] || mknod -m 666 "/dev/lyafake/$ROLE-gpu$i" c 240 "$i"
    done
    start slurmd -D -N "$ROLE"
    log "slurmd started"
    ;;
  login | svc) ;;
  *) log "unknown role"; exit 2 ;;
esac

# A daemon that dies (a test kills it, say) is not restarted: the container keeps running so that
# its logs can be read; `docker restart` brings everything back.
while true; do
  sleep 3600 &
  wait $! || true
done
