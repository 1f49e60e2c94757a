#!/usr/bin/env python3
"""A fault injector in front of the real Slurm tools (the reliability harness only: `faults`).

Two ways to use it:

- as a prefix: ``LYASCHED_SLURM_PREFIX="python tests/reliability/flaky_slurm.py"`` (lyasched serve;
  `prefix()` gives it), or ``SlurmCLI(prefix=[python, "tests/reliability/flaky_slurm.py"])``: it is
  called as ``flaky_slurm.py TOOL ARGS``;
- on PATH: `install_shims(dir, python)` writes ``sbatch``/``squeue``/``scontrol``/``scancel``/``sacct``
  shell shims into ``dir`` that call it (for lyasub, which finds the tools on PATH).

It runs the real tool (found on PATH, skipping shim directories) unless a rule says otherwise.
Environment:

- ``FLAKY_DIR`` (required): call counters (``counts.json``, under an flock, so concurrent callers
  count right) and ``calls.log`` (one line per call: number, key, what happened);
- ``FLAKY_RULES``: ``KEY#N=ACTION;...`` where KEY is the tool (``squeue``) or tool and first
  argument (``scontrol release``), N the N-th call of that key (``*`` = every call) and ACTION one of
  ``fail`` (exit 1 without running it, like an unreachable controller), ``hang`` (sleep
  ``FLAKY_HANG_S``, default 3600 s: the caller's timeout must end it), ``lost`` (run it, then
  exit 1 as if the answer was lost: the non-idempotent case);
- ``FLAKY_SEED`` and ``FLAKY_P`` (and ``FLAKY_P_HANG``): fail (hang) each call with that probability,
  deterministically from the seed and the call number;
- ``FLAKY_HIDE_JOBS``: comma-separated job ids that ``squeue`` does not list and ``scontrol show job``
  does not know (what a job purged after MinJobAge looks like).

The pyslurm backend's worker goes through it too: with the prefix set, lyasched starts
``flaky_slurm.py pyslurm-worker``, which runs the real worker (lyasched.slurm.pyslurm_worker) and
applies the same rules to each request, keyed by the CLI call it stands for (`WORKER_KEYS`: the
job list is ``squeue``, a release ``scontrol release``...). A ``hang`` there freezes the worker as a
controller stuck in libslurm would; the caller's timeout must kill it and retry.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

TOOLS = ("sbatch", "squeue", "scontrol", "scancel", "sacct")
# pyslurm worker requests -> (tool, key) of the CLI call each stands for
WORKER_KEYS = {
    "hello": ("scontrol", "scontrol show"), "config": ("scontrol", "scontrol show"),
    "nodes": ("scontrol", "scontrol show"), "jobs": ("squeue", "squeue"), "job": ("squeue", "squeue"),
    "jobs_delta": ("squeue", "squeue"), "work_dir": ("scontrol", "scontrol show"),
    "release": ("scontrol", "scontrol release"), "hold": ("scontrol", "scontrol hold"),
    "cancel": ("scancel", "scancel"), "submit": ("sbatch", "sbatch"),
}
SHIM_MARK = ".flaky_shims"
SCRIPT = Path(__file__).resolve()


def prefix(python: str = sys.executable) -> str:
    """The ``LYASCHED_SLURM_PREFIX`` that puts this injector in front of every Slurm call of lyasched."""
    return f"{python} {SCRIPT}"


def install_shims(directory: str | os.PathLike, python: str = sys.executable) -> Path:
    """Write shell shims for the Slurm tools into ``directory`` (put it first on PATH)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / SHIM_MARK).write_text("")
    for tool in TOOLS:
        shim = d / tool
        shim.write_text(f'#!/bin/sh\nexec "{python}" "{SCRIPT}" {tool} "$@"\n')
        shim.chmod(0o755)
    return d


def real_tool(tool: str) -> str:
    dirs = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / SHIM_MARK).exists()]
    found = shutil.which(tool, path=os.pathsep.join(dirs))
    if not found:
        print(f"flaky_slurm: {tool}: not found on PATH", file=sys.stderr)
        sys.exit(127)
    return found


