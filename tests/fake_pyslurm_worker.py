#!/usr/bin/env python3
"""A stand-in for the pyslurm worker (lyasched.slurm.pyslurm_worker) that needs no pyslurm and no
Slurm: it speaks the same framed protocol and misbehaves on cue, so the caller's timeout, kill,
restart and retry can be tested anywhere. Used as ``PySlurm(prefix=[python, this file])`` (it is
then started as ``this file pyslurm-worker``).

``FAKE_WORKER_DIR`` (required) counts requests per op (``<op>.n``); ``FAKE_WORKER_HANG`` lists ops
whose first request hangs (``nodes``) or every request (``nodes:*``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lyasched.slurm.pyslurm_worker import read_frame, write_frame  # noqa: E402
from lyasched.slurm.types import ClusterConfig, NodeInfo  # noqa: E402


def main() -> int:
    d = Path(os.environ["FAKE_WORKER_DIR"])
    hang = dict(x.partition(":")[::2] for x in os.environ.get("FAKE_WORKER_HANG", "").split(",") if x)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    last = None  # jobs_delta: the token of the last answer
    while True:
        try:
            op, args = read_frame(inp)
        except EOFError:
            return 0
        f = d / f"{op}.n"
        n = int(f.read_text()) + 1 if f.exists() else 1
        f.write_text(str(n))
        if op in hang and (hang[op] == "*" or n == 1):
            time.sleep(3600)
        if op == "hello":
            write_frame(out, ("ok", {"pyslurm": "22.5.3", "libslurm": "22.5.8", "pid": os.getpid()}))
        elif op == "config":
            write_frame(out, ("ok", ClusterConfig(version="22.05.8", accounting=False, submit_plugins=("lua",))))
        elif op == "nodes":
            write_frame(out, ("ok", [NodeInfo("node1", "IDLE", 4, 1)]))
        elif op == "jobs_delta":  # three jobs; job 2 alternates PENDING/RUNNING; a fresh worker sends all
            rows = {i: (i, "u", 1, "RUNNING" if i == "2" and n % 2 == 0 else "PENDING", "JobHeldUser", 0, 1.0, None,
                        None, 600.0, 1, 1, (), "gpu", "lyasched:v1;id=" + i, "j") for i in ("1", "2", "3")}
            fresh = args[0] is not None and args[0] == last
            last = f"{os.getpid()}:{n}"
            changed = {i: t for i, t in rows.items() if not fresh or i == "2"}
            write_frame(out, ("ok", (last, list(rows), changed)))
        elif op == "release":
            write_frame(out, ("err", "RPCError", "Invalid job id specified"))
        elif op == "hold":
            write_frame(out, ("err", "RPCError", "Access/permission denied"))
        else:
            write_frame(out, ("err", "RuntimeError", f"fake worker: no {op}"))


if __name__ == "__main__":
    sys.exit(main())
