"""The Slurm interface and its two backends (lyasched.slurm.backend, docs/slurm-backends.md).

Unit part (no Slurm, no pyslurm needed): choosing a backend and its reasons, the version check,
`lyasched serve --slurm-backend` refusing a mismatch with one line and exit 2, error kinds, the
pyslurm worker's timeout/kill/restart/retry (with tests/fake_pyslurm_worker.py), the pyslurm
field mapping. Real-cluster part (marker ``slurm``): the same cluster state read through both
backends is equal (jobs, nodes, free GPUs), the same slot decided through either leaves the same
Slurm state, and a missing job, a non-operator and an unreachable controller give the same
errors through both.
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from lyasched.config import Config, ConfigError, from_mapping
from lyasched.slurm import NoSuchJob, PermissionDenied, SlurmCLI, SlurmError, SlurmUnavailable, slurm_error
from lyasched.slurm import backend as bk
from lyasched.slurm import pyslurm_backend as pb
from lyasched.slurm.cli import CliSlurm
from lyasched.slurm.pyslurm_worker import _gpus, _job
from lyasched.slurm.submit import SbatchOptions
from lyasched.summary import CostSummary, new_uid

REPO = Path(__file__).resolve().parents[1]
FAKE_WORKER = Path(__file__).with_name("fake_pyslurm_worker.py")
HAVE_PYSLURM = importlib.util.find_spec("pyslurm") is not None


# ------------------------------------------------------------------ choosing a backend


def test_config_slurm_backend() -> None:
    assert Config().slurm_backend == "auto"
    assert from_mapping({"slurm": {"backend": "pyslurm"}}).slurm_backend == "pyslurm"
    with pytest.raises(ConfigError, match="slurm.backend must be one of auto, cli, pyslurm"):
        from_mapping({"slurm": {"backend": "rest"}})
    with pytest.raises(ConfigError, match="unknown key slurm.timeout"):
        from_mapping({"slurm": {"timeout": 3}})


def test_flag_then_env_then_config(monkeypatch) -> None:
    monkeypatch.delenv(bk.BACKEND_ENV, raising=False)
    assert bk.backend_choice("pyslurm") == "pyslurm"
    monkeypatch.setenv(bk.BACKEND_ENV, "cli")
    assert bk.backend_choice("pyslurm") == "cli"
    assert bk.backend_choice("pyslurm", "auto") == "auto"


def test_versions_compare_by_major_minor() -> None:
    assert bk.major_minor("22.05.8") == bk.major_minor("22.5.3") == (22, 5)
    assert bk.major_minor("slurm 23.02.7") == (23, 2) != (22, 5)
    assert bk.major_minor("") is None


def test_cli_is_chosen_when_asked_and_when_pyslurm_is_missing(monkeypatch) -> None:
    b, why = bk.make_backend("cli")
    assert isinstance(b, CliSlurm) and why == "configured"
    monkeypatch.setattr(pb, "pyslurm_installed", lambda: None)
    b, why = bk.make_backend("auto")
    assert b.name == "cli" and why == "auto: pyslurm is not installed (make pyslurm)"
    with pytest.raises(bk.BackendChoiceError, match="^Slurm backend pyslurm: pyslurm is not installed"):
        bk.make_backend("pyslurm")


def _fake_pyslurm(monkeypatch, controller: str = "22.05.8", libslurm: str = "22.5.8") -> None:
    monkeypatch.setattr(pb, "pyslurm_installed", lambda: "22.5.3")

    def hello(self):
        return {"pyslurm": "22.5.3", "libslurm": libslurm, "controller": controller}

    monkeypatch.setattr(pb.PySlurm, "hello", hello)


def test_pyslurm_of_another_release_is_refused_or_skipped(monkeypatch) -> None:
    _fake_pyslurm(monkeypatch, controller="23.02.7")
    with pytest.raises(bk.BackendChoiceError) as e:
        bk.make_backend("pyslurm")
    assert str(e.value) == ("Slurm backend pyslurm: pyslurm 22.5.3 does not match the running Slurm 23.02.7 "
                            "(controller): major.minor must be equal")
    b, why = bk.make_backend("auto")
    assert b.name == "cli" and why.startswith("auto: pyslurm 22.5.3 does not match the running Slurm 23.02.7")


def test_auto_takes_a_matching_pyslurm_and_says_why(monkeypatch) -> None:
    _fake_pyslurm(monkeypatch)
    b, why = bk.make_backend("auto")
    assert b.name == "pyslurm" and why == "auto: pyslurm 22.5.3 matches Slurm 22.05.8 (controller)"
    _fake_pyslurm(monkeypatch, controller="")  # controller down at start-up: libslurm's version decides
    b, why = bk.make_backend("auto")
    assert b.name == "pyslurm" and "(libslurm (controller not answering))" in why


def test_serve_refuses_a_mismatched_pyslurm_with_one_line_and_exit_2(monkeypatch, tmp_path) -> None:
    from lyasched.cli.serve import serve

    _fake_pyslurm(monkeypatch, controller="21.08.5")
    monkeypatch.delenv(bk.BACKEND_ENV, raising=False)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[service]\ndb = "{tmp_path / "s.db"}"\n')
    cfg.chmod(0o644)
    r = CliRunner().invoke(serve, ["--config", str(cfg), "--slurm-backend", "pyslurm", "--once"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "Error: Slurm backend pyslurm: pyslurm 22.5.3 does not match the running Slurm 21.08.5 (controller): "
        "major.minor must be equal"]
    r = CliRunner().invoke(serve, ["--config", str(cfg), "--slurm-backend", "rest"])
    assert r.exit_code == 2 and "'rest' is not one of 'auto', 'cli', 'pyslurm'" in r.output


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("text, kind", [
    ("slurm_update error: Invalid job id specified", NoSuchJob),
    ("scontrol: error: Kill job error on job id 5: Invalid job id specified", NoSuchJob),
    ("slurm_update error: Access/permission denied", PermissionDenied),
    ("squeue: error: Unable to contact slurm controller (connect failure)", SlurmUnavailable),
    ("timed out after 2s", SlurmUnavailable),
    ("sbatch: error: Batch job submission failed: Invalid account", SlurmError),
])
def test_error_kinds(text, kind) -> None:
    e = slurm_error(["scontrol"], text)
    assert type(e) is kind and str(e) == f"scontrol failed: {text}"


def test_cli_does_not_retry_an_answer(tmp_path) -> None:
    tool = tmp_path / "tool.py"
    tool.write_text("import sys, pathlib\np = pathlib.Path(sys.argv[1]).with_name('n')\n"
                    "p.write_text(str(int(p.read_text()) + 1 if p.exists() else 1))\n"
                    "print(sys.argv[2], file=sys.stderr)\nsys.exit(1)\n")
    cli = SlurmCLI(retries=2, backoff=0, prefix=[sys.executable, str(tool), str(tmp_path / "x")])
    with pytest.raises(NoSuchJob):
        cli.run(["slurm_update error: Invalid job id specified"])
    assert (tmp_path / "n").read_text() == "1"
    with pytest.raises(SlurmUnavailable):
        cli.run(["Unable to contact slurm controller (connect failure)"])
    assert (tmp_path / "n").read_text() == "4"  # 1 + 3 attempts


# ------------------------------------------------------------------ the pyslurm worker process


def _worker(tmp_path, monkeypatch, hang: str = "", **kw) -> pb.PySlurm:
    monkeypatch.setenv("FAKE_WORKER_DIR", str(tmp_path))
    monkeypatch.setenv("FAKE_WORKER_HANG", hang)
    return pb.PySlurm(prefix=[sys.executable, str(FAKE_WORKER)], **kw)


def count(tmp_path, op: str) -> int:
    f = tmp_path / f"{op}.n"
    return int(f.read_text()) if f.exists() else 0


def test_a_hanging_worker_is_killed_and_the_call_retried(tmp_path, monkeypatch, caplog) -> None:
    b = _worker(tmp_path, monkeypatch, hang="nodes", timeout=1, retries=2, backoff=0)
    try:
        t0 = time.monotonic()
        nodes = b.nodes()
        assert [n.name for n in nodes] == ["node1"] and nodes[0].gpus_free == 3
        assert 1 <= time.monotonic() - t0 < 30
        assert count(tmp_path, "nodes") == 2 and b.restarts == 1
        assert "timed out after 1s, retry 1/2" in caplog.text.replace("(", "").replace(")", "")
        b.nodes()  # the fresh worker keeps serving
        assert b.restarts == 1
    finally:
        b.close()


def test_a_worker_that_always_hangs_fails_the_call_after_the_retries(tmp_path, monkeypatch) -> None:
    b = _worker(tmp_path, monkeypatch, hang="nodes:*", timeout=2, retries=2, backoff=0)
    try:
        with pytest.raises(SlurmUnavailable, match=r"^pyslurm slurm_load_node failed: timed out after 2s$"):
            b.nodes()
        assert count(tmp_path, "nodes") == 3
    finally:
        b.close()


def test_worker_answers_keep_their_kind_and_are_not_retried(tmp_path, monkeypatch) -> None:
    b = _worker(tmp_path, monkeypatch, timeout=5, retries=2, backoff=0)
    try:
        with pytest.raises(NoSuchJob, match="Invalid job id specified"):
            b.release("42")
        with pytest.raises(PermissionDenied, match="Access/permission denied"):
            b.hold("42")
        assert count(tmp_path, "release") == 1 and count(tmp_path, "hold") == 1
    finally:
        b.close()


def test_job_list_sends_only_changes_and_survives_a_new_worker(tmp_path, monkeypatch) -> None:
    b = _worker(tmp_path, monkeypatch, timeout=5, retries=0)
    try:
        first = b.jobs()
        assert [(j.job_id, j.state) for j in first] == [("1", "PENDING"), ("2", "PENDING"), ("3", "PENDING")]
        second = b.jobs()
        assert [(j.job_id, j.state) for j in second] == [("1", "PENDING"), ("2", "RUNNING"), ("3", "PENDING")]
        assert second[0] is first[0] and second[1] is not first[1]  # unchanged jobs were not sent again
        b._kill()  # a fresh worker (as after a timeout) knows nothing: it sends everything
        third = b.jobs()
        assert [(j.job_id, j.state) for j in third] == [("1", "PENDING"), ("2", "PENDING"), ("3", "PENDING")]
        assert third[0] is not first[0] and third[0] == first[0] and b.restarts == 1
    finally:
        b.close()


def test_submit_fields() -> None:
    o = SbatchOptions(partition="gpu", time="00:30:00", comment="c", gpus_per_node=2, nodes=1, hold=True,
                      job_name="j", output="/o", ntasks=1)
    assert pb.submit_fields(o) == {"partitions": "gpu", "time_limit": "00:30:00", "comment": "c", "nodes": 1,
                                   "name": "j", "standard_output": "/o", "ntasks": 1, "gres_per_node": "gpu:2",
                                   "priority": 0}
    assert pb.submit_fields(SbatchOptions(extra=("--exclusive",))) is None  # only sbatch knows it: the CLI


def test_pyslurm_records_map_to_the_same_values_as_the_cli() -> None:
    assert _gpus({"gpu": 4}) == (4, "") and _gpus({"gpu:a100": 2, "mps": 100}) == (2, "a100")
    rec = SimpleNamespace(
        id=12, user_name="alice", user_id=1001, state="PENDING", state_reason="JobHeldUser", priority=0,
        submit_time=1_000_000, start_time=1_000_500, end_time=1_086_400, time_limit=10, num_nodes=1,
        gres_per_node={"gpu": 1}, allocated_nodes=None, partition="gpu", comment="lyasched:v1;id=x", name="t")
    j = _job(rec)
    assert (j.job_id, j.user, j.unix_uid, j.held_by_service, j.start_time, j.end_time) == ("12", "alice", 1001, True,
                                                                                      None, None)
    assert j.time_limit == 600 and j.gpus == 1 and j.nodes == () and j.is_lyasched
    done = _job(SimpleNamespace(**{**vars(rec), "state": "COMPLETED", "allocated_nodes": "node[1-2]",
                                   "num_nodes": 2, "time_limit": 0xFFFFFFFF}))
    assert done.run_seconds == 86400 - 500 and done.nodes == ("node1", "node2") and math.isinf(done.time_limit)


# ================================================================== the real cluster

from reliability.users import OTHER_USER, TEST_USER, as_user  # noqa: E402
from slurm_views import OnlyJobs  # noqa: E402


def _summary(gmin: int = 1, gmax: int = 2) -> str:
    return CostSummary(uid=new_uid(), sig="cnn:test", global_batch=8, iterations=100, min_gpus=gmin, max_gpus=gmax,
                       alpha=0.01, beta=0.002, params=1_000_000).encode()


def _sbatch(user: str, *args: str, cwd: str = "/tmp") -> str:
    r = as_user(user, "sbatch", "--parsable", "-o", "/dev/null", "-t", "5", *args, timeout=60, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


@pytest.fixture
def backends():
    """Both backends (CLI and pyslurm) against the running cluster."""
    if not HAVE_PYSLURM:
        pytest.skip("pyslurm is not installed (make pyslurm)")
    cli, _ = bk.make_backend("cli", timeout=30)
    ps, why = bk.make_backend("pyslurm", timeout=30)
    yield {"cli": cli, "pyslurm": ps}
    ps.close()


@pytest.fixture
def plain_job(slurm_jobs):
    """A running non-lyasched job of the other user on 2 GPUs of one node."""
    job = _sbatch(OTHER_USER, "-N1", "--gres=gpu:2", "--wrap", "sleep 300")
    slurm_jobs.append(job)
    deadline = time.monotonic() + 60
    while subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip() \
            != "RUNNING":
        assert time.monotonic() < deadline, "plain job did not start"
        time.sleep(0.5)
    return job


def _held(n: int, slurm_jobs, gmin: int = 1, gmax: int = 2) -> list[str]:
    ids = [_sbatch(TEST_USER, "-N1", f"--gres=gpu:{gmin}", "--job-name", f"parity{i}", f"--comment={_summary(gmin, gmax)}",
                   "--wrap", "sleep 20") for i in range(n)]
    slurm_jobs.extend(ids)
    return ids


@pytest.mark.slurm
def test_both_backends_read_the_same_cluster_state(backends, plain_job, slurm_jobs) -> None:
    ids = _held(3, slurm_jobs)
    cli, ps = backends["cli"], backends["pyslurm"]
    views = {}
    for name, b in backends.items():
        jobs = {j.job_id: j for j in b.jobs() if j.job_id in ids}
        nodes = b.nodes()
        views[name] = (jobs, nodes)
    (cj, cn), (pj, pn) = views["cli"], views["pyslurm"]
    assert set(cj) == set(ids) and cj == pj  # every field of every lyasched job (SlurmJob equality)
    assert all(j.held_by_service and j.gpus == 1 for j in cj.values())
    assert [(n.name, n.gpus_total, n.gpus_alloc, n.gpus_free, n.partitions, n.usable) for n in cn] == \
           [(n.name, n.gpus_total, n.gpus_alloc, n.gpus_free, n.partitions, n.usable) for n in pn]
    assert sum(n.gpus_free for n in cn) == sum(n.gpus_free for n in pn) <= 10  # the plain job's 2 GPUs are busy
    assert cli.job(plain_job) == ps.job(plain_job)  # a non-lyasched job, any owner
    assert cli.work_dir(plain_job) == ps.work_dir(plain_job) == "/tmp"  # where its step reports would be
    assert cli.work_dir("99999999") is None and ps.work_dir("99999999") is None
    by_id = lambda js: sorted(js, key=lambda j: int(j.job_id))  # noqa: E731 - the order is not part of the answer
    assert by_id(cli.jobs(user=TEST_USER, job_ids=ids[:2])) == by_id(ps.jobs(user=TEST_USER, job_ids=ids[:2]))
    assert len(cli.jobs(user=TEST_USER, job_ids=ids[:2])) == 2
    other = by_id(cli.jobs(user=OTHER_USER))  # lyasched jobs only: never the plain job
    assert other == by_id(ps.jobs(user=OTHER_USER)) and plain_job not in {j.job_id for j in other}
    assert cli.config() == ps.config()


def _slot_state(backend_name: str, slurm_jobs) -> list[tuple]:
    """Submit 3 held jobs (2, 1, 2 GPUs), run one lyapunov slot through ``backend_name``; what Slurm then
    says of each job: held or not, nodes, GPUs per node, the node list asked for."""
    from lyasched.service import Service
    from lyasched.slurm import query as q
    from lyasched.store.records import open_records

    ids = _held(1, slurm_jobs, 2, 2) + _held(1, slurm_jobs, 1, 1) + _held(1, slurm_jobs, 2, 2)
    slurm, _ = bk.make_backend(backend_name, timeout=30)
    try:  # the service sees only these jobs (the test user's other held jobs, if any, are not ours)
        svc = Service(Config(slot_seconds=30, users=(TEST_USER,)), open_records(":memory:"), slurm=OnlyJobs(slurm, ids))
        rep = svc.run_slot()
    finally:
        slurm.close()
    assert not rep.error, rep.error
    out = []
    for i in ids:
        j = q.parse_show_job(subprocess.run(q.show_job_args(i), capture_output=True, text=True).stdout)[0]
        out.append((j.held_by_service, j.num_nodes, j.gpus_per_node, j.extra.get("ReqNodeList"),
                    j.extra.get("NumCPUs")))
    subprocess.run(["scancel", *ids], capture_output=True, timeout=30)
    return out + [tuple(sorted(rep.free.items())), len(rep.started)]


@pytest.mark.slurm
def test_the_same_slot_through_either_backend_leaves_the_same_slurm_state(plain_job, slurm_jobs) -> None:
    if not HAVE_PYSLURM:
        pytest.skip("pyslurm is not installed (make pyslurm)")
    cli = _slot_state("cli", slurm_jobs)
    time.sleep(2)  # the cancelled jobs' GPUs are back
    ps = _slot_state("pyslurm", slurm_jobs)
    assert cli == ps
    assert cli[-1] == 3 and not any(s[0] for s in cli[:3])  # all three released, none held


@pytest.mark.slurm
def test_missing_job_same_error_through_both(slurm_backend) -> None:
    b, _ = bk.make_backend(slurm_backend, timeout=30, retries=2)
    try:
        assert b.job("99999999") is None
        for verb in ("hold", "release", "cancel"):
            with pytest.raises(NoSuchJob, match="Invalid job id specified"):
                getattr(b, verb)("99999999")
        assert b.jobs(job_ids=["99999999"]) == []
    finally:
        b.close()


PROBE = """
import sys
from lyasched.slurm import PermissionDenied
from lyasched.slurm.backend import make_backend
b, _ = make_backend(sys.argv[1], timeout=30)
for verb in ("release", "hold", "cancel"):
    try:
        getattr(b, verb)(sys.argv[2])
        print(verb, "done")
    except PermissionDenied as e:
        print(verb, "PermissionDenied", e.detail.split(": ")[-1])
