"""Typed GPU requests on the real test clusters (marker ``slurm``), whose nodes carry two GPU types:
node1 and node2 ``gpu:a100:4``, node3 ``gpu:t4:4`` (docs/test-cluster.md). A job that asked for a
type runs on that type only, whoever releases it: the service (a lyasub job, and a plain sbatch job
of the managed partition), the fail-safe, and a move (an in-process service: on the docker cluster it
reaches Slurm through docker/bin as root of the login node, and reads the job's checkpoint marker in
the job directory, shared at the same path). Its
``--constraint`` (Slurm's Features) survives the updates too: ``scontrol update`` of TresPerNode and
ReqNodeList leaves Features as submitted (checked on 22.05), and the service places a job of any type
on the nodes with its features.

Slurm 22.05 refuses an untyped ``TresPerNode=gres:gpu:N`` update of a typed job ("Invalid GRES
specification (with and without type identification)"): without the type in every update such a
job could never be started by lyasched at all.
"""

from __future__ import annotations

import os
import time

import pytest

from lyasched.live import lease as leases
from test_failsafe_slurm import run_failsafe, start_service, stop_service, write_config
from test_managed_slurm import PARTITION, sbatch, submitted
from test_serve_slurm import lyasub, show_job, wait_all, work  # noqa: F401 (work: a fixture)

pytestmark = pytest.mark.slurm

A100, T4 = ("node1", "node2"), ("node3",)


def test_the_service_runs_a_typed_lyasub_job_and_a_typed_managed_sbatch_job_on_their_type(
        work, job_dir, test_user, as_user, slurm_jobs, cluster):
    cfg = write_config(work, test_user)
    svc = start_service(cluster, cfg, work / "serve.log")
    try:
        # lyapunov's best fit for 2 GPUs on an idle cluster is node1 (an a100): both must go to node3
        typed = lyasub(as_user, test_user, job_dir, "--job-name", "typed", "--model", "mlp", "--gpu-type", "t4",
                       "--constraint", "t4", "--global-batch", "8",
                       "--iterations", "3", "--min-gpus", "2", "--max-gpus", "2")
        slurm_jobs.append(typed)
        plain = submitted(sbatch(as_user, test_user, job_dir, "-p", PARTITION, "--gres=gpu:t4:2", "--time=5",
                                 script='echo "$(id -un) $SLURMD_NODENAME $SLURM_GPUS_ON_NODE"\n'), slurm_jobs)
        assert show_job(plain).comment.endswith(";pl=1")  # taken by lyasched (held), its type kept
        # a job of any type whose --constraint names node3's Features: placed there by the service
        # (before, it was released onto an a100 node and stayed pending: BadConstraints)
        constrained = lyasub(as_user, test_user, job_dir, "--job-name", "ft", "--model", "mlp", "--constraint", "t4",
                             "--global-batch", "8", "--iterations", "3", "--min-gpus", "2", "--max-gpus", "2")
        slurm_jobs.append(constrained)
        done = wait_all([typed, plain, constrained], timeout=180, log=work / "serve.log")
    finally:
        stop_service(svc)
    assert {j.state for j in done.values()} == {"COMPLETED"}, done
    for job in (typed, plain):
        shown = show_job(job)
        assert shown.nodes == T4 and (shown.gpu_type, shown.gpus_per_node) == ("t4", 2), shown
    assert show_job(constrained).nodes == T4 and features(as_user, constrained) == "t4"
    assert (job_dir / f"{plain}.out").read_text().split() == [test_user, "node3", "2"]
    assert features(as_user, typed) == "t4"  # the service's update (TresPerNode, ReqNodeList) kept --constraint


def test_the_failsafe_releases_typed_jobs_on_their_type(work, job_dir, test_user, as_user, slurm_jobs, cluster):
    cfg = write_config(work, test_user)
    lease = work / "lease.json"  # a service that stopped renewing long ago: the fail-safe acts at once
    leases.write(lease, leases.Lease("gone-host:1", 3, time.time() - 3600, 2.0))
    if cluster.service_uid:
        os.chown(lease, cluster.service_uid, cluster.service_uid)
    t4 = lyasub(as_user, test_user, job_dir, "--job-name", "t4", "--model", "mlp", "--gpu-type", "t4", "--constraint", "t4",
                "--global-batch", "8",
                "--iterations", "3", "--min-gpus", "2", "--max-gpus", "2")
    wide = lyasub(as_user, test_user, job_dir, "--job-name", "wide", "--model", "mlp", "--gpu-type", "a100", "--global-batch", "16",
                  "--iterations", "3", "--min-gpus", "8", "--max-gpus", "8")
    slurm_jobs.extend([t4, wide])
    res = run_failsafe(cluster, cfg)
    got = {e["job_id"]: (e["nodes"], e["per_node"], e.get("gpu_type")) for e in res["released"]}
    assert got == {t4: (1, 2, "t4"), wide: (2, 4, "a100")}, res
    done = wait_all([t4, wide], timeout=180)
    assert {j.state for j in done.values()} == {"COMPLETED"}, done
    assert show_job(t4).nodes == T4 and show_job(t4).gpu_type == "t4"
    assert show_job(wide).nodes == A100 and show_job(wide).gpu_type == "a100"
    assert features(as_user, t4) == "t4"  # the fail-safe's update kept --constraint


