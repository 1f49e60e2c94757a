"""Replay = serve: one cluster history fed to the simulator and to the service gives the same
`SlotState` and the same decisions, slot by slot (issue 9).

The service reads Slurm's own text output (squeue / scontrol show node, Slurm 22.05 formats) from
`ReplayedSlurm`, which plays the history the simulator computes: jobs appear held at their submit
time, a released job starts at its release and ends after the run time the service predicted
(estimate error 0, so the simulator's true run time is that prediction), nodes report the GPUs in
use. Every simulator `decide` call must meet an identical service state; every other service slot
must start nothing. The `slurm`-marked variant runs a short workload on the real test cluster.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from lyasched.config import Config
from lyasched.costmodel.cost import ClusterSpec
from lyasched.costmodel.jobspec import Job
from lyasched.policy import SlotState, make_policy
from lyasched.service import Service
from lyasched.sim import Simulation
from lyasched.slurm import query as q
from lyasched.store import records
from lyasched.summary import CostSummary
from reliability.users import TEST_USER
from slurm_views import NODE_LINE, OnlyJobs

SLOT = 30.0
LIMIT_S = 86_400.0  # "1-00:00:00": longer than any run, so no prediction is clamped to it
T0 = 1_000_020.0  # a slot boundary (a multiple of SLOT)


def _summary(i: int, gmin: int, gmax: int, batch: int, iters: int, alpha: float, beta: float) -> CostSummary:
    return CostSummary(uid=f"uid-{i:08d}", sig=f"cnn:parity{i}", global_batch=batch, iterations=iters,
                       min_gpus=gmin, max_gpus=gmax, alpha=alpha, beta=beta, params=2_000_000)


def workload(n: int = 14, seed: int = 5) -> list[tuple[str, float, CostSummary]]:
    """(Slurm job id, submit time, cost summary): bursts of small and wide jobs on 2 x 4 GPUs."""
    rng = np.random.default_rng(seed)
    out = []
    t = T0 + 3.0
    for i in range(n):
        gmin = int(rng.choice([1, 1, 2, 4]))
        gmax = 8 if i % 3 == 0 else int(rng.choice([2, 4, 8]))
        gmax = max(gmax, gmin)
        s = _summary(i, gmin, gmax, batch=64, iters=int(rng.integers(2_000, 20_000)),
                     alpha=float(rng.uniform(0.02, 0.2)), beta=float(rng.uniform(0.001, 0.01)))
        out.append((str(500 + i), round(t, 1), s))
        t += float(rng.choice([1.0, 40.0, 200.0, 900.0]))
    return out


@dataclass
class _Job:
    job_id: str
    comment: str
    submit: float
    state: str = "PENDING"
    reason: str = "JobHeldUser"
    start: float | None = None
    end: float | None = None
    nodes: tuple[str, ...] = ()
    gpn: int = 1

    def line(self) -> str:
        return "|".join([
            self.job_id, "alice", "1001", self.state, self.reason, "0" if self.reason.startswith("JobHeld") else "100",
            q.format_time(self.submit), q.format_time(self.start) if self.start else "N/A",
            q.format_time(self.end) if self.end else "N/A", "1-00:00:00", str(max(1, len(self.nodes))),
            f"gres:gpu:{self.gpn}", ",".join(self.nodes), "gpu", self.comment, "train",
        ])


@dataclass
class ReplayedSlurm:
    """Slurm's CLI output for a history played forward in time (see the module docstring)."""

    jobs: list[_Job]
    nodes: tuple[str, ...] = ("node1", "node2")
    gpn: int = 4
    now: float = 0.0
    resized: dict[str, tuple[int, list[str]]] = field(default_factory=dict)
    released_at: dict[str, float] = field(default_factory=dict)

    def advance(self, now: float, run_time: dict[str, float]) -> None:
        """Move time to ``now``: released jobs run from their release, runs end at start + run time."""
        self.now = now
        for j in self.jobs:
            if j.state == "PENDING" and j.job_id in self.released_at:
                per, names = self.resized[j.job_id]
                j.state, j.reason, j.start, j.nodes, j.gpn = "RUNNING", "None", self.released_at[j.job_id], tuple(names), per
            if j.state == "RUNNING" and j.start + run_time[j.job_id] <= now:
                j.state, j.reason, j.end = "COMPLETED", "None", j.start + run_time[j.job_id]

    def run(self, args, *, idempotent=True, input=None):
        args = list(args)
        if args[:3] == ["scontrol", "show", "node"]:
            used = {n: 0 for n in self.nodes}
            for j in self.jobs:
                if j.state == "RUNNING":
                    for n in j.nodes:
                        used[n] += j.gpn
            return "\n".join(NODE_LINE.format(name=n, total=self.gpn, used=used[n], state="MIXED" if used[n] else "IDLE")
                             for n in self.nodes) + "\n"
        if args[0] == "squeue":
            return "".join(j.line() + "\n" for j in self.jobs if j.submit <= self.now)
        if args[:3] == ["scontrol", "show", "config"]:
            return "AccountingStorageType   = accounting_storage/none\n"
        if args[:2] == ["scontrol", "update"]:
            kv = dict(a.split("=", 1) for a in args[2:] if "=" in a)
            job_id = kv["JobId"]
            per = int(kv["TresPerNode"].rsplit(":", 1)[1])
            names = q.expand_hostlist(kv["ReqNodeList"])
            self.resized[job_id] = (per, names)
            return ""
        if args[:2] == ["scontrol", "release"]:
            self.released_at[args[2]] = self.now
            for j in self.jobs:
                if j.job_id == args[2]:
                    j.reason = "Resources"
            return ""
        raise AssertionError(f"unexpected Slurm command {args}")


