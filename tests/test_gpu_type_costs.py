"""A cost model per GPU type (no cluster): the roofline ranks the types and predicts the ones nobody
measured, lyasub profiles on the fastest type its job allows and refuses a type that cannot hold
the job, the service predicts each waiting job on its type and learns the type the job ran on.

Cluster: node1, node2 with gpu:a100:4, node3 with gpu:t4:4 (the test clusters' layout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lyasched.config import ConfigError, load_config
from lyasched.costmodel.cost import Profile
from lyasched.costmodel.roofline import KNOWN_TYPES
from lyasched.live import learning, typecost
from lyasched.store import costtable, records
from test_gpu_types import TYPES, TypedJob, cost, typed_nodes_of
from test_lyasub import BASE, Fake, _mlp_signature, _profile_json, fake, lyasub  # noqa: F401 - fake is a fixture
from test_service import FakeSlurm, StartAs, service

PROFILE = Profile(model="m", alpha=0.01, beta=0.002, params=1_000_000, mem_base=2e9, mem_per_sample=1e8)


def test_the_roofline_ranks_the_types_and_predicts_an_unmeasured_one():
    assert typecost.fastest(["t4", "a100", "v100"]) == "a100"
    assert typecost.fastest(["t4", "mystery"]) == "t4"  # an unknown type ranks last
    assert typecost.profile_type(("t4", "h100"), ["a100", "a100", "t4"]) == "t4"  # allowed and present
    assert typecost.profile_type((), ["t4", "a100", ""]) == "a100"  # any type: the fastest present
    assert typecost.profile_type((), ["", ""]) == ""  # untyped nodes
    on_t4 = typecost.on_type(PROFILE, "a100", "t4")
    assert on_t4.beta > 2 * PROFILE.beta and on_t4.alpha > PROFILE.alpha and on_t4.source == "estimated"
    assert on_t4.mem_base == PROFILE.mem_base  # the job's memory, whatever the type
    assert typecost.on_type(PROFILE, "a100", "mystery") is PROFILE  # cannot predict: unchanged
    # 22 GB at 200 samples: an a100 (40 GiB) holds it, a t4 (16 GiB) does not
    assert [t for t, _ in typecost.too_small(PROFILE, ("a100", "t4"), 200)] == ["t4"]


def test_the_admin_extends_the_table_and_a_bad_entry_is_one_line(tmp_path: Path):
    good = tmp_path / "good.toml"
    good.write_text("[cluster.gpu_types]\nrtx = { tflops = 53.8, bandwidth = 616, memory_gib = 11 }\n"
                    "a100 = { memory_gib = 80 }\n")
    conf = load_config(good)
    assert conf.gpu_types["rtx"].memory_gib == 11 and conf.gpu_types["a100"].memory_gib == 80
    assert conf.gpu_types["a100"].tflops == KNOWN_TYPES["a100"].tflops and "t4" in conf.gpu_types
    for body, fragment in [
        ("rtx = { tflops = 53.8, bandwidth = 616 }", "cluster.gpu_types.rtx: a new type needs"),
        ("a100 = { memory_gib = -1 }", "cluster.gpu_types.a100.memory_gib: expected a positive number"),
        ("a100 = { speed = 2 }", "cluster.gpu_types.a100: unknown key speed"),
        ("a100 = 3", "cluster.gpu_types.a100: expected a table"),
    ]:
        bad = tmp_path / "bad.toml"
        bad.write_text(f"[cluster.gpu_types]\n{body}\n")
        with pytest.raises(ConfigError) as e:
            load_config(bad)
        assert fragment in str(e.value) and "\n" not in str(e.value)


def test_lyasub_with_a_bad_types_table_exits_2_and_submits_nothing(fake: Fake, tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[cluster.gpu_types]\nrtx = { tflops = 53.8 }\n")
    r = lyasub(*BASE, "--no-profile", "--config", str(bad), "--", "train.py")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "cluster.gpu_types.rtx" in r.stderr
    assert fake.calls("sbatch") == []


# ---------------------------------------------------------------- lyasub


def test_lyasub_profiles_on_the_fastest_type_its_job_allows(fake: Fake, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("FAKE_GPU_TYPES", "t4,a100,a100")  # the slower type first in Slurm's order
    monkeypatch.setenv("FAKE_PROFILE_JSON", str(_profile_json(tmp_path, _mlp_signature())))
    r = lyasub(*BASE, "--json", "--", "train.py")  # any type: the fastest present
    assert r.exit_code == 0, r.stderr
    (prof,) = [c for c in fake.calls("sbatch") if any(a.startswith("--wrap=") for a in c)]
    assert "--gres=gpu:a100:1" in prof and "profiling mlp on one a100 GPU" in r.stderr
    d = json.loads(r.stdout)
    assert (d["device_type"], d["profile_type"]) == ("a100", "a100") and d["comment"].endswith(";pt=a100")
    # a t4-only job is profiled on a t4: its own type, a new profile (the a100 one is not its type's)
    r = lyasub(*BASE, "--json", "--gpu-type", "t4", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    prof = [c for c in fake.calls("sbatch") if any(a.startswith("--wrap=") for a in c)]
    assert len(prof) == 2 and "--gres=gpu:t4:1" in prof[1]
    assert json.loads(r.stdout)["profile_type"] == "t4"


@pytest.mark.parametrize("args, fragment", [
    (("--gpu-type", "rtx"), "--gpu-type: unknown GPU type 'rtx' (known: "),
    (("--gpu-type", "h100"), "no node of the cluster has GPU type 'h100'"),
    # m0 = 14 GiB and 1 MB a sample: 4096 samples over the 4 t4 GPUs need 14 + 1 GiB per GPU < 16;
    # 8192 need 16 GiB and more: a t4 cannot hold them, an a100 (40 GiB) can
    (("--gpu-type", "t4", "--global-batch", "8192", "--max-gpus", "4"), "a t4 GPU (16 GiB) cannot hold"),
])
def test_lyasub_refuses_a_type_it_cannot_use_and_submits_nothing(fake: Fake, monkeypatch, tmp_path: Path, args,
                                                                fragment):
    monkeypatch.setenv("FAKE_GPU_TYPES", "a100,a100,t4")
    prof = _profile_json(tmp_path, _mlp_signature(), m0=14 * 2**30)
    d = json.loads(prof.read_text())
    d["m1"], d["mem_points"] = 2**20 * 1.01, [14 * 2**30 + 2**20 * b for b in (1, 2, 4)]
    prof.write_text(json.dumps(d))
    monkeypatch.setenv("FAKE_PROFILE_JSON", str(prof))
    base = [a for a in BASE if a not in ("--global-batch", "64")] if "--global-batch" in args else list(BASE)
    r = lyasub(*base, *args, "--", "train.py")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()[-1:]
    assert line.startswith("lyasub: error: --gpu-type") and fragment in line, r.stderr
    if "cannot hold" not in fragment:  # refused before any profiling: the one line is all
        assert r.stderr.strip().splitlines() == [line] and fake.calls("sbatch") == []
    assert fake.training_sbatches() == []  # at most the (finished) profiling job ran


def test_a_type_that_holds_the_job_is_accepted(fake: Fake, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("FAKE_GPU_TYPES", "a100,a100,t4")
    r = lyasub(*BASE, "--no-profile", "--gpu-type", "t4", "--parsable", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    assert len(fake.training_sbatches()) == 1


# ---------------------------------------------------------------- the service


@pytest.fixture
def db():
    return records.open_records(":memory:")


def _summary(uid: str, types: tuple[str, ...], pt: str = "a100") -> str:
    from dataclasses import replace

    return replace(cost(uid, types, gmin=2, gmax=2), profile_type=pt).encode()


def test_the_service_predicts_each_waiting_job_on_its_type(db):
    slurm = FakeSlurm(jobs=[TypedJob("101", _summary("uid-00000001", ("a100",)), gpn=2, gtype="a100"),
                            TypedJob("102", _summary("uid-00000002", ("t4",)), gpn=2, gtype="t4"),
                            TypedJob("103", _summary("uid-00000003", ("t4",), pt="t4"), gpn=2, gtype="t4")])
    typed_nodes_of(slurm)
    svc = service(db, slurm, StartAs({}))
    svc.run_slot()
    two = {u: json.loads(records.get_job(db, u)["pred_one"])[1] for u in
           ("uid-00000001", "uid-00000002", "uid-00000003")}
    a100, t4 = KNOWN_TYPES["a100"], KNOWN_TYPES["t4"]
    # the same profile measured on an a100: on a t4 the roofline's ratio slower; measured on a t4: as is
    assert two["uid-00000002"] > 2 * two["uid-00000001"], two
    assert two["uid-00000003"] == pytest.approx(two["uid-00000001"], rel=1e-9), two
    assert t4.time_per_flop(100) / a100.time_per_flop(100) > 2


def test_what_a_job_teaches_goes_to_the_type_it_ran_on(tmp_path: Path):
    db = records.open_records(tmp_path / "c.db")
    row = {"uid": "uid-00000002", "slurm_id": "102", "sig": "cnn:test", "predicted": 100.0, "summary":
           _summary("uid-00000002", ("t4",)), "nodes": json.dumps(["node3"]), "state": "finished"}
    records.upsert_job(db, "uid-00000002", slurm_id="102", state="finished", summary=row["summary"], sig="cnn:test")
    assert learning.ran_on_type(row, TYPES) == "t4"
    assert learning.ran_on_type({**row, "nodes": json.dumps(["node1", "node3"])}, TYPES) == ""  # never mixed
    learning.job_finished(db, row, "COMPLETED", 250.0, "t4", None, lambda: None, src_type="a100")
    t4 = costtable.get(db, "cnn:test", "t4")
    assert costtable.get(db, "cnn:test", "a100") is None  # the a100's entry is untouched
    assert t4 is not None and t4.source == "estimated" and t4.beta == pytest.approx(
        typecost.on_type(cost("x" * 8, ()).to_profile(), "a100", "t4").beta)
    assert t4.correction is not None and t4.correction > 1  # it ran 2.5x its prediction on the t4


# ---------------------------------------------------------------- lyastat


def test_lyastat_shows_the_predicted_time_for_each_type_and_count(tmp_path: Path, monkeypatch):
    from click.testing import CliRunner

    from lyasched.cli import lyastat
    from lyasched.slurm import as_backend
    from lyasched.slurm import backend as backend_module

    dbp = tmp_path / "svc.db"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[service]\ndb = "{dbp}"\n')
    db = records.open_records(dbp)
    slurm = FakeSlurm(jobs=[TypedJob("101", _summary("uid-00000001", ()), gpn=2)])
    typed_nodes_of(slurm)
    service(db, slurm, StartAs({})).run_slot()
    monkeypatch.setattr(backend_module, "make_backend", lambda *a, **kw: (as_backend(slurm), "fake"))
    r = CliRunner().invoke(lyastat.main, ["101", "--db", str(dbp), "--config", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    rows = {(p["type"], p["gpus"]): p["seconds"] for p in json.loads(r.output)["predicted_by_type"]}
    assert {g for t, g in rows if t == "a100"} == {2} and {g for t, g in rows if t == "t4"} == {2}  # gmin = gmax = 2
    assert rows[("t4", 2)] > 2 * rows[("a100", 2)]  # the t4 by the roofline from the a100 profile
    # a measured t4 profile replaces the roofline's guess
    costtable.put(db, {"signature": "cnn:test", "device_type": "t4", "model": "cnn", "alpha": 0.01, "beta": 0.002,
                       "params": 1_000_000, "bytes_per_param": 4, "m0": 0.0, "m1": 0.0, "source": "measured"})
    learning.invalidate()
    r = CliRunner().invoke(lyastat.main, ["101", "--db", str(dbp), "--config", str(cfg)])
    assert r.exit_code == 0, r.output
    lines = {ln.split()[0]: ln.split()[2] for ln in r.output.splitlines() if ln.split()[:1] in (["a100"], ["t4"])}
    assert lines["a100"] == lines["t4"], r.output  # the same profile on both: the same time


def test_the_service_learns_the_type_a_job_ran_on_and_predicts_that_type_from_it(db):
    """A job of any type runs on node3 (a t4) 4x longer than predicted: the model's t4 entry is
    created (the roofline's t4 prediction from the a100 summary) and corrected; the a100's is not.
    The next t4-only job of the model is predicted with the t4's correction."""
    first = TypedJob("31", _summary("uid-00000031", ("t4",)), gpn=2, gtype="t4")
    slurm = FakeSlurm(jobs=[first])
    typed_nodes_of(slurm)
    svc = service(db, slurm, StartAs({"31": ((2, 2),), "32": ((2, 2),)}))
    svc.run_slot()
    pred1 = records.get_job(db, "uid-00000031")["predicted"]
    first.state, first.reason, first.start, first.nodes = "RUNNING", "None", 1_000_101.0, ("node3",)
    svc.clock_state["t"] += 2
    svc.run_slot()
    first.state, first.end = "COMPLETED", 1_000_101.0 + 4 * pred1
    svc.clock_state["t"] += 4 * pred1 + 2
    svc.run_slot()
    t4 = costtable.get(db, "cnn:test", "t4")
    assert costtable.get(db, "cnn:test", "a100") is None
    assert t4 is not None and t4.observations == 1 and 1.0 < t4.correction <= 2.0
    assert t4.beta == pytest.approx(typecost.on_type(cost("x" * 8, ()).to_profile(), "a100", "t4").beta)
    second = TypedJob("32", _summary("uid-00000032", ("t4",)), gpn=2, gtype="t4", submit=svc.clock_state["t"])
    slurm.jobs.append(second)
    svc.clock_state["t"] += 2
    svc.run_slot()
    pred2 = records.get_job(db, "uid-00000032")["predicted"]
    assert pred2 == pytest.approx(pred1 * t4.correction, rel=1e-6)
