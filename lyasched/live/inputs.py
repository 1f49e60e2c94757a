"""Observe: each job the service follows as the policy's input, and the slot's `ClusterSnapshot`.

A waiting job's rows (`WaitingJob`: predicted run time per GPU count, corrected by what the cost
table learned, clamped to the time limit, with the start-up term) are made once and kept while
their inputs are unchanged; a running job is a `RunningObs`; the arrival history survives a
restart (rebuilt from the records). On typed nodes a waiting job also carries its rows on each type
it allows (`WaitingJob.by_type`, by the simulator's builder `type_rows`) and the snapshot each
node's type (docs/types.md, "Live"). The snapshot goes to the one `SlotStateBuilder`
(lyasched.policy.snapshot) the simulator uses too; `observe.sort_jobs` (lyasched.live.observe)
gathers which jobs wait and run.
"""

from __future__ import annotations

import math
from dataclasses import replace
from operator import attrgetter
from typing import Callable, Sequence

import numpy as np
import sqlite_utils

from lyasched.costmodel import startup
from lyasched.live import adaptive, gputypes, learning, plain
from lyasched.live.trust import known_over_claim, shared_profile
from lyasched.costmodel.cost import ClusterSpec, CostModel, Profile
from lyasched.costmodel.roofline import lookup
from lyasched.profile.signature import device_type
from lyasched.costmodel.goodput import Adaptive
from lyasched.costmodel.jobspec import Job
from lyasched.live.context import SlotContext
from lyasched.live.mover import checkpointable
from lyasched.policy.movable import movable_job, share_left, waited_so_far
from lyasched.policy.snapshot import ArrivalHistory, ClusterSnapshot, RunningObs, requested_gpu_s, type_rows
from lyasched.policy.state import Decision, Placement, SlotState, WaitingJob, waiting_job
from lyasched.security import bounded_correction, clamp_run_times
from lyasched.slurm.types import SlurmJob
from lyasched.store import costtable, records
from lyasched.store import moves as move_records
from lyasched.store.jobrecord import decode_times, encode_times
from lyasched.summary import CostSummary


