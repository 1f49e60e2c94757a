#!/usr/bin/env bash
# One device session (issue 12): profile the example models on the GPU with lyasched's profiler,
# run jobscripts/train_example.py on CUDA (with a checkpoint and a resume), and, on the same
# machine's otherwise idle CPU cores, measure DDP/gloo profiles with up to 8 ranks that do not
# share cores (the 2-core development machine can only measure 3-4 ranks sharing 2 cores).
# Writes under ${OUT:-./gpu-out}. Run from the repository root:  bash benchmarks/gpu_session.sh
set -u
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
T0=$(date +%s)
{
  date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nproc; $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} > "$OUT/env.txt" 2>&1
# CPU part in the background on cores 0-11, one model at a time (a partial run keeps what finished)
(
  mkdir -p /tmp/ddp
  for m in mobilenet vgg transformer recsys mlp resnet mlp-large; do
    [ $(( $(date +%s) - T0 )) -gt 230 ] && { echo "ddp: stop before $m (time)"; break; }
    timeout 150 taskset -c 0-11 $PY benchmarks/measure_ddp_profiles.py --out /tmp/ddp --models $m \
      --max-procs 8 --repeats 1 --raw /tmp/ddp/raw-$m.csv || echo "ddp $m: exit $?"
  done
  tar czf "$OUT/ddp.tgz" -C /tmp ddp
  echo "ddp part done after $(( $(date +%s) - T0 )) s"
) > "$OUT/ddp.log" 2>&1 &
DDP=$!
# GPU part on cores 14-15
taskset -c 14,15 $PY benchmarks/gpu_profiles.py --out "$OUT/gpu_profiles.json" > "$OUT/gpu_table.md" 2> "$OUT/gpu.log"
echo "gpu profiles exit $? after $(( $(date +%s) - T0 )) s" >> "$OUT/gpu.log"
{
  for m in mlp transformer; do
    ck=/tmp/ck-$m; rm -rf $ck
    taskset -c 14,15 $PY jobscripts/train_example.py --device cuda --model $m --batch-per-gpu 64 --iterations 60 --json
    taskset -c 14,15 $PY jobscripts/train_example.py --device cuda --model $m --batch-per-gpu 64 --iterations 30 \
      --checkpoint-dir $ck --checkpoint-every 30 --json
    ls -la $ck
    taskset -c 14,15 $PY jobscripts/train_example.py --device cuda --model $m --batch-per-gpu 64 --iterations 60 \
      --checkpoint-dir $ck --json
  done
  taskset -c 14,15 torchrun --standalone --nproc-per-node 1 jobscripts/train_example.py --device cuda \
    --model resnet --batch-per-gpu 128 --iterations 40 --json
} > "$OUT/train.log" 2>&1
echo "train exit $? after $(( $(date +%s) - T0 )) s" >> "$OUT/train.log"
wait $DDP
echo "all done after $(( $(date +%s) - T0 )) s"
