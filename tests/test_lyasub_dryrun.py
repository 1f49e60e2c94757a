"""lyasub for a user's first try: a dry run without Slurm (--cluster-shape), a model package in
the current directory, the built-in models named in --help, a job no GPU count of which can ever
be placed refused at submission, and a "would run" line that can be pasted into a shell."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from lyasched.cli.lyasub import main
from test_lyasub import BASE, Fake, fake, lyasub  # noqa: F401 (fake: a fixture)


@pytest.fixture
def no_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Slurm's tools on PATH that fail and leave a mark if called; a work directory with train.py."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    mark = tmp_path / "slurm-called"
    for tool in ("sbatch", "squeue", "scontrol", "scancel", "sinfo"):
        (bindir / tool).write_text(f"#!/bin/sh\necho {tool} >> {mark}\necho '{tool}: error: Unable to contact slurm controller' >&2\nexit 1\n")
        (bindir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LYASCHED_SLURM_BACKEND", "cli")
    monkeypatch.setenv("LYASCHED_CONFIG", str(tmp_path / "config.toml"))
    (tmp_path / "config.toml").write_text("[cluster]\ngpu_mem = 16e9\n")
    for var in ("LYASCHED_DEVICE_TYPE", "LYASCHED_DB", "LYASCHED_SLURM_PREFIX"):
        monkeypatch.delenv(var, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('training')\n")
    monkeypatch.chdir(work)
    return mark


def test_dry_run_with_a_cluster_shape_needs_no_slurm(no_slurm: Path) -> None:
    r = lyasub(*BASE, "--dry-run", "--cluster-shape", "2x4", "--json", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["script"].startswith("#!/bin/bash\n") and out["sbatch"][0] == "sbatch"
    assert set(out["predicted_run_time_s"]) == {"1", "2", "4", "8"}  # 2 nodes x 4 GPUs, B=64
    assert not no_slurm.exists()  # no Slurm tool was run


def test_dry_run_without_slurm_names_the_option(no_slurm: Path) -> None:
    r = lyasub(*BASE, "--dry-run", "--", "train.py")
    assert r.exit_code == 1 and "cannot read the cluster from Slurm" in r.stderr
    assert "--cluster-shape NODESxGPUS" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args,fragment", [
    (("--cluster-shape", "2x4"), "--cluster-shape is for --dry-run only"),
    (("--dry-run", "--cluster-shape", "2by4"), "expected NODESxGPUS"),
    (("--dry-run", "--cluster-shape", "0x4"), "expected NODESxGPUS"),
])
def test_bad_cluster_shape(no_slurm: Path, args: tuple, fragment: str) -> None:
    r = lyasub(*BASE, *args, "--", "train.py")
    assert r.exit_code == 2 and fragment in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not no_slurm.exists()


def test_would_run_line_is_shell_quoted(fake: Fake) -> None:  # noqa: F811
    r = lyasub(*BASE, "--dry-run", "--job-name", "my job", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if "would run: " in ln]
    argv = shlex.split(line.split("would run: ", 1)[1])
    j = json.loads(lyasub(*BASE, "--dry-run", "--job-name", "my job", "--json", "--", "train.py").stdout)
    assert argv[0] == "sbatch" and "--job-name=my job" in argv
    assert [a for a in argv if not a.startswith("--comment=")] == [a for a in j["sbatch"] if not a.startswith("--comment=")]
    (comment,) = [a for a in argv if a.startswith("--comment=")]
    assert comment.startswith("--comment=lyasched:v1;") and ";" in comment[len("--comment=lyasched:v1;"):]


def test_a_job_that_can_never_be_placed_is_refused(fake: Fake) -> None:  # noqa: F811
    # the fake cluster is 3 nodes x 4 GPUs: B=7 with at least 2 GPUs allows only 7, which fits on no node
    # and cannot be split equally over 3 nodes
    r = lyasub("--model", "mlp", "--global-batch", "7", "--iterations", "5", "--min-gpus", "2", "--no-profile",
               "--", "train.py")
    assert r.exit_code == 2 and "can never be placed" in r.stderr and "(7)" in r.stderr
    assert fake.training_sbatches() == []


def test_the_same_job_fits_a_cluster_of_one_gpu_nodes(no_slurm: Path) -> None:
    r = lyasub("--model", "mlp", "--global-batch", "7", "--iterations", "5", "--min-gpus", "2", "--no-profile",
               "--dry-run", "--cluster-shape", "8x1", "--json", "--", "train.py")
    assert r.exit_code == 0, r.stderr  # 7 nodes x 1 GPU
    assert list(json.loads(r.stdout)["predicted_run_time_s"]) == ["7"]


def test_custom_model_from_the_current_directory(no_slurm: Path) -> None:
    pkg = Path("mypkg_firsthour")
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(
        "import torch\nfrom torch import nn\n\n"
        "def make_model(width=8):\n"
        "    return (nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, 4)),\n"
        "            lambda b, device: (torch.randn(b, 16, device=device), torch.randint(0, 4, (b,), device=device)))\n")
    r = lyasub("--model", "mypkg_firsthour.models:make_model", "--global-batch", "8", "--iterations", "5",
               "--no-profile", "--dry-run", "--cluster-shape", "1x4", "--json", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["params"] == 16 * 8 + 8 + 8 * 4 + 4
    import sys

    assert os.getcwd() not in sys.path  # imported from it, not left on the path


def test_help_lists_every_built_in_model() -> None:
    from lyasched.profile.models import EXAMPLES

    text = " ".join(CliRunner().invoke(main, ["--help"]).output.split())
    for name in EXAMPLES:
        assert f" {name}" in text, name
    assert "78k-parameter CIFAR ResNet-8" in text and "current directory" in text
    assert "LYASCHED_BATCH_PER_GPU" in text and "LOCAL_BATCH" not in text.replace("MAX_LOCAL_BATCH", "")


def test_every_json_key_is_documented(no_slurm: Path) -> None:
    r = lyasub(*BASE, "--dry-run", "--cluster-shape", "1x4", "--json", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    doc = (Path(__file__).resolve().parent.parent / "docs" / "lyasub.md").read_text()
    table = doc.split("### The `--json` object", 1)[1].split("\n## ", 1)[0]
    missing = [k for k in json.loads(r.stdout) if f"`{k}`" not in table]
    assert not missing, f"docs/lyasub.md, 'The --json object', lacks {missing}"


def test_dry_run_with_a_cluster_shape_and_gpu_types(no_slurm: Path) -> None:
    # no Slurm to say which nodes have which type: the shape is taken as nodes of the fastest type asked for
    r = lyasub(*BASE, "--gpu-type", "a100,h100", "--dry-run", "--cluster-shape", "2x4", "--json", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["gpu_types"] == ["a100", "h100"] and ";gt=a100,h100" in out["comment"]
    assert out["device_type"] == "h100" and out["profile_type"] == "h100"  # the fastest, by the roofline
    assert any(a.startswith("--gres=gpu:a100:") for a in out["sbatch"])
    assert set(out["predicted_run_time_s"]) == {"1", "2", "4", "8"}
    assert "not checked against Slurm" in r.stderr
    assert not no_slurm.exists()


def test_dry_run_with_a_cluster_shape_still_refuses_a_bad_gpu_type(no_slurm: Path) -> None:
    r = lyasub(*BASE, "--gpu-type", "a100,a100", "--dry-run", "--cluster-shape", "2x4", "--", "train.py")
    assert r.exit_code == 2 and "given twice" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not no_slurm.exists()
