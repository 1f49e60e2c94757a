"""Observe: Slurm -> the slot's observation (its jobs, the GPU nodes, their free GPUs, the cluster
view), and the followed jobs sorted into the policy's waiting and running ones.

`read` makes the slot's two Slurm reads (``nodes()`` then ``jobs()``; GPUs held by any job,
lyasched or not, are busy; a drained or down node has none free) through the cluster view lyasub
uses too (lyasched.clusterview). `sort_jobs` runs after the records are brought up to date
(lyasched.live.sync): a job released less than ``release_grace`` ago that Slurm has not started
keeps its GPUs (taken from the free counts, shown to the policy as running); one released longer
ago is held again (`Starter.hold_again`: its GPUs were taken meanwhile).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable
from weakref import WeakKeyDictionary

from lyasched.clusterview import ClusterView, cluster_view, gpu_nodes
from lyasched.live import gputypes
from lyasched.live.context import SlotContext
from lyasched.policy.snapshot import RunningObs
from lyasched.policy.state import WaitingJob
from lyasched.slurm import Slurm, SlurmError
from lyasched.slurm.types import NodeInfo, SlurmJob
from lyasched.store import records
from lyasched.store.placement import NodePlacement

if TYPE_CHECKING:
    import sqlite_utils

    from lyasched.config import Config
    from lyasched.live.inputs import PolicyInputs
    from lyasched.summary import CostSummary
    from lyasched.live.sync import Seen


@dataclass
class Observation:
    """What one slot read of Slurm: ``nodes`` the GPU nodes (in Slurm's order: a node's index in
    placements), ``jobs`` every lyasched job, ``free`` free GPUs per node (lowered as the slot
    reserves GPUs: open grows, released jobs not yet started), ``view`` the cluster view."""

    nodes: list[NodeInfo]
    jobs: list[SlurmJob]
    free: list[int]
    view: ClusterView

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @property
    def index(self) -> dict[str, int]:
        return {n.name: i for i, n in enumerate(self.nodes)}

    @property
    def types(self) -> list[str]:
        """Each node's GPU type ('' untyped), in the nodes' order."""
        return [n.gpu_type for n in self.nodes]

    def take(self, placement: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> None:
        """Keep these (node index, GPUs) from the free counts (never below 0)."""
        for i, c in placement:
            self.free[i] = max(0, self.free[i] - c)


def read(slurm: Slurm, config: Config, db: sqlite_utils.Database) -> Observation:
    """The slot's Slurm reads: nodes, then jobs (raises `SlurmError` when no node has GPUs)."""
    nodes = gpu_nodes(slurm.nodes(), config.partition)
    jobs = slurm.jobs()
    if not nodes:
        where = f" in partition {config.partition}" if config.partition else ""
        raise SlurmError(["scontrol"], f"no nodes with GPUs{where}")
    view = cluster_view(nodes, config, db)  # lyasub's view too: same device key, calibrated links
    return Observation(nodes=nodes, jobs=jobs, free=[n.gpus_free for n in nodes], view=view)


def sort_jobs(obs: Observation, seen: Seen, ctx: SlotContext, inputs: PolicyInputs, release_grace: float,
              hold_again: Callable[[SlurmJob, dict, SlotContext], None]) -> tuple[list[WaitingJob], list[RunningObs]]:
    """The followed jobs (``seen``: uid -> (Slurm job, record)) as the policy's waiting and running
    jobs; a released job Slurm has not started keeps its GPUs in ``obs.free`` within the grace and
    is held again after it (``hold_again``)."""
    now, index = ctx.now, obs.index
    marked = _marked(inputs)
    typed = bool(ctx.type_costs)  # untyped nodes: no job is never placeable (`gputypes.never_placeable`)
    held: list[tuple[dict, CostSummary, SlurmJob]] = []  # the waiting jobs: their rows come after the walk
    running: list[RunningObs] = []
    for job, row in seen.values():
        if row is None:
            continue
        state = row["state"]
        if state == "invalid":
            continue
        if state == "released" and job.pending and not job.held_by_service:
            if now - (row["released_at"] or now) > release_grace:
                hold_again(job, row, ctx)
                continue
            # Committed: Slurm will start it on these GPUs; nobody else may get them.
            placement = NodePlacement.from_json(row["placement"]).to_indices(index)
            obs.take(placement)
            running.append(inputs.running(job, row, placement, now))
        elif job.running:
            placement = NodePlacement.from_slurm(job.nodes, job.gpus_per_node).to_indices(index)
            running.append(inputs.running(job, row, placement, now))
        elif state == "waiting" and job.held_by_service:
            s, _ = inputs.decode(job.comment)
            assert s is not None  # a record with an invalid summary is "invalid", never "waiting"
            held.append((row, s, job))
    waiting = inputs.waiting_rows(ctx, [(s, job) for _, s, job in held])
    if typed or marked:  # untyped: only a mark left from typed nodes to clear
        for (row, s, job), wj in zip(held, waiting):
            if typed or row["uid"] in marked:
                _note_never(inputs, row, wj, job, ctx, s)
    inputs.flush()  # the new rows' predictions, in one transaction
    return waiting, running


# the service's PolicyInputs -> {uid: the never-placeable reason its record holds}: the slot's rows are
# brief (no reason column), so what was written is remembered here, first read from the records
_MARKED: WeakKeyDictionary = WeakKeyDictionary()


def _marked(inputs: PolicyInputs) -> dict[str, str]:
    """{uid: the never-placeable reason its record holds} (`_MARKED`), read once from the records."""
    marked = _MARKED.get(inputs)
    if marked is None:
        marked = _MARKED[inputs] = {r[0]: r[1] for r in inputs.db.execute(
            "select uid, reason from jobs where state = 'waiting' and reason like ?", [gputypes.NEVER + "%"])}
    return marked


def _note_never(inputs: PolicyInputs, row: dict, wj: WaitingJob, job: SlurmJob, ctx: SlotContext, s: CostSummary) -> None:
    """A held job no type it allows can ever run says so in its record (`gputypes.never_placeable`);
    the reason goes once one can (the nodes changed)."""
    marked = _marked(inputs)
    uid = row["uid"]
    why = gputypes.never_placeable(wj, job, ctx, s.min_gpus, s.max_gpus)
    if why and marked.get(uid) != why:
        records.upsert_job(inputs.db, uid, reason=why)
        marked[uid] = why
    elif not why and uid in marked:
        records.upsert_job(inputs.db, uid, reason="waiting for a slot")
        del marked[uid]