class Recorder:
    """Wraps a policy: records each SlotState it decides on and the decisions (job, GPUs, placement)."""

    def __init__(self, policy):
        self.policy = policy
        self.name = policy.name
        self.capabilities = policy.capabilities if hasattr(policy, "capabilities") else None
        self.types_aware = getattr(policy, "types_aware", False)  # what replay builds a typed view by
        self.calls: list[tuple[SlotState, tuple]] = []

    def decide(self, state):
        res = self.policy.decide(state)
        self.calls.append((state, tuple((d.job_id, d.gpus, tuple(d.placement)) for d in res.starts), res.q, res.z))
        return res


def _close(a: float, b: float) -> bool:
    return a == b or (math.isfinite(a) and math.isfinite(b) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6))


def assert_same_state(sim: SlotState, live: SlotState) -> None:
    """Field by field; floats to 1e-9 relative (the service rounds nothing, but builds a job's
    rows directly where the simulator scales a one-iteration template)."""
    assert (sim.now, sim.slot_len, sim.free, sim.gpus_per_node) == (live.now, live.slot_len, live.free, live.gpus_per_node)
    assert [w.job_id for w in sim.waiting] == [w.job_id for w in live.waiting]
    for a, b in zip(sim.waiting, live.waiting):
        assert (a.requested_gpus, a.user, a.attained) == (b.requested_gpus, b.user, b.attained), a.job_id
        assert _close(a.submit_time, b.submit_time) and _close(a.work, b.work) and _close(a.time_limit, b.time_limit)
        assert np.allclose(a.run_one_node, b.run_one_node, rtol=1e-9, equal_nan=True), a.job_id
        assert np.allclose(a.run_multi_node, b.run_multi_node, rtol=1e-9, equal_nan=True), a.job_id
    key = lambda r: r.job_id  # noqa: E731
    assert [r.job_id for r in sorted(sim.running, key=key)] == [r.job_id for r in sorted(live.running, key=key)]
    for a, b in zip(sorted(sim.running, key=key), sorted(live.running, key=key)):
        assert (a.gpus, a.placement, a.preemptible, a.attained) == (b.gpus, b.placement, b.preemptible, b.attained)
        for f in ("start_time", "expected_end", "predicted_end"):
            assert _close(getattr(a, f), getattr(b, f)), (a.job_id, f, getattr(a, f), getattr(b, f))
    assert np.allclose(sim.arrivals_t, live.arrivals_t)
    assert np.allclose(sim.arrivals_cum_gpu_s, live.arrivals_cum_gpu_s, rtol=1e-9)


def replay_and_serve(policy_name: str, tmp_path) -> tuple[list, list, int]:
    history = workload()
    cfg = Config(slot_seconds=SLOT, db=tmp_path / "parity.db")
    cluster = ClusterSpec(nodes=2, gpus_per_node=4, gpu_mem=cfg.gpu_mem, intra=cfg.intra, inter=cfg.inter,
                          shape=cfg.shape)
    jobs = [Job(job_id=jid, profile=s.to_profile(), global_batch=s.global_batch, iterations=s.iterations,
                submit_time=t, min_gpus=s.min_gpus, max_gpus=s.max_gpus, requested_gpus=s.min_gpus,
                time_limit=LIMIT_S, user="alice") for jid, t, s in history]
    sim_pol = Recorder(make_policy(policy_name))
    res = Simulation(jobs, cluster, slot_len=SLOT, estimate_error=0.0, seed=0).run(sim_pol, name=policy_name)
    end = max(r.end for r in res.records)

    slurm = ReplayedSlurm([_Job(jid, s.encode(), t) for jid, t, s in history])
    db = records.open_records(str(tmp_path / "parity.db"))
    clock = {"t": T0}
    live_pol = Recorder(make_policy(policy_name))
    svc = Service(cfg, db, slurm=slurm, policy=live_pol, clock=lambda: clock["t"])
    run_time: dict[str, float] = {}
    live = {}
    t = T0
    slots = 0
    while t <= end + SLOT:
        clock["t"] = t
        slurm.advance(t, run_time)
        n_calls = len(live_pol.calls)
        report = svc.run_slot()
        assert not report.error, report.error
        for s in report.started:
            run_time[s["slurm_id"]] = records.get_job(db, f"uid-{int(s['slurm_id']) - 500:08d}")["predicted"]
        if len(live_pol.calls) > n_calls:
            live[t] = live_pol.calls[-1]
        slots += 1
        t += SLOT
    return sim_pol.calls, live, slots


