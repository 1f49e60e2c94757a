"""The fail-safe: when the service has stopped renewing its lease, the cluster degrades to plain Slurm.

`run` (``lyasched failsafe``, a systemd timer on the controller host, slurm/lyasched-failsafe.timer)
reads the lease (lyasched.live.lease). While the service renewed it within the grace
(``failsafe.grace``, default 5 of its slots and at least 60 s) it does nothing. Once it is stale, the
fail-safe takes the lease (a new epoch, role ``failsafe``: a service that wakes up must take it back
before it acts) and releases every waiting held lyasched job at what it asked for (`request_of`:
the smallest GPU count from its cost summary's ``gmin`` that the job can run on, laid out as lyasub
submits it, no node list), so Slurm schedules it as the user's job. Each release is recorded in the
Slurm job itself (its AdminComment, which outlives the service database), in a log beside the lease
(`lease.log_path`, one JSON line per job) and in the lease's ``failsafe`` marker. While it holds the
lease it goes on releasing jobs submitted meanwhile (the job_submit plugin still holds them).

`adopt` is the other half: a service that takes the lease back records the jobs the fail-safe
released as started by it (decision ``failsafe``; never released, held again or started again),
and `released_by_failsafe` tells its sync to leave such a job alone while Slurm has not started it.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from lyasched.clusterview import gpu_nodes
from lyasched.live import lease as leases
from lyasched.policy.placement import parse_constraint, satisfies
from lyasched.slurm import Slurm, SlurmError
from lyasched.slurm.types import NodeInfo, SlurmJob
from lyasched.store import records
from lyasched.summary import CostSummary

log = logging.getLogger("lyasched.failsafe")

REASON = "released by the fail-safe"  # the record's reason (and the decisions') starts with it
ADMIN_TAG = "lyasched-failsafe:"  # the AdminComment the fail-safe writes starts with it
MIN_GRACE = 60.0
GRACE_SLOTS = 5


def default_grace(slot_seconds: float) -> float:
    return max(MIN_GRACE, GRACE_SLOTS * slot_seconds)


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def request_of(s: CostSummary, gpus_per_node: int, n_nodes: int, gpu_mem: float) -> tuple[int, int] | None:
    """(nodes, GPUs per node) the job asked for: the smallest count from ``gmin`` up to ``gmax``
    the job can run on (it divides the global batch, its per-GPU batch fits in GPU memory: what
    launch.sbatch and the service require), on one node when it fits there, else on the fewest
    nodes with an equal count each (Slurm gives one count per node), of the ``n_nodes`` nodes of
    ``gpus_per_node`` GPUs. None when none fits."""
    profile = s.to_profile()
    for g in range(s.min_gpus, min(s.max_gpus, gpus_per_node * n_nodes) + 1):
        if s.global_batch % g or profile.memory(s.global_batch // g) > gpu_mem:
            continue
        if g <= gpus_per_node:
            return 1, g
        for k in range(math.ceil(g / gpus_per_node), min(g, n_nodes) + 1):
            if g % k == 0 and g // k <= gpus_per_node:
                return k, g // k
    return None


@dataclass
class Result:
    """What one fail-safe run found and did (``lyasched failsafe --json`` prints it)."""

    action: str  # "none" (lease fresh), "no-lease", "released" (the lease was stale: jobs released, maybe none)
    why: str
    lease: dict[str, Any] | None = None
    age: float | None = None  # seconds since the service last renewed the lease
    grace: float = 0.0
    epoch: int | None = None  # the fail-safe's epoch when it acted
    released: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # held lyasched jobs it could not size (or not decode)
    failed: list[dict] = field(default_factory=list)  # Slurm refused (the job stays held)

    def as_dict(self) -> dict:
        return asdict(self)


def run(slurm: Slurm, annotate: Callable[[str, str], None], lease_path: Path, grace: float | None = None, *,
        users: Sequence[str] = (), partition: str = "", gpu_mem: float = 32e9,
        clock: Callable[[], float] = time.time, holder: str | None = None) -> Result:
    """One fail-safe run (see the module doc). ``annotate(job_id, text)`` sets the job's AdminComment;
    ``grace`` None: `default_grace` of the lease's slot; ``users``: only their jobs (the service's
    ``users``; empty: everybody's)."""
    lease_path = Path(lease_path)
    holder = holder or f"{leases.FAILSAFE}@{leases.me()}"
    with leases.locked(lease_path, timeout=60.0):  # the service's renewal waits for this run
        cur = leases.read(lease_path)
        now = clock()
        if cur is None:
            return Result("no-lease", f"no lease at {lease_path}: no service has run there (nothing done)")
        g = default_grace(cur.slot_seconds) if grace is None else grace
        marker = cur.failsafe or {}
        if cur.role == leases.SERVICE:
            age = cur.age(now)
            res = Result("none", "", lease=asdict(cur), age=age, grace=g)
            if age <= g:
                res.why = f"lease fresh: renewed {age:.0f}s ago by {cur.holder} (epoch {cur.epoch}, grace {g:g}s)"
                return res
            epoch = cur.epoch + 1
            why = f"service {cur.holder} (epoch {cur.epoch}) did not renew its lease for {age:.0f}s (grace {g:g}s)"
            marker = {"since": now, "why": why, "service": cur.holder, "service_epoch": cur.epoch, "released": []}
            # fence first: from now on a service that wakes up sees a newer epoch and takes it back before acting
            leases.write(lease_path, leases.Lease(holder, epoch, now, cur.slot_seconds, leases.FAILSAFE, marker))
        else:  # still ours from an earlier run: the service has not come back, plain Slurm goes on
            epoch, why = cur.epoch, str(marker.get("why") or "the fail-safe holds the lease")
            res = Result("none", "", lease=asdict(cur), age=now - float(marker.get("since", cur.renewed_at)), grace=g)
        res.action, res.why, res.epoch = "released", f"{why}: waiting lyasched jobs released to Slurm", epoch
        nodes = gpu_nodes(slurm.nodes(), partition)
        log_file = leases.log_path(lease_path)
        for job in slurm.jobs():
            if not (job.is_lyasched and job.held_by_service) or (users and job.user not in users):
                continue
            _release(job, slurm, annotate, nodes, gpu_mem, now, epoch, holder, why, res, log_file)
        marker = {**marker, "at": now, "epoch": epoch, "by": holder,
                  "released": list(marker.get("released") or []) + [e["job_id"] for e in res.released]}
        leases.write(lease_path, leases.Lease(holder, epoch, now, cur.slot_seconds, leases.FAILSAFE, marker))
        res.lease = asdict(leases.read(lease_path) or cur)
    return res