class PolicyInputs:
    """The policy-input side of the service: ``db`` opens this thread's records connection,
    ``clock`` stands in for a job's unknown submit time."""

    def __init__(self, db: Callable[[], sqlite_utils.Database], clock: Callable[[], float], slurm: object = None) -> None:
        self._db = db
        self.clock = clock
        # (uid, job) -> (inputs: cluster, model inputs, summary, ...; the rows); waiting jobs only
        self.rows: dict[tuple[str, str], tuple[tuple, WaitingJob]] = {}
        self._models_seen: dict[tuple[str, ...], tuple] = {}  # the last slot's SlotContext.models, reused when equal (identity compares fast)
        self._last_cluster: ClusterSpec | None = None  # the last slot's ClusterSpec, reused when equal (the rows compare by identity)
        self._type_costs: tuple[tuple, dict[str, CostModel]] | None = None  # (its inputs, type_costs' answer), reused when equal
        self._summaries: dict[str, tuple[CostSummary | None, str]] = {}
        # (uid, pred_one, pred_multi, work) of rows made since the last `flush`: written together
        self._pending: list[tuple[str, str, str, float]] = []
        self.arrivals = ArrivalHistory()  # SlotState.arrivals_*: every job the service has seen wait
        # job id -> its shared profile's run over its claim's (lyasched.live.trust), made with its rows
        self.known: dict[str, float] = {}
        self.load_arrivals()
        self.plain = plain.load(self.db, slurm)  # run-time estimates of managed partitions' plain jobs

    @property
    def db(self) -> sqlite_utils.Database:
        return self._db()

    def cluster(self, spec: ClusterSpec) -> ClusterSpec:
        """This slot's cluster: the last slot's object when equal (the cached rows compare by identity)."""
        if spec == self._last_cluster:
            return self._last_cluster
        self._last_cluster = spec
        return spec

    def type_costs(self, ctx: SlotContext) -> dict[str, CostModel]:
        """On typed nodes (`SlotContext.per_type`), each GPU type's cost model: the cluster's links
        on that type's nodes and GPUs per node, with the type's memory (the roofline table's,
        ``[cluster.gpu_types]`` included; the configured ``gpu_mem`` for a type the table lacks and
        for untyped nodes); {} on an untyped cluster. The last slot's object while unchanged."""
        if not ctx.per_type or ctx.cluster is None:
            return {}
        key = (ctx.cluster, tuple(ctx.types), tuple(ctx.gpus), id(ctx.gpu_types))
        if self._type_costs is not None and self._type_costs[0] == key:
            return self._type_costs[1]
        out: dict[str, CostModel] = {}
        for t in dict.fromkeys(ctx.types):
            gpus = [g for g, x in zip(ctx.gpus, ctx.types) if x == t] or [ctx.cluster.gpus_per_node]
            try:
                mem = lookup(t, ctx.gpu_types).memory if t else ctx.cluster.gpu_mem
            except ValueError:
                mem = ctx.cluster.gpu_mem
            out[t] = CostModel(replace(ctx.cluster, nodes=len(gpus), gpus_per_node=max(gpus), gpu_mem=mem))
        self._type_costs = (key, out)
        return out

    def snapshot(self, ctx: SlotContext, slot_len: float, free: Sequence[int], gpus_per_node: int,
                 waiting: Sequence[WaitingJob], running: Sequence[RunningObs]) -> ClusterSnapshot:
        """The slot's input as observed (the rows of jobs no longer waiting are dropped here)."""
        # Rows of jobs no longer waiting (started, gone, corrected anew) are dropped: the cache
        # stays the size of the queue over months of service, and kept rows keep their identity
        # for the policy's own per-job memo.
        if len(self.rows) != len(ctx.rows_used):  # every key used this slot is in rows
            self.rows = {k: v for k, v in self.rows.items() if k in ctx.rows_used}
        arr_t, arr_cum = self.arrivals.arrays()
        n_arr = int(np.searchsorted(arr_t, ctx.now, side="right"))
        if self.known:  # the jobs still followed (waiting or running) only
            ids = {w.job_id for w in waiting} | {r.job_id for r in running}
            self.known = {k: v for k, v in self.known.items() if k in ids}
        return ClusterSnapshot(
            now=ctx.now,
            slot_len=slot_len,
            nodes=tuple(ctx.names),
            free=tuple(free),
            gpus_per_node=gpus_per_node,
            waiting=tuple(sorted(waiting, key=attrgetter("submit_time", "job_id"))),
            running=tuple(running),
            arrivals_t=arr_t[:n_arr],
            arrivals_cum_gpu_s=arr_cum[:n_arr],
            known=dict(self.known) if self.known else None,
            node_types=tuple(ctx.types) if ctx.type_costs else (),  # the simulator's typed input (docs/types.md)
        )

    def movable(self, ctx: SlotContext, state: SlotState, seen: dict,
                moving: dict[str, dict]) -> tuple[SlotState, int]:
        """The running jobs as a moving policy sees them: `MovableJob` for a running checkpointable
        job with no open move, not preemptible otherwise. Remaining rows: the job's rows (as if
        waiting) times the share left, from the progress saved at its last move and the time run
        since its last (re)start against the prediction for this run. Its wait: since its submission
        (the record's, as first seen, whatever a requeue does to Slurm's) less its runs, the earlier
        ones from the moves that ended them, as the simulator counts it (`waited_so_far`)."""
        by_id = {job.job_id: (job, row) for job, row in seen.values() if row is not None}
        past = move_records.history(self.db, [row["uid"] for job, row in by_id.values() if job.running])
        none = move_records.JobMoves()
        out, n = [], 0
        for rj in state.running:
            job, row = by_id.get(rj.job_id, (None, None))
            s = self.decode(job.comment)[0] if job is not None else None
            if (job is None or row is None or s is None or not job.running or row["state"] != "running"
                    or rj.job_id in moving or not checkpointable(row)):
                out.append(replace(rj, preemptible=False))
                continue
            wj = on_its_type(self.waiting(ctx, s, job), rj.placement, ctx.types)
            hist = past.get(row["uid"], none)
            done = hist.last_done
            saved = min(1.0, (done["ckpt_step"] + 1) / max(1, s.iterations)) if done and done["ckpt_step"] is not None else 0.0
            pred = row.get("predicted")
            # this run's predicted length as the builder shows it (trust-scaled: lyasched.policy.snapshot)
            seg = rj.predicted_end - rj.start_time if math.isfinite(rj.predicted_end) else (float(pred) if pred else math.nan)
            if s.adaptive:  # its rows are already what is left from its reported base steps
                saved, seg = 0.0, math.nan
            run = max(0.0, ctx.now - rj.start_time)
            out.append(movable_job(
                rj, one=wj.run_one_node, multi=wj.run_multi_node, work=wj.work, scale=share_left(1.0 - saved, seg - run, seg),
                requested=s.min_gpus, move_cost=hist.cost_s if hist.cost_s is not None else math.nan, checkpointable=True,
                waited=waited_so_far(ctx.now, row.get("submit_time") or wj.submit_time, hist.held_before,
                                     rj.start_time),
                moves=hist.done, adaptive=wj.adaptive, pieces=wj.pieces,
            ))
            n += 1
        return replace(state, running=tuple(out)), n

    def end_slot(self, ctx: SlotContext) -> None:
        """The next slot reuses this one's model inputs (also called for a slot that failed); the
        predictions of rows made since the last `flush` are written."""
        self._models_seen = ctx.models or self._models_seen
        self.flush()

    def flush(self) -> None:
        """Record the predictions of the rows made since the last call (lyastat's, and the arrival
        history a restart rebuilds), in one transaction: one write per job would cost a first slot
        over a long queue a commit per job."""
        if self._pending:
            pending, self._pending = self._pending, []
            records.upsert_jobs(self.db, ("pred_one", "pred_multi", "work"), pending)

    def correction(self, ctx: SlotContext, sig: str, device: str | None = None) -> float:
        """The bounded observed/predicted correction learned for this model on GPU type ``device``
        (default: the cluster's key) (1 if none)."""
        key = (sig, device or ctx.device)
        if key not in ctx.corrections:
            entry = costtable.get(self.db, sig, key[1])
            ctx.corrections[key] = bounded_correction(entry.correction if entry else None)
        return ctx.corrections[key]

    def device_of(self, ctx: SlotContext, s: CostSummary, job: SlurmJob) -> str:
        """The GPU type a waiting job is predicted on: the fastest of its allowed types that a node
        has (lyasched.live.typecost.profile_type); the cluster's key on untyped nodes, or when the
        admin keys every type as one (``[service] device``, ``LYASCHED_DEVICE_TYPE``)."""
        key = (_PER_TYPE, ctx.device, id(ctx.types))  # asked once per waiting job: the answer once per slot
        per = ctx.type_memo.get(key)
        if per is None:
            per = ctx.type_memo[key] = ctx.per_type
        if not per:  # untyped, or one key set by the admin
            return ctx.device
        allowed = allowed_of(s, job)
        pkey = ("profile_type", allowed)  # once per slot and set of allowed types
        hit = ctx.type_memo.get(pkey)
        if hit is None:
            from lyasched.live import typecost

            t = typecost.profile_type(allowed, ctx.types, ctx.gpu_types)
            hit = ctx.type_memo[pkey] = self.device_key(ctx, t)
        return hit

    @staticmethod
    def device_key(ctx: SlotContext, t: str) -> str:
        """The cost-table key of node type ``t`` (the cluster's for untyped nodes), once per slot."""
        key = ("device", t)
        hit = ctx.type_memo.get(key)
        if hit is None:
            hit = ctx.type_memo[key] = device_type(t) if t else ctx.device
        return hit

    def waiting(self, ctx: SlotContext, s: CostSummary, job: SlurmJob) -> WaitingJob:
        cost = ctx.cost
        assert cost is not None
        if s.plain:
            return self.plain_waiting(ctx, s, job)
        # a profile belongs to a (model, GPU type): the type (`device_of`) and the model's inputs
        # (`model`) follow from these, so a long queue asks each pair once per slot
        wkey = (s.sig, job.user, s.profile_type, s.gpu_types, job.gpu_type)
        model = ctx.waiting_models.get(wkey)
        if model is None:
            model = ctx.waiting_models[wkey] = self.model(ctx, s, job.user, self.device_of(ctx, s, job))
        # typed nodes: the job's model inputs on each type it allows that a node has (its by_type rows)
        typed = tuple((t, self.model(ctx, s, job.user, self.device_key(ctx, t)))
                      for t in self.types_of(ctx, s, job)) if ctx.type_costs else None
        # The rows depend on the job (its summary, Slurm id, time limit, submit time, owner) and on
        # these inputs only: rebuilt when any of them changed (an admin's `scontrol update
        # TimeLimit=` included; kept objects compare by identity first: a slot compares cheaply).
        key = (s.uid, job.job_id)
        inputs: tuple = (cost.cluster, model, s, job.time_limit, job.submit_time, job.user, typed, ctx.type_costs or None)
        ad, frac = None, 0.0
        if s.adaptive:  # the batch is the policy's to choose: phi and progress from the job's reports
            phi, base = adaptive.job_state(self.db, s.uid)
            ad, frac = adaptive.adaptive_of(s, phi), adaptive.fraction_done(s, base)
            inputs = (*inputs, ad, round(frac, 3))
        ctx.rows_used.add(key)
        hit = self.rows.get(key)
        wj = hit[1] if hit is not None and hit[0] == inputs else None
        if ad is not None:
            aj = self._adaptive_job(s, job, ad)
            # typed nodes: its batch is chosen for the type it lands on (that type's cost model and profile)
            on = {t: (ctx.type_costs[t], replace(aj, profile=m[1] or aj.profile)) for t, m in typed} if typed else {}
            ctx.adaptive[job.job_id] = (aj, round(frac, 3), on)
        if wj is None:
            correction, learned, startup_s = model
            profile = learned or s.to_profile()
            limit = job.time_limit if math.isfinite(job.time_limit) else None
            j = Job(
                job_id=job.job_id,
                profile=profile,
                global_batch=s.global_batch,
                iterations=s.iterations,
                submit_time=job.submit_time or self.clock(),
                min_gpus=s.min_gpus,
                max_gpus=s.max_gpus,
                requested_gpus=s.min_gpus,
                time_limit=limit,
                user=job.user,
                adaptive=ad,
            )
            wj = waiting_job(j, cost, cost.cluster.total_gpus, round(frac, 3))
            # what the model's shared profile says of it (a claim far below is replaced: ClusterSnapshot.known)
            k = None if s.adaptive else known_over_claim(cost, j, self.shared_profile(ctx, s.sig))
            if k is not None and k != 1.0:
                self.known[job.job_id] = k
            else:
                self.known.pop(job.job_id, None)
            # A summary is not trusted blindly: predictions are scaled by the correction learned
            # from this model's observed run times (bounded) and never exceed the Slurm time limit.
            one, multi = clamp_both(wj.run_one_node, wj.run_multi_node, limit, correction)
            wj = replace(
                wj,
                run_one_node=one,
                run_multi_node=multi,
                work=min(wj.work * correction, limit * max(1, s.max_gpus)) if limit else wj.work * correction,
            )
            wj = startup.with_startup(wj, startup_s, limit)  # lyasched.costmodel.startup: launch + imports + rendezvous
            if typed is not None:  # its rows on each type, by the simulator's builder
                wj = replace(wj, by_type=self._by_type(ctx, j, typed, round(frac, 3), max(1, s.max_gpus)))
            self.rows[key] = (inputs, wj)
            self.arrivals.add(job.job_id, wj.submit_time, requested_gpu_s(wj))
            self._pending.append((s.uid, encode_times(wj.run_one_node), encode_times(wj.run_multi_node), wj.work))
        return wj

    def waiting_rows(self, ctx: SlotContext, jobs: Sequence[tuple[CostSummary, SlurmJob]]) -> list[WaitingJob]:
        """`waiting` of each (summary, Slurm job), in order. A long queue is mostly jobs whose rows
        are kept from an earlier slot with the same inputs: on untyped nodes, such a job's rows are
        found here with the slot's lookups made once (what `waiting` does for it, without a call per
        job); any other job goes through `waiting`."""
        cost = ctx.cost
        if cost is None or ctx.type_costs:
            return [self.waiting(ctx, s, job) for s, job in jobs]
        cluster, models, rows, used = cost.cluster, ctx.waiting_models, self.rows, ctx.rows_used
        out: list[WaitingJob] = []
        for s, job in jobs:
            if not s.plain and not s.adaptive:
                model = models.get((s.sig, job.user, s.profile_type, s.gpu_types, job.gpu_type))
                if model is not None:
                    key = (s.uid, job.job_id)
                    hit = rows.get(key)
                    # `waiting`'s inputs of an untyped, fixed-batch job (its last two: no type rows)
                    if hit is not None and hit[0] == (cluster, model, s, job.time_limit, job.submit_time, job.user,
                                                      None, None):
                        used.add(key)
                        out.append(hit[1])
                        continue
            out.append(self.waiting(ctx, s, job))
        return out

    def shared_profile(self, ctx: SlotContext, sig: str) -> Profile | None:
        """`shared_profile` of (sig, this slot's device), read once per model per slot (it is a cost
        table read; thousands of new jobs of one model share it)."""
        key = ("shared_profile", sig, ctx.device)
        if key not in ctx.type_memo:
            ctx.type_memo[key] = shared_profile(self.db, sig, ctx.device)
        return ctx.type_memo[key]

    def model(self, ctx: SlotContext, s: CostSummary, user: str, dev: str) -> tuple:
        """(correction, learned or roofline profile, start-up s) of the summary's model for ``user``'s
        jobs on GPU type ``dev``: once per model, user and type per slot (`SlotContext.models`), the
        last slot's object while equal."""
        src = s.profile_type or ctx.device  # the type the summary's profile is of
        mkey = (s.sig, user or "", dev, src)  # a user's own runs teach that user's jobs (lyasched.costmodel.learn.refit_shared)
        model = ctx.models.get(mkey)
        if model is None:
            learned, startup_s = learning.typed_inputs(self.db, s, dev, src, user, ctx.gpu_types)
            model = (self.correction(ctx, s.sig, dev), learned, startup_s)
            old = self._models_seen.get(mkey)
            model = ctx.models[mkey] = self._models_seen[mkey] = old if old == model else model
        return model

    @staticmethod
    def types_of(ctx: SlotContext, s: CostSummary, job: SlurmJob) -> tuple[str, ...]:
        """The node types ``job`` may run on, in the nodes' order: those it allows (its summary's,
        else its request's: `gputypes.allowed_types`, from the summary already decoded), every one
        for a job of any type; with a --constraint, only types with a node of its features (`gputypes.featured`)."""
        allowed = allowed_of(s, job)
        key = ("types_of", allowed, s.constraint)
        hit = ctx.type_memo.get(key)
        if hit is None:
            ok = gputypes.featured(ctx, s.constraint)
            hit = ctx.type_memo[key] = tuple(t for t in ctx.type_costs if (t in allowed if allowed else True) and t in ok)
        return hit

    def _by_type(self, ctx: SlotContext, j: Job, typed: tuple, frac: float, max_gpus: int) -> dict[str, WaitingJob]:
        """`WaitingJob.by_type` of ``j`` (its profile, the one predicted on the fastest allowed
        type): on each of ``typed``'s types with the profile the service knows there (learned on
        it, else measured, else the roofline's from a measured type: `model`), made by the one
        builder replay uses (`type_rows`), each type's rows corrected, capped and given the
        start-up term as the job's own rows are."""
        assert ctx.cost is not None
        if not typed:  # no type it may run on has a node (its --constraint's features): no rows
            return {}
        models = dict(typed)
        base = j.profile
        measured = {(base.model, t): (m[1] or base) for t, m in typed}
        limit = j.time_limit

        def finish(t: str, w: WaitingJob) -> WaitingJob:
            correction, _, startup_s = models[t]
            w = replace(w, run_one_node=clamp_run_times(w.run_one_node, limit, correction),
                        run_multi_node=clamp_run_times(w.run_multi_node, limit, correction),
                        work=min(w.work * correction, limit * max_gpus) if limit else w.work * correction)
            return startup.with_startup(w, startup_s, limit)

        return type_rows(j, ctx.type_costs, tuple(models), "", ctx.cost.cluster.total_gpus, measured,
                         ctx.gpu_types, frac, finish)

    def _adaptive_job(self, s: CostSummary, job: SlurmJob, ad: Adaptive) -> Job:
        """What the starter and the mover choose an adaptive job's batch from (its summary's profile)."""
        return Job(job_id=job.job_id, profile=s.to_profile(), global_batch=s.global_batch, iterations=s.iterations,
                   min_gpus=s.min_gpus, max_gpus=s.max_gpus, adaptive=ad)

    def plain_waiting(self, ctx: SlotContext, s: CostSummary, job: SlurmJob) -> WaitingJob:
        """A managed partition's plain job (lyasched.live.plain): its run time is the estimate
        from the history of similar jobs, capped at its time limit; its rows are rebuilt when
        the estimate changes (a similar job finished)."""
        cost = ctx.cost
        assert cost is not None
        est = self.plain.estimate(job, s, ctx.now)
        key = (s.uid, job.job_id)
        inputs = (cost.cluster, est, s, job.time_limit, job.submit_time, job.user, ctx.type_costs or None)
        ctx.rows_used.add(key)
        hit = self.rows.get(key)
        if hit is not None and hit[0] == inputs:
            return hit[1]
        limit = job.time_limit if math.isfinite(job.time_limit) else None
        j = plain.plain_job(job.job_id, s, est, job.submit_time or self.clock(), job.user, limit)
        wj = waiting_job(j, cost, cost.cluster.total_gpus)
        wj = replace(wj, run_one_node=clamp_run_times(wj.run_one_node, limit, 1.0),
                     run_multi_node=clamp_run_times(wj.run_multi_node, limit, 1.0))
        if ctx.type_costs:  # typed nodes: the estimate on each type it may run on (its request's type only)
            types = self.types_of(ctx, s, job)
            wj = replace(wj, by_type=type_rows(
                j, ctx.type_costs, types, "", cost.cluster.total_gpus, {(j.profile.model, t): j.profile for t in types},
                ctx.gpu_types, finish=lambda t, w: replace(
                    w, run_one_node=clamp_run_times(w.run_one_node, limit, 1.0),
                    run_multi_node=clamp_run_times(w.run_multi_node, limit, 1.0))) if types else {})
        self.rows[key] = (inputs, wj)
        self.arrivals.add(job.job_id, wj.submit_time, requested_gpu_s(wj))
        records.upsert_job(self.db, s.uid, pred_one=encode_times(wj.run_one_node.tolist()),
                           pred_multi=encode_times(wj.run_multi_node.tolist()), work=wj.work,
                           reason=f"estimate {est.mean_s:.0f} s from {est.source} (n={est.n}, spread {est.spread:.2f})")
        return wj

    def decode(self, comment: str) -> tuple[CostSummary | None, str]:
        """Decoded summary (or None and why), cached: a job's comment is read every slot."""
        hit = self._summaries.get(comment)
        if hit is None:
            try:
                hit = (CostSummary.decode(comment), "")
            except ValueError as e:
                hit = (None, str(e))
            if len(self._summaries) > 100_000:
                self._summaries.clear()
            self._summaries[comment] = hit
        return hit

    def running(self, job: SlurmJob, row: dict, placement: Placement, now: float) -> RunningObs:
        """A running (or released) job as observed; its horizon is the builder's (policy/snapshot.py).
        A plain job that has run past its estimate is predicted by `PlainJobs.expected_run` (what
        its similar jobs that ran as long ran, capped at its time limit): the rule `whatif
        --managed` replays, so no policy plans around a job that should already have ended."""
        pred = row.get("predicted")
        if pred and job.running and job.start_time is not None and now - job.start_time >= float(pred):
            s, _ = self.decode(job.comment)
            if s is not None and s.plain:
                pred = self.plain.expected_run(job, s, float(pred), now)
        return RunningObs(
            job_id=job.job_id,
            placement=placement,
            start_time=job.start_time or row.get("released_at") or now,
            predicted_run=float(pred) if pred else math.nan,
            time_limit=job.time_limit,
            user=job.user,  # its tenant (lyasched.live.tenants)
        )

    def load_arrivals(self) -> None:
        """Rebuild the arrival history from the records (a restart keeps the offered-load estimate):
        every job whose rows were computed, at its requested count (predictions stored to the ms)."""
        for row in self.db.query("select slurm_id, submit_time, summary, pred_one, pred_multi from jobs "
                                 "where pred_one is not null and submit_time is not null"):
            try:
                s = CostSummary.decode(row["summary"])
                one = np.array(decode_times(row["pred_one"]), dtype=float)
                multi = np.array(decode_times(row["pred_multi"]) or [math.inf] * len(one), dtype=float)
            except (ValueError, TypeError):
                continue
            if not len(one):
                continue
            wj = WaitingJob(job_id=row["slurm_id"], submit_time=row["submit_time"], work=0.0, run_one_node=one,
                            run_multi_node=multi, requested_gpus=max(1, min(s.min_gpus, len(one))))
            self.arrivals.add(row["slurm_id"], row["submit_time"], requested_gpu_s(wj))


