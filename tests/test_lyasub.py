"""lyasub through click's CliRunner, with fake Slurm tools on PATH (tests/fake_slurm.py) that
record every call: bad input exits 2 with one line and no Slurm call at all; good input
submits one held job with a decodable summary; failures after sbatch cancel the job."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from lyasched.cli.lyasub import main
from lyasched.summary import CostSummary

FAKE = Path(__file__).with_name("fake_slurm.py")


class Fake:
    def __init__(self, root: Path) -> None:
        self.root = root

    def calls(self, tool: str | None = None) -> list[list[str]]:
        f = self.root / "calls.jsonl"
        rows = [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []
        return [r for r in rows if tool is None or r[0] == tool]

    def jobs(self) -> dict:
        f = self.root / "jobs.json"
        return json.loads(f.read_text())["jobs"] if f.exists() else {}

    def training_sbatches(self) -> list[list[str]]:
        return [c for c in self.calls("sbatch") if not any(a.startswith("--wrap=") for a in c)]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("sbatch", "squeue", "scontrol", "scancel", "srun"):
        (bindir / tool).symlink_to(FAKE)
    state = tmp_path / "slurm"
    state.mkdir()
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    for var in ("LYASCHED_DEVICE_TYPE", "LYASCHED_DB", "FAKE_NO_PLUGIN", "FAKE_SBATCH_FAIL", "FAKE_SBATCH_LOST",
                "FAKE_ALTER_COMMENT", "FAKE_PROFILE_JSON", "FAKE_PROFILE_STATE", "LYASCHED_SLURM_PREFIX"):
        monkeypatch.delenv(var, raising=False)
    # the fakes are Slurm's tools: the CLI backend, whether or not pyslurm is installed (and a cluster runs)
    monkeypatch.setenv("LYASCHED_SLURM_BACKEND", "cli")
    monkeypatch.setenv("LYASCHED_CONFIG", str(tmp_path / "config.toml"))
    (tmp_path / "config.toml").write_text("[cluster]\ngpu_mem = 16e9\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('training')\n")
    monkeypatch.chdir(work)
    return Fake(state)


def lyasub(*args: str, db: str = "../db.sqlite"):
    return CliRunner().invoke(main, ["--db", db, *args], catch_exceptions=False)


BASE = ("--model", "mlp", "--global-batch", "64", "--iterations", "100")


@pytest.mark.parametrize(
    "args, fragment",
    [
        ((*BASE, "--", "missing.py"), "does not exist"),
        ((*BASE, "--", "."), "is not a file"),
        ((*BASE,), "Missing argument"),
        (("--model", "mlp", "--iterations", "5", "--", "train.py"), "Missing option '--global-batch'"),
        (("--global-batch", "8", "--iterations", "5", "--", "train.py"), "Missing option '--model'"),
        (("--model", "nosuchmodel", "--global-batch", "8", "--iterations", "5", "--", "train.py"), "unknown model"),
        (("--model", "mlp", "--global-batch", "7", "--iterations", "5", "--min-gpus", "2", "--max-gpus", "6",
          "--", "train.py"), "cannot be split evenly"),
        (("--model", "mlp", "--global-batch", "4", "--iterations", "5", "--min-gpus", "8", "--", "train.py"),
         "cannot be split evenly"),
        (("--model", "mlp", "--global-batch", "8", "--iterations", "5", "--min-gpus", "4", "--max-gpus", "2",
          "--", "train.py"), "below --min-gpus"),
        (("--model", "mlp", "--global-batch", "8", "--iterations", "5", "--min-gpus", "0", "--", "train.py"),
         "--min-gpus must be >= 1"),
        (("--model", "mlp", "--global-batch", "0", "--iterations", "5", "--", "train.py"), "--global-batch must be"),
        (("--model", "mlp", "--global-batch", "8", "--iterations", "0", "--", "train.py"), "--iterations must be"),
        (("--model", "mlp", "--global-batch", "8", "--iterations", "-3", "--", "train.py"), "--iterations must be"),
        (("--model", "mlp", "--global-batch", "8", "--epochs", "0", "--dataset-size", "100", "--", "train.py"),
         "--epochs must be > 0"),
        (("--model", "mlp", "--global-batch", "8", "--epochs", "2", "--dataset-size", "-1", "--", "train.py"),
         "--dataset-size must be > 0"),
        (("--model", "mlp", "--global-batch", "8", "--epochs", "2", "--", "train.py"), "give --iterations N"),
        (("--model", "mlp", "--global-batch", "8", "--", "train.py"), "give --iterations N"),
        (("--model", "mlp", "--global-batch", "8", "--iterations", "5", "--epochs", "1", "--dataset-size", "10",
          "--", "train.py"), "not both"),
        (("--model", "mlp", "--global-batch", "eight", "--iterations", "5", "--", "train.py"), "not a valid integer"),
        (("--frobnicate", *BASE, "--", "train.py"), "No such option '--frobnicate'"),
        ((*BASE, "--parsable", "--json", "--", "train.py"), "mutually exclusive"),
        ((*BASE, "--model-arg", "width", "--", "train.py"), "expected KEY=VALUE"),
        ((*BASE, "--uid", "bad uid!", "--", "train.py"), "--uid"),
        ((*BASE, "--min-gpus", "64", "--no-profile", "--", "train.py"), "exceeds the 12 GPUs"),
        ((*BASE, "--max-batch", "256", "--", "train.py"), "--max-batch and --lr-rule need --adaptive-batch"),
        ((*BASE, "--lr-rule", "sqrt", "--", "train.py"), "need --adaptive-batch"),
        ((*BASE, "--adaptive-batch", "--", "train.py"), "--adaptive-batch needs --max-batch"),
        ((*BASE, "--adaptive-batch", "--max-batch", "32", "--", "train.py"), "--max-batch must be in --global-batch (64)"),
        ((*BASE, "--adaptive-batch", "--max-batch", "2000000", "--", "train.py"), "--max-batch must be in"),
        ((*BASE, "--adaptive-batch", "--max-batch", "256", "--lr-rule", "cubic", "--", "train.py"), "Invalid value for '--lr-rule'"),
        (("--model", "mlp", "--global-batch", "7", "--iterations", "5", "--min-gpus", "8", "--adaptive-batch",
          "--max-batch", "7", "--", "train.py"), "no GPU count in 8..8 has a global batch between"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_submits_nothing(fake: Fake, args: tuple, fragment: str) -> None:
    r = lyasub(*args)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("lyasub: error: ")
    assert fragment in lines[0]
    assert r.stdout == ""
    assert fake.training_sbatches() == [] and fake.calls("sbatch") == []
    if fragment != "exceeds the 12 GPUs":  # that one needs the cluster's size: it reads Slurm, nothing more
        assert fake.calls() == []


def test_unreadable_script(fake: Fake) -> None:
    Path("secret.py").write_text("x")
    Path("secret.py").chmod(0)
    try:
        if os.access("secret.py", os.R_OK):
            pytest.skip("running as root: every file is readable")
        r = lyasub(*BASE, "--", "secret.py")
        assert r.exit_code == 2 and "not readable" in r.stderr
    finally:
        Path("secret.py").chmod(0o644)


def test_submits_one_held_job_with_summary(fake: Fake) -> None:
    r = lyasub(*BASE, "--no-profile", "--parsable", "--partition", "gpu", "--time", "1:00:00",
               "--", "train.py", "--lr", "0.1", "$(touch pwned)", "a b")
    assert r.exit_code == 0, r.stderr
    job_id = r.stdout.strip()
    assert job_id == "100"
    [argv] = fake.training_sbatches()
    assert argv[:2] == ["sbatch", "--parsable"]
    assert "--partition=gpu" in argv and "--time=1:00:00" in argv
    assert "--gres=gpu:1" in argv and "--nodes=1" in argv
    assert "--hold" not in argv  # the job_submit plugin holds it
    assert "--job-name=train.py" in argv
    comment = next(a.split("=", 1)[1] for a in argv if a.startswith("--comment="))
    s = CostSummary.decode(comment)
    assert (s.global_batch, s.iterations, s.min_gpus, s.max_gpus, s.source) == (64, 100, 1, 12, "e")
    assert s.sig == _mlp_signature()  # the cost-table key; the device is the cluster's
    script = fake.jobs()[job_id]["script"]
    assert "export LYASCHED_GLOBAL_BATCH=64" in script
    assert f"export LYASCHED_UID={s.uid}" in script
    train_line = next(line for line in script.splitlines() if line.startswith("TRAIN=("))
    assert shlex.split(train_line[len("TRAIN=("):-1]) == ["train.py", "--lr", "0.1", "$(touch pwned)", "a b"]
    assert not Path("pwned").exists()
    assert fake.calls("scancel") == []


def test_default_output_and_json(fake: Fake) -> None:
    r = lyasub(*BASE, "--no-profile", "--max-gpus", "8", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("Submitted lyasched job 100 (mlp, B=64, 100 iterations, 1-8 GPUs")
    assert "held until the lyasched scheduler starts it" in r.stdout
    r = lyasub("--model", "mlp", "--global-batch", "64", "--epochs", "2", "--dataset-size", "1000",
               "--min-gpus", "2", "--no-profile", "--json", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["job_id"] == "101"
    assert d["iterations"] == 32  # ceil(2 * 1000 / 64)
    assert d["min_gpus"] == 2 and d["max_gpus"] == 12 and d["source"] == "e"
    assert d["profile_source"] == "estimate" and d["device_type"] == "gpu"
    assert CostSummary.decode(d["comment"]).uid == d["uid"]
    pred = d["predicted_run_time_s"]
    assert sorted(int(g) for g in pred) == [2, 4, 8]  # 2..12 dividing 64 on a 3 x 4-GPU cluster
    assert all(t > 0 for t in pred.values())


def test_no_plugin_means_hold(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NO_PLUGIN", "1")
    r = lyasub(*BASE, "--no-profile", "--parsable", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    [argv] = fake.training_sbatches()
    assert "--hold" in argv
    assert "job_submit plugin is not configured" in r.stderr


def test_same_uid_is_submitted_once(fake: Fake) -> None:
    args = (*BASE, "--no-profile", "--uid", "retry-0123456789")
    r1 = lyasub(*args, "--parsable", "--", "train.py")
    r2 = lyasub(*args, "--", "train.py")
    assert r1.exit_code == 0 and r2.exit_code == 0, (r1.stderr, r2.stderr)
    assert r2.stdout.startswith(f"Found existing lyasched job {r1.stdout.strip()} ")
    assert len(fake.training_sbatches()) == 1


def test_sbatch_failing_after_submitting_is_not_resubmitted(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SBATCH_LOST", "1")
    r = lyasub(*BASE, "--no-profile", "--parsable", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == "100"
    assert len(fake.training_sbatches()) == 1
    assert [j["state"] for j in fake.jobs().values()] == ["PENDING"]


def test_sbatch_failure_exits_1(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SBATCH_FAIL", "1")
    r = lyasub(*BASE, "--no-profile", "--", "train.py")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines()[-1].startswith("lyasub: error: sbatch failed: ")
    assert "Invalid account" in r.stderr
    assert fake.jobs() == {}


def test_failure_after_sbatch_cancels_the_job(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_ALTER_COMMENT", "1")
    r = lyasub(*BASE, "--no-profile", "--", "train.py")
    assert r.exit_code == 1
    assert "different cost summary" in r.stderr and "cancelled" in r.stderr
    assert fake.calls("scancel") == [["scancel", "100"]]
    assert fake.jobs()["100"]["state"] == "CANCELLED"
    assert r.stdout == ""


def test_dry_run_submits_nothing(fake: Fake) -> None:
    r = lyasub(*BASE, "--dry-run", "--", "train.py", "--x")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("#!/bin/bash\n") and "TRAIN=(train.py --x)" in r.stdout
    assert "would run: sbatch --parsable" in r.stderr
    assert fake.calls("sbatch") == []


def _profile_json(tmp: Path, sig: str, m0: float = 5e6) -> Path:
    from lyasched.profile.result import ProfileResult

    res = ProfileResult(
        model="mlp", signature=sig, device_type="nvidia-a100-sxm4-40gb", device_name="NVIDIA A100-SXM4-40GB",
        params=669706, bytes_per_param=4, alpha=0.002, beta=1e-5, r2=0.99, m0=m0, m1=1e4, batches=[1, 2, 4],
        step_times=[0.00201, 0.00202, 0.00204], mem_points=[m0 + 1e4, m0 + 2e4, m0 + 4e4],
    )
    p = tmp / "profile.json"
    p.write_text(res.to_json())
    return p


def _mlp_signature() -> str:
    from lyasched.submitter import model_signature_of

    return model_signature_of("mlp", {})[1]


def test_profiling_job_then_cache(fake: Fake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sig = _mlp_signature()
    monkeypatch.setenv("FAKE_PROFILE_JSON", str(_profile_json(tmp_path, sig)))
    r = lyasub(*BASE, "--json", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    prof = [c for c in fake.calls("sbatch") if any(a.startswith("--wrap=") for a in c)]
    assert len(prof) == 1
    assert "--gres=gpu:1" in prof[0] and "--nodes=1" in prof[0]
    wrap = shlex.split(next(a for a in prof[0] if a.startswith("--wrap=")).split("=", 1)[1])
    assert wrap[2:5] == ["-m", "lyasched.profile", "mlp"] and "--db" in wrap
    assert "profiling mlp on one GPU" in r.stderr
    d = json.loads(r.stdout)
    assert d["profile_source"] == "profiled" and d["source"] == "m"
    assert d["alpha"] == 0.002 and d["beta"] == 1e-5
    # the result is cached under the cluster's device key: the next submission reuses it
    r2 = lyasub(*BASE, "--json", "--", "train.py")
    assert r2.exit_code == 0, r2.stderr
    assert json.loads(r2.stdout)["profile_source"] == "cache"
    assert len([c for c in fake.calls("sbatch") if any(a.startswith("--wrap=") for a in c)]) == 1
    assert len(fake.training_sbatches()) == 2


def test_failed_profiling_job_submits_nothing(fake: Fake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FAKE_PROFILE_STATE", "FAILED")
    r = lyasub(*BASE, "--", "train.py")
    assert r.exit_code == 1
    assert "profiling job 100 ended FAILED: RuntimeError: profiler exploded" in r.stderr
    assert fake.training_sbatches() == []


def test_model_too_big_for_any_count_exits_2(fake: Fake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sig = _mlp_signature()
    monkeypatch.setenv("FAKE_PROFILE_JSON", str(_profile_json(tmp_path, sig, m0=20e9)))  # > 16 GB in config
    r = lyasub(*BASE, "--", "train.py")
    assert r.exit_code == 2
    assert "no GPU count in 1..12 fits" in r.stderr.strip().splitlines()[-1]
    assert fake.training_sbatches() == []


def test_device_key_follows_the_service_config(fake: Fake, tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[service]\ndevice = "NVIDIA A100-SXM4"\n[cluster]\ngpu_mem = 16e9\n')
    r = lyasub(*BASE, "--no-profile", "--json", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    from lyasched.profile.signature import device_type

    assert json.loads(r.stdout)["device_type"] == device_type("NVIDIA A100-SXM4") != "gpu"


def test_adaptive_batch_is_carried_in_the_summary_and_the_script(fake: Fake) -> None:
    """--adaptive-batch: B need not split evenly (the scheduler picks a batch each count divides),
    the summary carries mb and lr, the script exports them and reads the chosen batch."""
    r = lyasub("--model", "mlp", "--global-batch", "100", "--iterations", "50", "--no-profile", "--parsable",
               "--adaptive-batch", "--max-batch", "1000", "--lr-rule", "sqrt", "--max-gpus", "8", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    [argv] = fake.training_sbatches()
    s = CostSummary.decode(next(a.split("=", 1)[1] for a in argv if a.startswith("--comment=")))
    assert (s.global_batch, s.max_batch, s.lr_rule, s.adaptive) == (100, 1000, "sqrt", True)
    script = fake.jobs()[r.stdout.strip()]["script"]
    assert "export LYASCHED_ADAPTIVE=1" in script and "LYASCHED_MAX_BATCH=1000 LYASCHED_LR_RULE=sqrt" in script
    assert "LYASCHED_BASE_BATCH=100" in script
    r = lyasub(*BASE, "--no-profile", "--parsable", "--", "train.py")  # without: no mb/lr, not adaptive
    comment = next(a.split("=", 1)[1] for a in fake.training_sbatches()[-1] if a.startswith("--comment="))
    assert "mb=" not in comment and "lr=" not in comment
    assert "export LYASCHED_ADAPTIVE=0" in fake.jobs()[r.stdout.strip()]["script"]