@pytest.mark.parametrize("policy_name", ["lyapunov", "backfill", "fifo", "optimus"])
def test_replay_and_serve_see_the_same_states_and_decide_alike(policy_name, tmp_path):
    sim_calls, live, slots = replay_and_serve(policy_name, tmp_path)
    assert len(sim_calls) >= 5 and slots > len(sim_calls)
    sim_at = {state.now: (state, starts, qq, zz) for state, starts, qq, zz in sim_calls}
    for t, (state, starts, qq, zz) in sim_at.items():
        assert t in live, f"slot {t}: the simulator decided, the service did not"
        lstate, lstarts, lq, lz = live[t]
        assert_same_state(state, lstate)
        assert starts == lstarts, f"slot {t}: {starts} vs {lstarts}"
        assert _close(qq, lq) and _close(zz, lz)
    # slots the simulator skipped (nothing could happen) start nothing live either
    for t, (_, lstarts, _, _) in live.items():
        if t not in sim_at:
            assert lstarts == (), f"slot {t}: the service started {lstarts} where the simulator had nothing to do"
    started = {d[0] for _, s, _, _ in sim_calls for d in s}
    assert len(started) == len(workload())  # every job ran, in both


# --------------------------------------------------------------------------- on the real test cluster

@pytest.mark.slurm
def test_live_slots_on_the_test_cluster_replay_to_the_same_states_and_decisions(slurm_jobs, tmp_path):
    """A short workload (5 held jobs, 1-4 GPUs, sleeps) scheduled by the real service on the real
    cluster, slot by slot. Each slot's recorded snapshot, fed to a fresh policy through the
    simulator's builder, gives the state the service decided on and the same decisions; and every
    start Slurm carried out is the policy's placement exactly (nodes and GPUs per node), with no
    re-placement, because the policy placed by Slurm's rule."""
    import copy
    import time

    from conftest import run_as
    from lyasched.policy.snapshot import SlotStateBuilder
    from lyasched.policy.state import capabilities
    from lyasched.slurm import backend as bk
    from lyasched.summary import new_uid

    def sbatch(gmin: int, gmax: int, secs: int) -> str:
        s = CostSummary(uid=new_uid(), sig="cnn:parity", global_batch=8, iterations=100, min_gpus=gmin, max_gpus=gmax,
                        alpha=0.01, beta=0.002, params=1_000_000).encode()
        # as the test user on whichever test cluster runs (native: runuser; docker: the login container)
        r = run_as(TEST_USER, "sbatch", "--parsable", "-o", "/dev/null", "-t", "5", "-N1", f"--gres=gpu:{gmin}",
                   f"--comment={s}", "--wrap", f"sleep {secs}", timeout=60, cwd="/tmp")
        assert r.returncode == 0, r.stderr
        return r.stdout.strip().split(";")[0]

    ids = [sbatch(g, gx, s) for g, gx, s in [(2, 4, 6), (1, 2, 4), (4, 8, 6), (1, 1, 3), (2, 2, 4)]]
    slurm_jobs.extend(ids)
    slurm, _ = bk.make_backend("cli", timeout=30)
    rec = Recorder(make_policy("lyapunov"))
    svc = Service(Config(slot_seconds=2, users=(TEST_USER,), release_grace=60),
                  records.open_records(str(tmp_path / "live.db")), slurm=OnlyJobs(slurm, ids), policy=rec)
    snaps = []
    deadline = time.monotonic() + 120
    started: dict[str, dict] = {}
    while time.monotonic() < deadline:
        n = len(rec.calls)
        rep = svc.run_slot()
        assert not rep.error, rep.error
        if len(rec.calls) > n:
            snaps.append((copy.deepcopy(svc.last_snapshot), rec.calls[-1]))  # as it was then: later slots update its jobs' costs
        for s in rep.started:
            started[s["slurm_id"]] = s
        if len(started) == len(ids) and not rep.running:
            break
        time.sleep(2)
    assert len(started) == len(ids), f"only {sorted(started)} of {ids} started"

    fresh = make_policy("lyapunov")
    builder = SlotStateBuilder(capabilities(fresh))
    for snap, (state, starts, qq, zz) in snaps:
        again = builder.build(snap)
        assert_same_state(again, state)
        res = fresh.decide(again)
        assert tuple((d.job_id, d.gpus, tuple(d.placement)) for d in res.starts) == starts
        for jid, g, placement in starts:
            s = started[jid]
            assert s["nodes"] == [snap.nodes[i] for i, _ in placement]  # the policy's nodes, not a re-placement
            assert s["per_node"] == placement[0][1] and s["gpus"] == g
            ran_on = records.job_by_slurm_id(svc.db, jid)["nodes"]  # what Slurm listed while it ran
            assert ran_on is None or sorted(json.loads(ran_on)) == sorted(s["nodes"]), (jid, ran_on, s["nodes"])
