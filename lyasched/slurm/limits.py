"""Slurm's GPU limits, so that the service never releases a job a limit would keep pending.

An admin caps GPUs with QOS limits (``MaxTRESPerUser``, ``MaxTRESPerAccount``, ``GrpTRES``) and
association limits (``GrpTRES`` of a user's association or of its account, ``MaxTRES`` per job).
Slurm enforces them at *start*: a released job over a limit stays pending (``QOSMaxGRESPerUser``,
``AssocGrpGRES``...), and lyasched would keep GPUs idle for it, or hold it again and churn. So the
service reads the limits (`parse_qos`, `parse_assoc`, from ``sacctmgr``), each job's account and
QOS (`parse_tenancy`, from ``squeue``), counts the GPUs every job holds against each limit
(`Usage`), and lets the policy see only what a job may still take (`headroom`); `admit` checks a
slot's starts together (two starts of one user may each fit, not both).

Pure: text in, numbers out; the service's I/O is in lyasched.live.limits. What is not modelled:
limits of accounts above a user's own account (parents in the tree), CPU or memory limits, and
``GrpTRESMins``/``GrpTRESRunMins``; Slurm still enforces those itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

QOS_FORMAT = "Name,MaxTRESPU,MaxTRESPA,GrpTRES"
ASSOC_FORMAT = "Account,User,GrpTRES,MaxTRES"
TENANCY_FORMAT = "%i|%u|%a|%q"

_GPU = re.compile(r"(?:^|,)gres/gpu(?::[^=,]+)?=(\d+)")


def qos_command() -> list[str]:
    return ["sacctmgr", "-n", "-P", "show", "qos", f"format={QOS_FORMAT}"]


def assoc_command() -> list[str]:
    return ["sacctmgr", "-n", "-P", "show", "assoc", f"format={ASSOC_FORMAT}"]


def tenancy_command() -> list[str]:
    return ["squeue", "-h", "-t", "PD,R,CG,S", "-o", TENANCY_FORMAT]


def gpus_of_tres(tres: str) -> int | None:
    """GPUs in a TRES string (``cpu=4,gres/gpu=2``; typed ``gres/gpu:a100=2`` counts too, summed);
    None when it names no GPU limit."""
    found = [int(m) for m in _GPU.findall(tres.strip())]
    return sum(found) if found else None


@dataclass(frozen=True)
class QosLimits:
    per_user: int | None = None
    per_account: int | None = None
    total: int | None = None  # GrpTRES: all jobs of the QOS


@dataclass(frozen=True)
class AssocLimits:
    total: int | None = None  # GrpTRES: all jobs of the association (a user's, or its account's)
    per_job: int | None = None  # MaxTRES


@dataclass(frozen=True)
class Tenancy:
    """Whose a job is, for the limits: its user, account and QOS as Slurm reports them."""

    user: str
    account: str = ""
    qos: str = ""


@dataclass(frozen=True)
class Limits:
    qos: Mapping[str, QosLimits] = field(default_factory=dict)
    users: Mapping[tuple[str, str], AssocLimits] = field(default_factory=dict)  # (account, user)
    accounts: Mapping[str, AssocLimits] = field(default_factory=dict)  # the account's own association

    def __bool__(self) -> bool:
        return any(v != QosLimits() for v in self.qos.values()) or any(
            v != AssocLimits() for v in [*self.users.values(), *self.accounts.values()])


class LimitsParseError(ValueError):
    """sacctmgr/squeue printed something this module does not understand (one line)."""


def _rows(text: str, n: int, what: str) -> Iterable[list[str]]:
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < n:
            raise LimitsParseError(f"{what}: expected {n} '|'-separated fields, got {line[:120]!r}")
        yield parts[:n]


def parse_qos(text: str) -> dict[str, QosLimits]:
    """``sacctmgr -n -P show qos format=`` `QOS_FORMAT`."""
    out = {}
    for name, pu, pa, grp in _rows(text, 4, "sacctmgr show qos"):
        out[name.strip()] = QosLimits(gpus_of_tres(pu), gpus_of_tres(pa), gpus_of_tres(grp))
    return out


def parse_assoc(text: str) -> tuple[dict[tuple[str, str], AssocLimits], dict[str, AssocLimits]]:
    """``sacctmgr -n -P show assoc format=`` `ASSOC_FORMAT`: (user associations, accounts' own)."""
    users: dict[tuple[str, str], AssocLimits] = {}
    accounts: dict[str, AssocLimits] = {}
    for account, user, grp, per_job in _rows(text, 4, "sacctmgr show assoc"):
        lim = AssocLimits(gpus_of_tres(grp), gpus_of_tres(per_job))
        if user.strip():
            users[(account.strip(), user.strip())] = lim
        else:
            accounts[account.strip()] = lim
    return users, accounts


def parse_tenancy(text: str) -> dict[str, Tenancy]:
    """``squeue -h -o`` `TENANCY_FORMAT`: job id -> its user, account, QOS."""
    return {i.strip(): Tenancy(u.strip(), a.strip(), q.strip()) for i, u, a, q in _rows(text, 4, "squeue")}


class Usage:
    """GPUs held per limit's scope, by every job Slurm counts (running ones, and those lyasched
    released that have not started yet: they will count once they do)."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, ...], int] = {}

    @staticmethod
    def scopes(t: Tenancy) -> list[tuple[str, ...]]:
        return [("qos-user", t.qos, t.user), ("qos-account", t.qos, t.account), ("qos", t.qos),
                ("assoc", t.account, t.user), ("account", t.account)]

    def add(self, t: Tenancy, gpus: int) -> None:
        for s in self.scopes(t):
            self.held[s] = self.held.get(s, 0) + gpus

    def of(self, scope: tuple[str, ...]) -> int:
        return self.held.get(scope, 0)


def headroom(t: Tenancy, usage: Usage, limits: Limits) -> tuple[int | None, str]:
    """How many GPUs this job may take now under Slurm's limits (None: no limit applies), and
    the tightest limit in words (for lyastat: ``QOS gpu2 MaxTRESPerUser gres/gpu=2 (2 held)``)."""
    cands: list[tuple[int, str]] = []
    q = limits.qos.get(t.qos)
    if q is not None:
        for cap, scope, name in ((q.per_user, ("qos-user", t.qos, t.user), "MaxTRESPerUser"),
                                 (q.per_account, ("qos-account", t.qos, t.account), "MaxTRESPerAccount"),
                                 (q.total, ("qos", t.qos), "GrpTRES")):
            if cap is not None:
                held = usage.of(scope)
                cands.append((cap - held, f"QOS {t.qos} {name} gres/gpu={cap} ({held} held)"))
    for lim, scope, who in ((limits.users.get((t.account, t.user)), ("assoc", t.account, t.user),
                             f"association {t.user}@{t.account}"),
                            (limits.accounts.get(t.account), ("account", t.account), f"account {t.account}")):
        if lim is None:
            continue
        if lim.total is not None:
            held = usage.of(scope)
            cands.append((lim.total - held, f"{who} GrpTRES gres/gpu={lim.total} ({held} held)"))
        if lim.per_job is not None:
            cands.append((lim.per_job, f"{who} MaxTRES gres/gpu={lim.per_job} per job"))
    if not cands:
        return None, ""
    room, why = min(cands, key=lambda c: c[0])
    return max(0, room), why


def admit(starts: Iterable[tuple[str, int]], tenancy: Mapping[str, Tenancy], usage: Usage,
          limits: Limits) -> tuple[list[str], dict[str, str]]:
    """The starts (job id, GPUs), in the policy's order, that fit together under the limits:
    (ids admitted, {id: why not} for the others). ``usage`` is updated with the admitted ones."""
    ok: list[str] = []
    refused: dict[str, str] = {}
    for job_id, gpus in starts:
        t = tenancy.get(job_id)
        if t is None:
            ok.append(job_id)
            continue
        room, why = headroom(t, usage, limits)
        if room is not None and gpus > room:
            refused[job_id] = why
            continue
        usage.add(t, gpus)
        ok.append(job_id)
    return ok, refused