def features(as_user, job_id: str) -> str:
    """The job's Features (its --constraint) as `scontrol show job` reports it."""
    r = as_user("root", "scontrol", "show", "job", "-o", job_id)
    assert r.returncode == 0, r.stderr
    return next((w.split("=", 1)[1] for w in r.stdout.split() if w.startswith("Features=")), "")


def _serve_until_finished(svc, db, job_dir, a: str, arm) -> list[tuple]:
    """Run the service's slots until job ``a`` finished and no move is open (at most 240 s), calling
    ``arm()`` once, when ``a`` runs with a complete checkpoint; each slot's (state, nodes, type, GPUs
    per node) of ``a``."""
    from lyasched.store import moves, records

    seen, armed = [], False
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        rep = svc.run_slot()
        assert not rep.error, rep.error
        job = show_job(a)
        seen.append((job.state, job.nodes, job.gpu_type, job.gpus_per_node))
        row = records.job_by_slurm_id(db, a)
        if not armed and job.state == "RUNNING" and row is not None:
            if (job_dir / ".lyasched" / f"ckpt-{row['uid']}" / "complete.json").exists():
                arm()
                armed = True
        if row is not None and row["state"] == "finished" and not moves.open_moves(db):
            break
        time.sleep(2)
    return seen


def test_an_elastic_move_keeps_a_typed_job_on_its_type(job_dir, test_user, as_user, slurm_jobs):
    from lyasched.config import Config
    from lyasched.policy.movable import MovableJob
    from lyasched.policy.state import Capabilities, Decision, SlotResult, SlotState
    from lyasched.service import Service
    from lyasched.store import moves, records
    from test_elastic_slurm import MODEL, TRAIN, TRAIN_ARGS, _final, _lyasub
    from test_serve_slurm import WRAPPER

    class OntoT4:
        """Start A on 1 GPU of node3 (a t4), then grow it to 2 GPUs of node3: A allows a100 only,
        so the service must place both on an a100 node instead."""

        name = "scripted-onto-t4"
        capabilities = Capabilities(preemptive=True, moves=True)
        grow = False

        def decide(self, state: SlotState) -> SlotResult:
            starts, pre = [], []
            if any(w.job_id == a for w in state.waiting):
                starts.append(Decision(a, 1, ((2, 1),), 1.0, "start on node3"))
            ra = next((r for r in state.running if r.job_id == a), None)
            if self.grow and isinstance(ra, MovableJob) and ra.preemptible and ra.gpus == 1:
                pre.append(a)
                starts.append(Decision(a, 2, ((2, 2),), 1.0, "grow on node3"))
                self.grow = False
            return SlotResult(starts=tuple(starts), preempt=tuple(pre), info={"moves": {a: "grow"} if pre else {}})

    (job_dir / "train.py").write_text(WRAPPER.format(out=str(job_dir), train=str(TRAIN)))
    (job_dir / "train.py").chmod(0o644)
    assert MODEL  # the elastic test's small model
    a = _lyasub(as_user, test_user, job_dir, 60, *TRAIN_ARGS, "--step-sleep", "0.2", "--checkpoint-every", "5",
                extra=("--gpu-type", "a100", "--max-gpus", "2"))
    slurm_jobs.append(a)
    db = records.open_records(job_dir / "svc.db")
    policy = OntoT4()
    svc = Service(Config(slot_seconds=2, release_grace=120, move_timeout=120, users=(test_user,)), db, policy=policy)
    seen = _serve_until_finished(svc, db, job_dir, a, lambda: setattr(policy, "grow", True))
    uid = records.job_by_slurm_id(db, a)["uid"]
    done = [(m["kind"], m["from_gpus"], m["to_gpus"], m["state"]) for m in moves.for_job(db, uid)]
    assert done == [("grow", 1, 2, "done")], seen
    ran = [(nodes, t, g) for state, nodes, t, g in seen if state == "RUNNING"]
    assert ran and all(set(nodes) <= set(A100) and t == "a100" for nodes, t, _ in ran), ran
    assert {g for _, _, g in ran} == {1, 2}, ran  # it ran on 1 GPU, then (after the move) on 2
    assert show_job(a).state == "COMPLETED"
    assert _final(job_dir / f"{a}.out")["world_size"] == 2


