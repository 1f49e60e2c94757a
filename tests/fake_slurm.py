#!/usr/bin/env python3
"""A fake of the Slurm CLI tools lyasub calls, for unit tests only (tests/test_lyasub.py).

Installed on PATH as sbatch, squeue, scontrol and scancel (symlinks to this file). Every call
is appended to $FAKE_SLURM_DIR/calls.jsonl; jobs live in $FAKE_SLURM_DIR/jobs.json. Knobs
(environment): FAKE_NO_PLUGIN=1 (no job_submit/lua), FAKE_SBATCH_FAIL=1 (sbatch fails, nothing
submitted), FAKE_SBATCH_LOST=1 (sbatch submits, then fails as on a timeout),
FAKE_ALTER_COMMENT=1 (scontrol shows a different comment), FAKE_GPU_TYPES=a100,a100,t4 (the
nodes' GPU types in their Gres), FAKE_PROFILE_JSON=<file> (a
profiling job "runs" by copying that file to its --out path), FAKE_PROFILE_STATE (its final
state, default COMPLETED).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

DIR = Path(os.environ["FAKE_SLURM_DIR"])
# squeue -o format of lyasched.slurm.query (not imported: this runs as a bare script)
SQUEUE_FORMAT = "%i|%u|%U|%T|%r|%Q|%V|%S|%e|%l|%D|%b|%N|%P|%k|%j"
JOBS = DIR / "jobs.json"

NODES = [
    "NodeName=node{i} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=8 Gres=gpu:4 NodeAddr=127.0.0.1 "
    "Partitions=gpu State=IDLE CfgTRES=cpu=8,mem=4000M,billing=8,gres/gpu=4 AllocTRES= GresUsed=gpu:0"
]


def load() -> dict:
    return json.loads(JOBS.read_text()) if JOBS.exists() else {"next": 100, "jobs": {}}


def save(state: dict) -> None:
    JOBS.write_text(json.dumps(state))


def opt(args: list[str], name: str) -> str | None:
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def sbatch(args: list[str]) -> int:
    if os.environ.get("FAKE_SBATCH_FAIL"):
        print("sbatch: error: Batch job submission failed: Invalid account", file=sys.stderr)
        return 1
    state = load()
    job_id = str(state["next"])
    state["next"] += 1
    wrap = opt(args, "wrap")
    job = {"comment": opt(args, "comment") or "", "state": "PENDING", "argv": args}
    if wrap is None:
        job["script"] = Path(args[-1]).read_text()
    else:  # a profiling job: "runs" at once
        words = shlex.split(wrap)
        out = words[words.index("--out") + 1]
        job["state"] = os.environ.get("FAKE_PROFILE_STATE", "COMPLETED")
        if job["state"] == "COMPLETED":
            Path(out).write_text(Path(os.environ["FAKE_PROFILE_JSON"]).read_text())
        else:
            Path(opt(args, "output")).write_text("Traceback ...\nRuntimeError: profiler exploded\n")
    state["jobs"][job_id] = job
    save(state)
    if os.environ.get("FAKE_SBATCH_LOST") and wrap is None:
        print("sbatch: error: Socket timed out on send/recv operation", file=sys.stderr)
        return 1
    print(job_id)
    return 0


def squeue(args: list[str]) -> int:
    state = load()
    fmt = opt(args, "format")
    if fmt is None and "-o" in args:
        fmt = args[args.index("-o") + 1]
    only = opt(args, "jobs")
    if only is None and "--jobs" in args:
        only = args[args.index("--jobs") + 1]
    ids = set(only.split(",")) if only else set()
    if ids and not ids & set(state["jobs"]):
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    for job_id, job in state["jobs"].items():
        if ids and job_id not in ids:
            continue
        if not opt(args, "states") and job["state"] not in ("PENDING", "RUNNING"):
            continue
        if fmt == "%i|%T|%k":
            print(f"{job_id}|{job['state']}|{job['comment']}")
        elif fmt == "%T|%r":
            print(f"{job['state']}|None")
        elif fmt == SQUEUE_FORMAT:  # what lyasched's CLI backend asks (lyasched.slurm.query)
            comment = _comment(job)
            reason = "JobHeldUser" if job["state"] == "PENDING" else "None"
            print(f"{job_id}|me|1000|{job['state']}|{reason}|0|2026-11-22T13:00:00|N/A|N/A|1-00:00:00|1|"
                  f"gres:gpu:1||gpu|{comment or '(null)'}|x")
        else:
            print(f"unsupported format {fmt}", file=sys.stderr)
            return 1
    return 0


def _comment(job: dict) -> str:
    return job["comment"].replace("it=", "it=9") if os.environ.get("FAKE_ALTER_COMMENT") else job["comment"]


def scontrol(args: list[str]) -> int:
    if args[:2] == ["show", "config"]:
        print("Configuration data as of 2026-11-22T13:00:00")
        print("JobSubmitPlugins        = " + ("(null)" if os.environ.get("FAKE_NO_PLUGIN") else "lua"))
        return 0
    if args[:2] == ["show", "node"]:
        types = os.environ.get("FAKE_GPU_TYPES", "").split(",")  # e.g. "a100,a100,t4": node i's GPU type
        for i in (1, 2, 3):
            t = types[i - 1] if len(types) >= i and types[i - 1] else ""
            # a typed node's Features name its type, as on the test clusters (slurm/cluster)
            print(NODES[0].format(i=i).replace("Gres=gpu:4", f"Gres=gpu:{t}:4 ActiveFeatures={t}" if t else "Gres=gpu:4"))
        return 0
    if args[:3] == ["--oneliner", "show", "job"]:
        job = load()["jobs"].get(args[3])
        if job is None:
            print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
            return 1
        comment = _comment(job)
        print(f"JobId={args[3]} JobName=x UserId=me(1) JobState={job['state']} Reason=None Comment={comment}")
        return 0
    print(f"unsupported scontrol {args}", file=sys.stderr)
    return 1


def scancel(args: list[str]) -> int:
    state = load()
    for job_id in args:
        if job_id in state["jobs"]:
            state["jobs"][job_id]["state"] = "CANCELLED"
    save(state)
    return 0


def main() -> int:
    tool = Path(sys.argv[0]).name
    args = sys.argv[1:]
    with open(DIR / "calls.jsonl", "a") as f:
        f.write(json.dumps([tool, *args]) + "\n")
    return {"sbatch": sbatch, "squeue": squeue, "scontrol": scontrol, "scancel": scancel}[tool](args)


if __name__ == "__main__":
    sys.exit(main())
