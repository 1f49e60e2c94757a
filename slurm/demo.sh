#!/usr/bin/env bash
# `make demo`: the whole system on this machine. Starts the local Slurm cluster, runs
# `lyasched serve` in the background (2 s slots), submits example DDP jobs with `lyasub` as the
# test user (one of them wants 8 GPUs: two nodes), waits until all have finished, shows
# `lyastat`, and stops the service. Root (the cluster needs it). docs/service.md.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-$REPO/.venv/bin/python}
[[ -x $PY ]] || PY=python3
USER_=${LYASCHED_DEMO_USER:-lyatest}
DIR=$(mktemp -d /tmp/lyasched-demo.XXXXXX)
chmod 755 "$DIR"
mkdir -m 1777 "$DIR/jobs"
BIN=$(dirname "$PY")   # the venv (or prefix) whose lyasched, lyasub and lyastat the demo runs
[[ -x $BIN/lyasched ]] || BIN=$(dirname "$(readlink -f "$(command -v lyasched)")")
serve_pid=

stop() {
  if [[ -n $serve_pid ]] && kill -0 "$serve_pid" 2>/dev/null; then
    kill -TERM "$serve_pid"; wait "$serve_pid" || true
    echo "demo: service stopped (log: $DIR/serve.log)"
  fi
}
trap stop EXIT

PYTHON=$PY "$REPO/slurm/cluster" up

cat >"$DIR/config.toml" <<EOF
[service]
slot_seconds = 2
release_grace = 30
db = "$DIR/lyasched.db"
users = ["$USER_"]
[policy]
name = "lyapunov"
EOF
"$BIN/lyasched" serve --config "$DIR/config.toml" >"$DIR/serve.log" 2>&1 &
serve_pid=$!
echo "demo: lyasched serve running (pid $serve_pid, db $DIR/lyasched.db)"

submit() {  # submit NAME ARGS... -> job id
  local name=$1; shift
  # from a directory the user can write, as a user would: the job reports its step times there
  local lyasub; lyasub=$(cd "$BIN" && pwd)/lyasub
  cd "$DIR/jobs" && runuser -u "$USER_" -- "$lyasub" --parsable --no-profile --db "$DIR/jobs/lyasub.db" --time 10 \
    --job-name "$name" --output "$DIR/jobs/%j.out" --model mlp "$@" \
    -- "$REPO/jobscripts/train_example.py" --model mlp | tail -n 1
}
# Side by side (each lyasub costs the model in a fresh Python), so the jobs compete for GPUs.
pids=()
for i in 1 2 3 4 5; do
  submit "small$i" --global-batch 8 --iterations 5 --max-gpus 2 >"$DIR/jobs/id.$i" & pids+=($!)
done
submit big --global-batch 16 --iterations 5 --min-gpus 8 --max-gpus 8 >"$DIR/jobs/id.6" & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done  # not a bare `wait`: that would wait for the service too
ids=()
for i in 1 2 3 4 5 6; do ids+=("$(cat "$DIR/jobs/id.$i")"); done
echo "demo: submitted ${ids[*]} as $USER_"

list=$(IFS=,; echo "${ids[*]}")
for _ in $(seq 300); do
  left=$(squeue -h -t PENDING,RUNNING,CONFIGURING,COMPLETING -j "$list" -o %i | wc -l)
  ((left == 0)) && break
  sleep 1
done
sleep 3  # one more slot records the last observed run times
echo
squeue -h -t all -j "$list" -o '%.6i %.9u %.10j %.10T %.3D %N'
echo
runuser -u "$USER_" -- "$BIN/lyastat" --db "$DIR/lyasched.db"
echo
"$BIN/lyastat" --db "$DIR/lyasched.db" --queue
