#!/usr/bin/env python3
"""How long one `lyasched serve` slot takes (prints figures; no thresholds asserted).

1. live: K slots against the running Slurm cluster (if `squeue` answers), read-only: the service
   is restricted to a user with no jobs, so it reads and parses everything but changes nothing.
2. synthetic: slots with N held jobs on M nodes x 4 GPUs, Slurm answered by an
   in-process fake (same output formats as 22.05): the service's own cost (parsing, records,
   Lyapunov policy, one update+release argv per start).

    python benchmarks/slot_duration.py [--slots 20] [--jobs 1000] [--nodes 64]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lyasched.config import Config  # noqa: E402
from lyasched.service import Service  # noqa: E402
from lyasched.slurm import SlurmCLI  # noqa: E402
from lyasched.slurm import query as q  # noqa: E402
from lyasched.store.records import open_records  # noqa: E402
from lyasched.summary import CostSummary  # noqa: E402

NODE = ("NodeName={n} Arch=x86_64 CPUTot=64 Gres=gpu:4 GresUsed=gpu:{u} NodeAddr=10.0.0.1 State={s} "
        "Partitions=gpu CfgTRES=cpu=64,mem=512G AllocTRES=")


class Fake:
    """squeue / scontrol show node in 22.05's formats; a released job turns pending-unheld."""

    def __init__(self, jobs: int, nodes: int) -> None:
        self.nodes = "\n".join(NODE.format(n=f"n{i:04d}", u=i % 3, s="MIXED") for i in range(nodes)) + "\n"
        self.jobs = {}
        for i in range(jobs):
            s = CostSummary(uid=f"bench-{i:08d}", sig="resnet:bench", global_batch=256, iterations=1000 + 37 * i,
                            min_gpus=1, max_gpus=16, alpha=0.01, beta=0.001, params=11_000_000).encode()
            self.jobs[str(1000 + i)] = (f"{1000 + i}|u{i % 50}|{2000 + i % 50}|PENDING|{{reason}}|0|"
                                        f"{q.format_time(1e9 + i)}|N/A|N/A|1-00:00:00|1|gres:gpu:1||gpu|{s}|job{i}")
        self.released: set[str] = set()

    def run(self, args, *, idempotent=True, input=None):
        if args[0] == "squeue":
            return "".join(line.format(reason="Resources" if j in self.released else "JobHeldUser") + "\n"
                           for j, line in self.jobs.items())
        if args[:3] == ["scontrol", "show", "node"]:
            return self.nodes
        if args[:2] == ["scontrol", "release"]:
            self.released.add(args[2])
        return ""


def stats(xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]
    return f"median {statistics.median(xs) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, max {xs[-1] * 1000:.1f} ms (n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lyasched-bench-"))
    try:
        if shutil.which("squeue"):
            svc = Service(Config(slot_seconds=1, users=("__no_such_user__",)), open_records(tmp / "live.db"),
                          slurm=SlurmCLI(timeout=30, retries=0))
            durs = []
            for _ in range(a.slots):
                rep = svc.run_slot()
                if rep.error:
                    print(f"live: Slurm did not answer ({rep.error}); skipped")
                    break
                durs.append(rep.duration)
            if durs:
                print(f"live cluster, read-only slot ({sum(rep.free.values())} free GPUs): {stats(durs)}")
        else:
            print("live: no squeue on PATH; skipped")
        first, later, started = [], [], 0
        for r in range(a.repeat):
            svc = Service(Config(slot_seconds=30, release_grace=1e9), open_records(tmp / f"syn{r}.db"),
                          slurm=Fake(a.jobs, a.nodes), clock=lambda: 1e9 + 10_000)
            rep = svc.run_slot()
            first.append(rep.duration)
            started = len(rep.started)
            for _ in range(3):
                later.append(svc.run_slot().duration)
        print(f"synthetic, {a.jobs} held jobs on {a.nodes}x4 GPUs (lyapunov):")
        print(f"  first slot (decode + record every job, {started} started): {stats(first)}")
        print(f"  later slots (records up to date):                        {stats(later)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