_PER_TYPE = "device_of per_type"  # SlotContext.type_memo: this slot's `SlotContext.per_type`


def clamp_both(one: np.ndarray, multi: np.ndarray, limit: float | None, correction: float) -> tuple[np.ndarray, np.ndarray]:
    """`clamp_run_times` of a job's two rows in one call (it works element by element: the same
    values as two calls, at half the calls)."""
    both = clamp_run_times(np.concatenate((np.asarray(one, dtype=float), np.asarray(multi, dtype=float))), limit, correction)
    n = len(one)
    return both[:n], both[n:]


def allowed_of(s: CostSummary, job: SlurmJob) -> tuple[str, ...]:
    """`gputypes.allowed_types` of a job whose comment is already decoded (``s``): its summary's
    types, else its request's; () = any."""
    return s.gpu_types or ((job.gpu_type,) if job.gpu_type else ())


def on_its_type(wj: WaitingJob, placement: Placement, node_types: Sequence[str]) -> WaitingJob:
    """A running job's rows as its movers' view shows them: those of the one GPU type of its nodes
    (`WaitingJob.by_type`), its own rows on an untyped cluster or when its nodes' type is not one
    of its rows' (never on a typed cluster: the placement step keeps a job on one allowed type)."""
    if not wj.by_type:
        return wj
    types = {node_types[n] for n, _ in placement if 0 <= n < len(node_types)}
    return wj.by_type.get(next(iter(types)), wj) if len(types) == 1 else wj