def typed_request(s: CostSummary, allowed: Sequence[str], nodes: Sequence[NodeInfo],
                  gpu_mem: float) -> tuple[int, int, str] | None:
    """(nodes, GPUs per node, GPU type) of the request a lyasub job is released with: `request_of`
    over the nodes of its first allowed type that fits (its type named in the release, so Slurm
    keeps it on that type), over every node with no type named when it allows any. Only nodes whose
    features satisfy the job's ``--constraint`` (summary key ``ft``) count: Slurm keeps the constraint
    on the release, so a shape laid out over other nodes would never start."""
    cons = parse_constraint(s.constraint)
    nodes = [n for n in nodes if satisfies(frozenset(n.features), cons)]
    for t in allowed or ("",):
        mine = [n for n in nodes if not t or n.gpu_type == t]
        gpn = max((n.gpus_total for n in mine), default=0)
        req = request_of(s, gpn, len(mine), gpu_mem) if gpn else None
        if req is not None:
            return req[0], req[1], t
    return None


def _release(job: SlurmJob, slurm: Slurm, annotate: Callable[[str, str], None], nodes: Sequence[NodeInfo],
             gpu_mem: float, now: float, epoch: int, holder: str, why: str, res: Result, log_file: Path) -> None:
    try:
        s = CostSummary.decode(job.comment)
    except ValueError as e:
        res.skipped.append({"job_id": job.job_id, "user": job.user, "why": f"invalid cost summary: {e}"})
        return
    allowed = s.gpu_types or ((job.gpu_type,) if job.gpu_type else ())
    # a managed partition's plain job is released as its user submitted it (its own shape and type)
    req = ((max(1, job.num_nodes), max(1, job.gpus_per_node), job.gpu_type) if s.plain
           else typed_request(s, allowed, nodes, gpu_mem))
    if req is None:
        of = (f" of GPU type {', '.join(allowed)}" if allowed else "") + (f" with --constraint {s.constraint}" if s.constraint else "")
        res.skipped.append({"job_id": job.job_id, "user": job.user,
                            "why": f"no GPU count in {s.min_gpus}..{s.max_gpus} fits the cluster's nodes{of}"})
        return
    n, per, gtype = req
    text = (f"{ADMIN_TAG} released at {iso(now)} by {holder} (epoch {epoch}): {why}; "
            f"{n}x{per} GPUs as requested (gmin={s.min_gpus})")
    note: str | None = None  # None: the AdminComment is set
    try:  # who and why, in the job itself, before it is changed
        annotate(job.job_id, text)
    except SlurmError as e:
        # Slurm lets only an Administrator (not an Operator) set AdminComment: the release must not
        # wait on it (fail open); the log line and the lease marker still say who and why.
        note = str(e).splitlines()[0][:300]
        log.warning("job %s: AdminComment not set (%s); released anyway, recorded in %s", job.job_id, note, log_file)
    try:
        if not s.plain:
            slurm.resize(job.job_id, n, per, (), gtype)  # its request, no node list (a leftover update is overwritten)
        slurm.release(job.job_id)
    except SlurmError as e:
        msg = str(e).splitlines()[0][:300]
        res.failed.append({"job_id": job.job_id, "user": job.user, "why": msg})
        log.error("job %s: fail-safe release failed: %s", job.job_id, msg)
        return
    entry = {"job_id": job.job_id, "uid": s.uid, "user": job.user, "at": now, "epoch": epoch, "by": holder,
             "gpus": n * per, "nodes": n, "per_node": per, **({"gpu_type": gtype} if gtype else {}), "why": why,
             "admin_comment": note is None, **({"admin_comment_error": note} if note else {})}
    leases.append_log(log_file, entry)
    res.released.append(entry)
    log.warning("job %s (%s): released by the fail-safe on %dx%d GPUs: %s", job.job_id, job.user, n, per, why)


