"""Checkpointable jobs: the summary key, the batch template, lyasched.job.checkpoint and the example
training script resuming to the same result as an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lyasched.job.checkpoint import Checkpointer
from lyasched.job.launcher import render
from lyasched.summary import CostSummary

REPO = Path(__file__).resolve().parent.parent


def _summary(**kw) -> CostSummary:
    return CostSummary(uid="abcdef0123", sig="mlp", global_batch=64, iterations=100, min_gpus=1, max_gpus=8,
                       alpha=0.01, beta=0.001, params=1000, **kw)


def test_summary_carries_checkpointable_only_when_set():
    plain, ck = _summary(), _summary(checkpointable=True)
    assert "ck=" not in plain.encode()
    assert ck.encode() == plain.encode() + ";ck=1"
    assert CostSummary.decode(ck.encode()).checkpointable is True
    assert CostSummary.decode(plain.encode()).checkpointable is False
    for bad in ("0", "2", "yes"):
        with pytest.raises(ValueError, match="ck="):
            CostSummary.decode(plain.encode() + f";ck={bad}")
    with pytest.raises(ValueError, match="twice"):
        CostSummary.decode(ck.encode() + ";ck=1")


def test_template_gives_checkpointable_jobs_a_directory_and_a_signal():
    ck = render(["train.py"], global_batch=8, uid="abcdef0123", torchrun=["torchrun"], checkpointable=True)
    plain = render(["train.py"], global_batch=8, uid="abcdef0123", torchrun=["torchrun"])
    assert "\n#SBATCH --signal=USR1@120\n" in ck and "#SBATCH" not in plain
    assert "export LYASCHED_CHECKPOINTABLE=1" in ck and "export LYASCHED_CHECKPOINTABLE=0" in plain
    # the directive comes before the first command, where sbatch reads it
    lines = ck.splitlines()
    first_cmd = next(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
    assert lines.index("#SBATCH --signal=USR1@120") < first_cmd
    assert subprocess.run(["bash", "-n"], input=ck, text=True).returncode == 0


def _tiny():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return torch, model, opt


def _train(torch, model, opt, steps, ck=None, start=0):
    x = torch.linspace(-1, 1, 32).reshape(8, 4)
    y = x.sum(dim=1, keepdim=True)
    loss = None
    for step in range(start, steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        if ck is not None and ck.should_stop(step, model, opt):
            return step, loss.item()
    return steps - 1, loss.item()


def test_save_on_signal_then_resume_gives_the_uninterrupted_result(tmp_path):
    torch, model, opt = _tiny()
    _, want = _train(torch, model, opt, 20)

    torch, model, opt = _tiny()
    ck = Checkpointer(tmp_path, signum=signal.SIGUSR1)
    assert ck.resume(model, opt) == 0  # nothing saved yet
    assert not ck.should_stop(0, model, opt)
    _train(torch, model, opt, 7)
    os.kill(os.getpid(), signal.SIGUSR1)  # a move asks for a checkpoint
    stopped, _ = _train(torch, model, opt, 20, ck=ck, start=7)
    assert stopped == 7
    assert (tmp_path / "latest").read_text().strip() == "step-7.pt"
    assert not list(tmp_path.glob(".*.tmp"))

    torch, model2, opt2 = _tiny()  # a fresh process: different init, same checkpoint
    ck2 = Checkpointer(tmp_path, install=False)
    start = ck2.resume(model2, opt2)
    assert start == 8
    _, got = _train(torch, model2, opt2, 20, start=start)
    assert got == pytest.approx(want, rel=1e-6, abs=1e-9)


def test_without_a_directory_checkpointing_is_off(monkeypatch):
    monkeypatch.delenv("LYASCHED_CHECKPOINT_DIR", raising=False)
    torch, model, opt = _tiny()
    ck = Checkpointer()
    ck.requested = True
    assert ck.resume(model, opt) == 0 and not ck.should_stop(0, model, opt)
    with pytest.raises(ValueError, match="not a signal"):
        monkeypatch.setenv("LYASCHED_CHECKPOINT_SIGNAL", "NOPE")
        Checkpointer("/tmp/x", install=False)


def test_a_broken_latest_pointer_is_an_error_not_a_silent_restart(tmp_path):
    (tmp_path / "latest").write_text("step-3.pt\n")
    with pytest.raises(RuntimeError, match="missing"):
        Checkpointer(tmp_path, install=False).latest()


def _example(args, env_extra=None, model="mlp"):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("LYASCHED_CHECKPOINT_DIR", None)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, str(REPO / "jobscripts" / "train_example.py"), "--model", model,
                           "--batch-per-gpu", "8", "--threads", "1", "--warmup", "0", "--json", *args],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_train_example_resumes_to_the_same_final_loss(tmp_path, model):
    """A run stopped after 6 iterations (its checkpoint saved) and resumed to 12 ends with the
    loss of an uninterrupted 12-iteration run (transformer: targets per token, split by sample)."""
    _, whole = _example(["--iterations", "12"], model=model)
    d = tmp_path / "ck"
    _example(["--iterations", "6", "--checkpoint-every", "6"], {"LYASCHED_CHECKPOINT_DIR": str(d)}, model=model)
    assert (d / "latest").read_text().strip() == "step-5.pt"
    out, resumed = _example(["--iterations", "12"], {"LYASCHED_CHECKPOINT_DIR": str(d)}, model=model)
    assert "resumed from checkpoint at iteration 6 of 12" in out
    assert resumed["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-6)


def test_resume_hands_the_rng_states_to_torch_on_the_cpu(tmp_path, monkeypatch):
    """torch.set_rng_state takes a CPU byte tensor; a checkpoint loaded with map_location onto a GPU
    has its RNG states there too (seen on an H200: 'RNG state must be a torch.ByteTensor')."""
    torch, model, opt = _tiny()
    Checkpointer(tmp_path, install=False).save(0, model, opt)
    real_load = torch.load
    moved = []

    class OnDevice:  # stands for a tensor on a GPU: only .cpu() gives the state back
        def __init__(self, t):
            self.t = t

        def cpu(self):
            moved.append(True)
            return self.t

    def load(*a, **k):
        state = real_load(*a, **k)
        state["rng"]["torch"] = OnDevice(state["rng"]["torch"])
        return state

    monkeypatch.setattr(torch, "load", load)
    assert Checkpointer(tmp_path, install=False).resume(model, opt) == 1
    assert moved


FAKE_SCONTROL = """#!/bin/bash
if [[ "$*" == "show hostnames "* ]]; then echo n1
elif [[ "$*" == "--oneliner show node "* ]]; then echo "NodeName=$4 NodeAddr=10.0.0.1"
else exit 1; fi
"""
# srun: drop its own options, run the task command (as slurmstepd would)
FAKE_SRUN = """#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
exec "$@"
"""
# torchrun: report how SIGUSR1 is handled in it and where checkpoints go
FAKE_TORCHRUN = """#!/bin/bash
python3 -c 'import os, signal; print(int(signal.getsignal(signal.SIGUSR1)), os.environ.get("LYASCHED_CHECKPOINT_DIR", "-"))' > "$FAKE_OUT"
"""


@pytest.mark.parametrize("checkpointable", [True, False])
def test_batch_script_ignores_the_signal_in_torchrun_and_sets_the_directory(tmp_path, checkpointable):
    """Run the rendered script with fake srun/torchrun: a checkpointable job's torchrun ignores
    SIGUSR1 (so a move's signal does not kill it; the training processes install a handler) and
    sees the checkpoint directory; another job's does neither."""
    from lyasched.job.launcher import write_script

    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("scontrol", FAKE_SCONTROL), ("srun", FAKE_SRUN), ("torchrun", FAKE_TORCHRUN)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    script = tmp_path / "job.sbatch"
    write_script(render(["train.py"], global_batch=8, uid="abcdef0123", torchrun=["torchrun"],
                        checkpointable=checkpointable), script)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "FAKE_OUT": str(tmp_path / "out"), "SLURM_JOB_ID": "7",
           "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "2", "SLURM_JOB_NODELIST": "n1",
           "SLURM_SUBMIT_DIR": str(tmp_path)}
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    handler, directory = (tmp_path / "out").read_text().split()
    if checkpointable:
        assert handler == str(int(signal.SIG_IGN))
        assert directory == str(tmp_path / ".lyasched" / "ckpt-abcdef0123")
    else:
        assert handler == str(int(signal.SIG_DFL)) and directory == "-"