def test_the_service_chooses_the_fast_type_for_a_job_of_any_type(work, job_dir, test_user, as_user, slurm_jobs, cluster):
    """The service's input is typed (docs/types.md, "Live"): with 2 of node3's t4s taken by a job
    lyasched does not own, a 2-GPU job of any type goes to an a100 node (node1 or node2), the
    fastest type where it fits; an untyped view's best fit would be node3's 2 free t4s."""
    r = as_user(test_user, "sbatch", "--parsable", "--nodelist=node3", "--gres=gpu:t4:2", "--time=5",
                f"--chdir={job_dir}", "--output=/dev/null", "--wrap", "sleep 120")
    assert r.returncode == 0, r.stderr
    blocker = r.stdout.strip().split(";")[0]
    slurm_jobs.append(blocker)
    deadline = time.monotonic() + 60
    while show_job(blocker).state != "RUNNING":
        assert time.monotonic() < deadline, show_job(blocker)
        time.sleep(1)
    cfg = write_config(work, test_user)
    svc = start_service(cluster, cfg, work / "serve.log")
    try:
        anyt = lyasub(as_user, test_user, job_dir, "--job-name", "anytype", "--model", "mlp", "--global-batch", "8",
                      "--iterations", "3", "--min-gpus", "2", "--max-gpus", "2")
        slurm_jobs.append(anyt)
        done = wait_all([anyt], timeout=150, log=work / "serve.log")
    finally:
        stop_service(svc)
    assert done[anyt].state == "COMPLETED", done
    shown = show_job(anyt)
    assert len(shown.nodes) == 1 and shown.nodes[0] in A100 and shown.gpus_per_node == 2, shown


def test_a_move_takes_a_job_of_any_type_from_a_t4_to_an_a100(job_dir, test_user, as_user, slurm_jobs):
    """Elastic's moves across types (docs/types.md) in the live path: a job that allowed every type
    starts on a t4 (node3), and a move of the same count onto node1 restarts it from its checkpoint
    on an a100: the job's request stays untyped (gres:gpu:1), its nodes change."""
    from lyasched.config import Config
    from lyasched.policy.movable import MovableJob
    from lyasched.policy.state import Capabilities, Decision, SlotResult, SlotState
    from lyasched.service import Service
    from lyasched.store import moves, records
    from test_elastic_slurm import MODEL, TRAIN, TRAIN_ARGS, _final, _lyasub
    from test_serve_slurm import WRAPPER

    class OntoA100:
        """Start A on 1 GPU of node3 (a t4), then move it to 1 GPU of node1 (an a100)."""

        name = "scripted-onto-a100"
        capabilities = Capabilities(preemptive=True, moves=True)
        move = False

        def decide(self, state: SlotState) -> SlotResult:
            starts, pre = [], []
            if any(w.job_id == a for w in state.waiting):
                starts.append(Decision(a, 1, ((2, 1),), 1.0, "start on node3"))
            ra = next((r for r in state.running if r.job_id == a), None)
            if self.move and isinstance(ra, MovableJob) and ra.preemptible and ra.placement == ((2, 1),):
                pre.append(a)
                starts.append(Decision(a, 1, ((0, 1),), 1.0, "onto node1"))
                self.move = False
            return SlotResult(starts=tuple(starts), preempt=tuple(pre),
                              info={"moves": {a: "onto an a100"} if pre else {}})

    (job_dir / "train.py").write_text(WRAPPER.format(out=str(job_dir), train=str(TRAIN)))
    (job_dir / "train.py").chmod(0o644)
    assert MODEL
    a = _lyasub(as_user, test_user, job_dir, 60, *TRAIN_ARGS, "--step-sleep", "0.2", "--checkpoint-every", "5",
                extra=("--max-gpus", "1"))
    slurm_jobs.append(a)
    db = records.open_records(job_dir / "svc.db")
    policy = OntoA100()
    svc = Service(Config(slot_seconds=2, release_grace=120, move_timeout=120, users=(test_user,)), db, policy=policy)
    seen = _serve_until_finished(svc, db, job_dir, a, lambda: setattr(policy, "move", True))
    uid = records.job_by_slurm_id(db, a)["uid"]
    done = [(m["kind"], m["from_gpus"], m["to_gpus"], m["state"]) for m in moves.for_job(db, uid)]
    assert done == [("resize", 1, 1, "done")], seen
    ran = [(tuple(nodes), t) for state, nodes, t, _ in seen if state == "RUNNING"]
    assert ran[0] == (T4, "") and ran[-1] == (("node1",), ""), ran
    assert show_job(a).state == "COMPLETED"
    assert _final(job_dir / f"{a}.out")["world_size"] == 1