def next_call(state: Path, key: str, overall: bool = True) -> tuple[int, int]:
    """(n-th call of this key, n-th call overall), counted under an exclusive lock."""
    state.mkdir(parents=True, exist_ok=True)
    with open(state / "counts.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        f = state / "counts.json"
        counts = json.loads(f.read_text()) if f.exists() else {}
        counts[key] = counts.get(key, 0) + 1
        counts["*"] = counts.get("*", 0) + (1 if overall else 0)
        f.write_text(json.dumps(counts))
        return counts[key], counts["*"]


def parse_rules(spec: str) -> dict[tuple[str, str], str]:
    rules: dict[tuple[str, str], str] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        lhs, _, action = part.partition("=")
        key, _, n = lhs.partition("#")
        if action not in ("fail", "hang", "lost") or not (n == "*" or n.isdigit()):
            raise SystemExit(f"flaky_slurm: bad rule {part!r} (KEY#N=fail|hang|lost)")
        rules[(key.strip(), n)] = action
    return rules


def decide(key: str, tool: str, n_key: int, n_tool: int, n_all: int) -> str:
    rules = parse_rules(os.environ.get("FLAKY_RULES", ""))
    for k, n in ((key, n_key), (tool, n_tool)):
        for nn in (str(n), "*"):
            if (k, nn) in rules:
                return rules[(k, nn)]
    p, p_hang = float(os.environ.get("FLAKY_P", "0")), float(os.environ.get("FLAKY_P_HANG", "0"))
    if p or p_hang:
        r = random.Random(f"{os.environ.get('FLAKY_SEED', '0')}:{n_all}").random()
        if r < p:
            return "fail"
        if r < p + p_hang:
            return "hang"
    return "run"


def hide(tool: str, args: list[str], out: str) -> tuple[str, bool]:
    """Drop hidden jobs from squeue output; (output, whether scontrol asked about a hidden job)."""
    hidden = {j for j in os.environ.get("FLAKY_HIDE_JOBS", "").split(",") if j}
    if not hidden:
        return out, False
    if tool == "squeue":
        keep = [ln for ln in out.splitlines(keepends=True) if not ln.strip() or ln.split("|")[0].strip() not in hidden]
        return "".join(keep), False
    if tool == "scontrol" and args[:2] == ["show", "job"] and len(args) > 2:
        return out, args[-1].split("=")[-1] in hidden
    return out, False


def count(tool: str, key: str) -> tuple[str, int]:
    """Count one call and log it; the action the rules give it."""
    state = Path(os.environ["FLAKY_DIR"])
    n_key, n_all = next_call(state, key)
    n_tool = n_key if key == tool else next_call(state, f"{tool} (all)", overall=False)[0]
    action = decide(key, tool, n_key, n_tool, n_all)
    with open(state / "calls.log", "a") as log:
        log.write(f"{n_all} {key}#{n_key} {action} {time.time():.3f}\n")
    return action, n_key


def worker() -> int:
    """The pyslurm worker with the rules applied to each request (see the module doc)."""
    from lyasched.slurm import pyslurm_worker  # installed with lyasched (run as a script: no package here)

    hidden = {j for j in os.environ.get("FLAKY_HIDE_JOBS", "").split(",") if j}

    def hook(op: str, args: tuple, call):
        tool, key = WORKER_KEYS.get(op, ("pyslurm", f"pyslurm {op}"))
        if op == "hello":  # start-up handshake: not a Slurm call of the service's
            return call()
        action, n_key = count(tool, key)
        if action == "fail":
            raise RuntimeError(f"Unable to contact slurm controller (connect failure) [flaky_slurm: injected, "
                               f"call {key}#{n_key}]")
        if action == "hang":
            time.sleep(float(os.environ.get("FLAKY_HANG_S", "3600")))
            raise RuntimeError("Socket timed out on send/recv operation [flaky_slurm: hang ended]")
        if op in ("job", "work_dir") and args and str(args[0]) in hidden:
            raise RuntimeError("Invalid job id specified")
        out = call()
        if op == "jobs" and hidden:
            out = [j for j in out if j.job_id not in hidden]
        if op == "jobs_delta" and hidden:
            token, order, changed = out
            out = (token, [i for i in order if i not in hidden], changed)
        if action == "lost":
            raise RuntimeError(f"Socket timed out on send/recv operation [flaky_slurm: injected after running, "
                               f"call {key}#{n_key}]")
        return out

    return pyslurm_worker.serve(hook)


def main(argv: list[str]) -> int:
    if argv[:1] == ["pyslurm-worker"]:
        return worker()
    if not argv or argv[0] not in TOOLS:
        print(f"usage: flaky_slurm.py {{{','.join(TOOLS)}}} ARGS...", file=sys.stderr)
        return 2
    tool, args = argv[0], argv[1:]
    key = f"{tool} {args[0]}" if tool == "scontrol" and args else tool
    action, n_key = count(tool, key)
    if action == "fail":
        print(f"{tool}: error: Unable to contact slurm controller (connect failure) [flaky_slurm: injected, "
              f"call {key}#{n_key}]", file=sys.stderr)
        return 1
    if action == "hang":
        time.sleep(float(os.environ.get("FLAKY_HANG_S", "3600")))
        return 1
    p = subprocess.run([real_tool(tool), *args], capture_output=True, text=True)
    out, gone = hide(tool, args, p.stdout)
    if gone:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    sys.stdout.write(out)
    sys.stderr.write(p.stderr)
    if action == "lost":
        print(f"{tool}: error: Socket timed out on send/recv operation [flaky_slurm: injected after running, "
              f"call {key}#{n_key}]", file=sys.stderr)
        return 1
    return p.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