b.close()
"""


@pytest.mark.slurm
def test_non_operator_is_denied_the_same_way_through_both(slurm_backend, slurm_jobs) -> None:
    """Another (unprivileged) user may not release, hold or cancel a lyasched job: the plugin and
    slurmctld refuse, and both backends say PermissionDenied."""
    job = _held(1, slurm_jobs)[0]
    r = as_user(OTHER_USER, sys.executable, "-c", PROBE, slurm_backend, job, timeout=120, cwd=str(REPO))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == [f"{v} PermissionDenied Access/permission denied"
                                        for v in ("release", "hold", "cancel")], r.stdout + r.stderr
    st = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T|%r"], capture_output=True, text=True).stdout.strip()
    assert st == "PENDING|JobHeldUser"


@pytest.mark.slurm
def test_unreachable_controller_same_error_through_both(slurm_backend, tmp_path, monkeypatch) -> None:
    """A controller nobody answers for (slurm.conf with another port): SlurmUnavailable from both,
    after the retries, within the timeout per attempt."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(Path("/etc/slurm/slurm.conf").read_text().replace("SlurmctldPort=6817", "SlurmctldPort=6999"))
    monkeypatch.setenv("SLURM_CONF", str(conf))
    if slurm_backend == "pyslurm":
        if not HAVE_PYSLURM:
            pytest.skip("pyslurm is not installed (make pyslurm)")
        b = pb.PySlurm(timeout=5, retries=1, backoff=0)
    else:
        b = CliSlurm(SlurmCLI(timeout=5, retries=1, backoff=0))
    try:
        t0 = time.monotonic()
        with pytest.raises(SlurmUnavailable) as e:
            b.nodes()
        assert time.monotonic() - t0 < 2 * 5 + 5
        assert "Unable to contact slurm controller" in e.value.detail or "timed out after 5s" in e.value.detail
    finally:
        b.close()


