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
wait_done() {  # wait_done ID,ID,...: until none is pending or running (at most 5 min)
  for _ in $(seq 300); do
    (( $(squeue -h -t PENDING,RUNNING,CONFIGURING,COMPLETING -j "$1" -o %i | wc -l) == 0 )) && return 0
    sleep 1
  done
}
batch() {  # batch PREFIX: five small jobs and one of 8 GPUs (two nodes), side by side; waits for them
  local pids=() ids=() i
  # side by side (each lyasub costs the model in a fresh Python), so the jobs compete for GPUs
  for i in 1 2 3 4 5; do
    submit "$1small$i" --global-batch 8 --iterations 5 --max-gpus 2 >"$DIR/jobs/$1id.$i" & pids+=($!)
  done
  submit "$1big" --global-batch 16 --iterations 5 --min-gpus 8 --max-gpus 8 >"$DIR/jobs/$1id.6" & pids+=($!)
  for i in "${pids[@]}"; do wait "$i"; done  # not a bare `wait`: that would wait for the service too
  for i in 1 2 3 4 5 6; do ids+=("$(cat "$DIR/jobs/$1id.$i")"); done
  echo "demo: submitted ${ids[*]} as $USER_ ($1 batch)"
  list=$(IFS=,; echo "${ids[*]}")
  wait_done "$list"
}
# The first batch teaches the service what launching costs here (srun, torchrun, imports: tens of
# seconds on this machine, against milliseconds of training per step) and the model's step times
# from the jobs' reports; the second batch, the same jobs, is predicted with what was learned.
batch a-
for _ in $(seq 30); do  # the slot after the last job ended has learned from its report
  "$BIN/lyastat" --db "$DIR/lyasched.db" --queue --json 2>/dev/null \
    | "$PY" -c 'import json, sys; sys.exit(0 if json.load(sys.stdin).get("startup") else 1)' && break
  sleep 1
done
sleep 3
batch b-
sleep 3  # one more slot records the last observed run times
echo
squeue -h -t all -j "$list" -o '%.6i %.9u %.10j %.10T %.3D %N'
echo
runuser -u "$USER_" -- "$BIN/lyastat" --db "$DIR/lyasched.db"
echo "(a-*: predicted before any job had reported, so without the start-up term; b-*: the same jobs, predicted with what a-* taught. The start-up term is measured under the load of the time: a job that starts alone starts faster.)"
echo
"$BIN/lyastat" --db "$DIR/lyasched.db" --queue
