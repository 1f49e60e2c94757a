"""The batch-script template: rendering, quoting (hypothesis), and what it runs.

The rendered script is executed by real bash with fake `scontrol`/`srun` on PATH: `srun`
records its argv NUL-separated, so the test sees exactly what torchrun would get.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lyasched.job.launcher import default_torchrun, quote, render, render_template, template_text, write_script

FAKE_SCONTROL = r"""#!/bin/bash
# fake scontrol: 'show hostnames n[1-2]' and 'show node NAME'
if [[ "$*" == "show hostnames "* ]]; then
    for n in ${FAKE_NODES}; do echo "$n"; done
elif [[ "$*" == "--oneliner show node "* ]]; then
    echo "NodeName=$4 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.0.0.${4#n} NodeHostName=$4 Version=22.05"
else
    echo "unexpected scontrol $*" >&2; exit 1
fi
"""
FAKE_SRUN = """#!/bin/bash
printf '%s\\0' "$@" > "$FAKE_OUT"
"""


@pytest.fixture(scope="module")
def fakebin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fakebin")
    for name, text in (("scontrol", FAKE_SCONTROL), ("srun", FAKE_SRUN)):
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return d


def run_rendered(script: str, fakebin: Path, tmp: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    path = tmp / "job.sbatch"
    write_script(script, path)
    out = tmp / "argv"
    if out.exists():
        out.unlink()
    base = {
        "PATH": f"{fakebin}:/usr/bin:/bin",
        "FAKE_OUT": str(out),
        "FAKE_NODES": "n1 n2",
        "SLURM_JOB_ID": "123456",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_GPUS_ON_NODE": "4",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_JOB_CPUS_PER_NODE": "8(x2)",
    }
    base.update(env)
    p = subprocess.run(["bash", str(path)], capture_output=True, env=base, timeout=30)
    argv = out.read_bytes().split(b"\0")[:-1] if out.exists() else []
    return p, [a.decode("utf-8", "surrogateescape") for a in argv]


def test_template_is_packaged_and_has_placeholders() -> None:
    t = template_text()
    assert t.startswith("#!/bin/bash\n")
    for name in ("uid", "global_batch", "model", "iterations", "torchrun", "command"):
        assert "{{" + name + "}}" in t


def test_render_fills_every_placeholder() -> None:
    s = render(["train.py", "--lr", "0.1"], global_batch=64, uid="abcdef0123", torchrun=["torchrun"])
    assert "{{" not in s
    assert "export LYASCHED_GLOBAL_BATCH=64\n" in s
    assert "TRAIN=(train.py --lr 0.1)" in s
    assert subprocess.run(["bash", "-n"], input=s.encode(), capture_output=True).returncode == 0


def test_render_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        render([], global_batch=8, uid="abcdef0123")
    with pytest.raises(ValueError):
        render(["t.py"], global_batch=0, uid="abcdef0123")
    with pytest.raises(ValueError, match="NUL"):
        render(["t.py", "a\0b"], global_batch=8, uid="abcdef0123")
    with pytest.raises(KeyError, match="needs values"):
        render_template("{{a}} {{b}}", {"a": "1"})
    with pytest.raises(KeyError, match="no placeholder"):
        render_template("{{a}}", {"a": "1", "b": "2"})


def test_substituted_text_is_not_rescanned() -> None:
    assert render_template("{{a}}-{{b}}", {"a": "{{b}}", "b": "x"}) == "{{b}}-x"


def test_default_torchrun_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LYASCHED_TORCHRUN", "/opt/py/bin/python -m torch.distributed.run")
    assert default_torchrun() == ["/opt/py/bin/python", "-m", "torch.distributed.run"]
    monkeypatch.delenv("LYASCHED_TORCHRUN")
    tr = default_torchrun()
    assert tr[0].endswith("torchrun") or tr[1:] == ["-m", "torch.distributed.run"]


def test_launch_line(fakebin: Path, tmp_path: Path) -> None:
    s = render(["train.py", "--epochs", "3"], global_batch=64, uid="abcdef0123", torchrun=["my-torchrun"])
    p, argv = run_rendered(s, fakebin, tmp_path)
    assert p.returncode == 0, p.stderr
    assert argv == [
        "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=8", "--kill-on-bad-exit=1",
        "my-torchrun", "--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.0.0.1:23456", "--rdzv-id=123456", "train.py", "--epochs", "3",
    ]
    assert b"batch per GPU 8" in p.stderr


@pytest.mark.parametrize("cpus, want", [("4(x1),2", "2"), ("12", "12"), ("", "1"), ("3,5(x2)", "3")])
def test_cpus_per_task_is_the_smallest_node(fakebin: Path, tmp_path: Path, cpus: str, want: str) -> None:
    s = render(["train.py"], global_batch=64, uid="abcdef0123", torchrun=["torchrun"])
    p, argv = run_rendered(s, fakebin, tmp_path, SLURM_JOB_CPUS_PER_NODE=cpus)
    assert p.returncode == 0, p.stderr
    assert f"--cpus-per-task={want}" in argv


def test_environment_exported(fakebin: Path, tmp_path: Path) -> None:
    # `srun` here prints the environment the training script would inherit
    s = render(["train.py"], global_batch=48, uid="abcdef0123", model="my model", iterations=7, torchrun=["env"])
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\nenv > "$FAKE_OUT"\n')
    (fake / "srun").chmod(0o755)
    (fake / "scontrol").write_text(FAKE_SCONTROL)
    (fake / "scontrol").chmod(0o755)
    path = tmp_path / "job.sbatch"
    write_script(s, path)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "FAKE_OUT": str(tmp_path / "env"), "FAKE_NODES": "n3",
           "SLURM_JOB_ID": "41", "SLURM_JOB_NUM_NODES": "1", "CUDA_VISIBLE_DEVICES": "0,1,2",
           "SLURM_JOB_NODELIST": "n3", "SLURM_JOB_CPUS_PER_NODE": "6"}
    p = subprocess.run(["bash", str(path)], capture_output=True, env=env, timeout=30)
    assert p.returncode == 0, p.stderr
    got = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines() if "=" in line)
    assert got["LYASCHED_GLOBAL_BATCH"] == "48"
    assert got["LYASCHED_BATCH_PER_GPU"] == "16" and "LYASCHED_LOCAL_BATCH" not in got  # 48 / (1 node x 3 devices)
    assert got["LYASCHED_MODEL"] == "my model" and got["LYASCHED_ITERATIONS"] == "7"
    assert got["LYASCHED_UID"] == "abcdef0123"
    assert got["MASTER_ADDR"] == "10.0.0.3"
    assert got["MASTER_PORT"] == str(20000 + 41)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"SLURM_GPUS_ON_NODE": "3"}, b"not divisible by 6 GPUs"),
        ({"SLURM_GPUS_ON_NODE": "", "CUDA_VISIBLE_DEVICES": ""}, b"no GPUs"),
        ({"SLURM_JOB_ID": ""}, b"not running under Slurm"),
    ],
)
def test_bad_allocation_fails_before_srun(fakebin: Path, tmp_path: Path, env: dict, message: bytes) -> None:
    s = render(["train.py"], global_batch=64, uid="abcdef0123", torchrun=["torchrun"])
    p, argv = run_rendered(s, fakebin, tmp_path, **env)
    assert p.returncode != 0
    assert message in p.stderr
    assert argv == []


# any text bash can carry in argv: everything but NUL; lone surrogates only as surrogateescape bytes
arg_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
nasty = st.sampled_from(["$(touch /tmp/pwned)", "`id`", "'", '"', "\\", "a b", "\n", "\r\n", "; rm -rf /", "${HOME}",
                         "*", "~", "-", "--", "$'x'", "!!", "{a,b}", "\udcff\udc80", "#", "))", "TRAIN=(x)", "{{uid}}"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(arg_text, nasty), max_size=6), st.one_of(arg_text.filter(bool), nasty))
def test_any_argument_round_trips(fakebin: Path, tmp_path: Path, args: list[str], script: str) -> None:
    command = [script, *args]
    s = render(command, global_batch=8, uid="abcdef0123", torchrun=["torchrun"])
    raw = s.encode("utf-8", "surrogateescape")
    assert b"\r" not in raw  # sbatch refuses scripts with DOS line breaks
    assert subprocess.run(["bash", "-n"], input=raw, capture_output=True).returncode == 0
    p, argv = run_rendered(s, fakebin, tmp_path, SLURM_GPUS_ON_NODE="2")
    assert p.returncode == 0, p.stderr
    assert argv[-len(command):] == command
    assert len(argv) == 11 + len(command)


@given(arg_text)
def test_quote_is_one_word(arg: str) -> None:
    out = subprocess.run(["bash", "-c", f"printf '%s\\0' {quote(arg)}"], capture_output=True).stdout
    assert out == arg.encode("utf-8") + b"\0"