@pytest.mark.slurm
def test_a_move_s_slurm_calls_through_both(slurm_backend, slurm_jobs, job_dir) -> None:
    """The calls a move makes (lyasched.live.mover): the signal reaches the job's step (not only the
    batch shell), the job is made requeueable, and requeuehold puts it back pending and held by an
    admin (what the service reads as held by itself), through either backend."""
    share = job_dir
    mark = share / "usr1"
    step = share / "step.sh"
    step.write_text(f"#!/bin/bash\ntrap 'touch {mark}' USR1\nfor i in $(seq 1500); do sleep 0.2; done\n")
    step.chmod(0o755)
    job = _sbatch(TEST_USER, "-N1", "--gres=gpu:1", "--wrap", f"srun {step}", cwd=str(share))
    slurm_jobs.append(job)
    squeue = lambda: subprocess.run(["squeue", "-h", "-j", job, "-o", "%T|%r"],  # noqa: E731
                                    capture_output=True, text=True).stdout.strip()
    deadline = time.monotonic() + 60
    while not squeue().startswith("RUNNING"):
        assert time.monotonic() < deadline, f"job did not start: {squeue()}"
        time.sleep(0.5)
    time.sleep(2)  # the step and its trap are set up
    b, _ = bk.make_backend(slurm_backend, timeout=30)
    try:
        b.signal(job, "USR1")
        deadline = time.monotonic() + 30
        while not mark.exists():
            assert time.monotonic() < deadline, "the step never saw USR1"
            time.sleep(0.3)
        assert squeue().startswith("RUNNING")  # a signal does not end the job
        b.set_requeue(job, True)
        b.requeue_hold(job)
        deadline = time.monotonic() + 60
        while not squeue().startswith("PENDING"):
            assert time.monotonic() < deadline, f"not requeued: {squeue()}"
            time.sleep(0.5)
        held = b.job(job)
        assert held is not None and held.held_by_service, squeue()
    finally:
        b.close()
