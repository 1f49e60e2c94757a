"""Pieces several test files share to stand in for, or narrow, a Slurm backend: a recorded
`scontrol show node` line (its fields as Slurm 22.05 prints them) and a backend view restricted
to the jobs a test submitted (the test user's other jobs are not the test's business)."""

from __future__ import annotations

from typing import Any, Iterable

NODE_LINE = (
    "NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.43 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:{total} GresDrain=N/A GresUsed=gpu:{used} "
    "NodeAddr=127.0.0.1 NodeHostName=vm Port=17001 Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  "
    "RealMemory=4000 AllocMem=0 FreeMem=23265 Sockets=8 Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 "
    "Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  CfgTRES=cpu=8,mem=4000M,billing=8 AllocTRES= CapWatts=n/a"
)


class OnlyJobs:
    """A backend whose job lists are restricted to ``ids`` (everything else as the backend says)."""

    def __init__(self, backend: Any, ids: Iterable[str]) -> None:
        self.backend, self.ids, self.name = backend, set(ids), backend.name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.backend, attr)

    def jobs(self, **kw: Any) -> list:
        return [j for j in self.backend.jobs(**kw) if j.job_id in self.ids]