# ---------------------------------------------------------------- the service, back


def released_by_failsafe(row: dict | None) -> bool:
    """A record the service adopted from the fail-safe and Slurm has not started yet: not held again."""
    return bool(row) and str(row.get("reason") or "").startswith(REASON)  # type: ignore[union-attr]


def adopt(db: Any, seen: dict[str, tuple[SlurmJob, dict | None]], lease_path: Path, now: float) -> list[str]:
    """After the service took the lease back: record each job the fail-safe released (its log) that
    Slurm still lists and the records do not have yet as started by it (a ``failsafe`` decision;
    a job Slurm has not started yet: ``released`` at the fail-safe's time, reason `REASON`, so it is
    never held again nor started again). ``seen`` (the slot's uid -> (job, row)) is updated in place.
    Returns the Slurm ids adopted."""
    entries = {e["job_id"]: e for e in leases.read_log(leases.log_path(lease_path))}
    if not entries:
        return []
    done = {r["slurm_id"] for r in db.query("select distinct slurm_id from decisions where action = 'failsafe'")}
    out = []
    for uid, (job, row) in list(seen.items()):
        e = entries.get(job.job_id)
        if e is None or row is None or job.job_id in done or job.held_by_service:
            continue  # not the fail-safe's, not recorded, already adopted, or its release did not go through
        reason = f"{REASON} at {iso(float(e['at']))} (epoch {e['epoch']}): {e.get('why', '')}"
        upd: dict[str, Any] = {}
        if row["state"] == "released":  # Slurm has not started it: it keeps the fail-safe's release
            upd = {"reason": reason, "released_at": float(e["at"])}
        with records.transaction(db):
            if upd:
                records.upsert_job(db, uid, **upd)
            records.record_decision(db, time=now, uid=uid, slurm_id=job.job_id, action="failsafe", gpus=e.get("gpus"),
                                    reason=f"{reason}; {e.get('nodes')}x{e.get('per_node')} GPUs as requested")
        seen[uid] = (job, {**row, **upd})
        out.append(job.job_id)
        log.warning("job %s: %s (%s): recorded, left to Slurm", job.job_id, REASON, job.state)
    return out
