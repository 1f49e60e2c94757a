"""slurm/job_submit.lua on the real test cluster: validation, scheduler-only hold, resize + release."""

from __future__ import annotations

import subprocess
import time

import pytest

from lyasched.summary import CostSummary

pytestmark = pytest.mark.slurm

FIELDS = [("id", "0f3c9a7e-test"), ("sig", "resnet18:cifar10"), ("b", "256"), ("it", "100"), ("gmin", "1"),
          ("gmax", "4"), ("a", "0.0125"), ("bt", "3.2e-05"), ("p", "11689512"), ("bpp", "4"), ("m0", "1.5e9"),
          ("m1", "2e6"), ("src", "m")]
PREFIX = "lyasched:v1;"
DENIED = "Access/permission denied"


def summary(fields=FIELDS, **override: str | None) -> str:
    """The valid summary with some fields replaced (value None drops the field)."""
    merged = dict(fields)
    merged.update(override)
    return PREFIX + ";".join(f"{k}={v}" for k, v in merged.items() if v is not None)


def submit(as_user, user, *args, comment=None):
    extra = [f"--comment={comment}"] if comment is not None else []
    return as_user(user, "sbatch", "--parsable", "-o", "/dev/null", *extra, *args)


def submitted(proc, slurm_jobs) -> str:
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]
    slurm_jobs.append(job)
    return job


def squeue(job: str, fmt: str) -> str:
    return subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", fmt], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def held_job(as_user, test_user, slurm_jobs) -> str:
    """A valid lyasched job of test_user, held by the plugin."""
    return submitted(submit(as_user, test_user, "--gres=gpu:1", "--wrap", "true", comment=summary()), slurm_jobs)


def test_tagged_job_is_held_with_priority_zero(held_job):
    time.sleep(2.5)  # longer than sched_interval: a job that could start would have started
    assert squeue(held_job, "%T|%r|%Q") == "PENDING|JobHeldUser|0"
    assert squeue(held_job, "%k") == summary()


@pytest.mark.parametrize("update", [
    ["release"],
    ["update", "priority=100"],
    ["update", "nice=-10"],
    ["update", "NumNodes=2-2"],
    ["update", "TresPerNode=gres:gpu:4"],
    ["update", "comment=hello"],
])
def test_owner_cannot_release_or_change_it(as_user, test_user, held_job, update):
    if update[0] == "release":
        proc = as_user(test_user, "scontrol", "release", held_job)
    else:
        proc = as_user(test_user, "scontrol", "update", f"jobid={held_job}", *update[1:])
    assert proc.returncode != 0
    assert DENIED in proc.stderr
    assert squeue(held_job, "%T|%r|%D|%b") == "PENDING|JobHeldUser|1|gres:gpu:1"
    assert squeue(held_job, "%k") == summary()


@pytest.mark.parametrize("update", [
    ["partition=managed"],
    ["dependency=singleton"],
    ["StartTime=now+1hour"],
    ["ReqNodeList=node1"],
    ["MinMemoryNode=100"],
])
def test_owner_cannot_change_what_the_scheduler_decides(as_user, test_user, held_job, slurm_jobs, update):
    proc = as_user(test_user, "scontrol", "update", f"jobid={held_job}", *update)
    assert proc.returncode != 0 and DENIED in proc.stderr
    assert squeue(held_job, "%T|%r|%D|%b|%P|%E") == "PENDING|JobHeldUser|1|gres:gpu:1|gpu|(null)"
    # the same update of the owner's own held job that is not lyasched's: Slurm allows it (so the plugin refused)
    mine = submitted(submit(as_user, test_user, "--hold", "--gres=gpu:1", "--wrap", "true"), slurm_jobs)
    proc = as_user(test_user, "scontrol", "update", f"jobid={mine}", *update)
    assert proc.returncode == 0, proc.stderr


def test_owner_may_rename_shorten_and_set_mail_on_a_held_job(as_user, test_user, held_job):
    """Issue 37: the owner keeps every right Slurm gives that does not bypass the hold."""
    for update in (["name=renamed"], ["TimeLimit=30"], ["MailType=END", f"MailUser={test_user}"]):
        proc = as_user(test_user, "scontrol", "update", f"jobid={held_job}", *update)
        assert proc.returncode == 0, (update, proc.stderr)
    assert squeue(held_job, "%T|%r|%j|%l|%b") == "PENDING|JobHeldUser|renamed|30:00|gres:gpu:1"
    assert squeue(held_job, "%k") == summary()
    for longer in ("TimeLimit=60", "TimeLimit=UNLIMITED"):  # a longer one widens what the scheduler planned with
        proc = as_user(test_user, "scontrol", "update", f"jobid={held_job}", longer)
        assert proc.returncode != 0 and DENIED in proc.stderr, longer
    assert squeue(held_job, "%l") == "30:00"


def test_other_user_cannot_cancel_but_owner_can(as_user, test_user, other_user, held_job, wait_job):
    proc = as_user(other_user, "scancel", held_job)
    assert proc.returncode != 0 and DENIED in proc.stderr
    assert squeue(held_job, "%T") == "PENDING"
    assert as_user(test_user, "scancel", held_job).returncode == 0
    assert wait_job(held_job, timeout=30) == "CANCELLED"


def test_root_resizes_and_releases(as_user, test_user, job_dir, slurm_jobs, wait_job):
    out = job_dir / "resized.out"
    script = 'srun -N "$SLURM_JOB_NUM_NODES" -n "$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 bash -c ' \
             '"echo \\$SLURMD_NODENAME \\$CUDA_VISIBLE_DEVICES"'
    proc = as_user(test_user, "sbatch", "--parsable", "-N1", "--gres=gpu:1", "-o", str(out), f"--comment={summary()}",
                   "--wrap", script)
    job = submitted(proc, slurm_jobs)
    resize = subprocess.run(["scontrol", "update", f"jobid={job}", "NumNodes=2-2", "NumTasks=2", "NumCPUs=2",
                             "TresPerNode=gres:gpu:3"], capture_output=True, text=True)
    assert resize.returncode == 0, resize.stderr
    assert squeue(job, "%T|%r|%D|%b") == "PENDING|JobHeldUser|2|gres:gpu:3"
    assert subprocess.run(["scontrol", "release", job], capture_output=True).returncode == 0
    assert wait_job(job, timeout=120) == "COMPLETED"
    lines = sorted(line.split() for line in out.read_text().splitlines() if line.strip())
    assert len(lines) == 2 and lines[0][0] != lines[1][0]
    assert all(len(cvd.split(",")) == 3 for _, cvd in lines)


def test_root_can_shrink_a_grown_job(held_job):
    for nodes, gpus in [(3, 4), (1, 2)]:
        proc = subprocess.run(["scontrol", "update", f"jobid={held_job}", f"NumNodes={nodes}-{nodes}",
                               f"NumTasks={nodes}", f"NumCPUs={nodes}", f"TresPerNode=gres:gpu:{gpus}"],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert squeue(held_job, "%D|%b|%C") == f"{nodes}|gres:gpu:{gpus}|{nodes}"


LONG_SIG = "s" * 128


@pytest.mark.parametrize("comment,reason", [
    (summary(src=None), "missing key 'src'"),
    (summary(x="1"), "unknown key 'x'"),
    (summary(b="12.5"), "b=12.5: must be an integer"),
    (summary(b="+5"), "b=+5: must be an integer"),
    (summary(bpp="9"), "bpp=9: must be in 1..8"),
    (summary(gmin="4", gmax="2"), "gmax=2 is below gmin=4"),
    (summary(a="nan"), "a=nan: must be a decimal number"),
    (summary(m1="inf"), "m1=inf: must be a decimal number"),
    (summary(p="0x10"), "p=0x10: must be an integer"),
    (summary(m0="2e13"), "m0=2e13: must be in 0..1e+13"),
    (summary(id="short"), "id=short: must be 8..64 characters"),
    (summary(sig="res net"), "sig=res net: must be 1..128 characters"),
    (summary(src="x"), "src=x: must be m or e"),
    (summary(ck="0"), "ck=0: must be in 1..1"),
    (summary(ck="2"), "ck=2: must be in 1..1"),
    (summary(mb="512"), "mb and lr go together"),
    (summary(lr="sqrt"), "mb and lr go together"),
    (summary(mb="128", lr="sqrt"), "mb=128 is below b=256"),
    (summary(mb="0", lr="sqrt"), "mb=0: must be in 1..1048576"),
    (summary(mb="512", lr="cubic"), "lr=cubic: must be linear, sqrt or adascale"),
    (summary(cb="512"), "cb needs mb and must be at most mb"),
    (summary(mb="512", lr="sqrt", cb="1024"), "cb needs mb and must be at most mb"),
    (summary(kn="-1"), "kn=-1: must be in 0..1.04858e+06"),
    (summary(kn="flat"), "kn=flat: must be a decimal number"),
    (summary(gt=""), "gt=: must be up to 8 distinct GPU types"),
    (summary(gt="a100,,t4"), "gt=a100,,t4: must be up to 8 distinct GPU types"),
    (summary(gt="12"), "gt=12: must be up to 8 distinct GPU types"),
    (summary(gt="a100:4"), "gt=a100:4: must be up to 8 distinct GPU types"),
    (summary(gt="a100,a100"), "gt=a100,a100: GPU type 'a100' given twice"),
    (summary(pt=""), "pt=: must be a GPU type"),
    (summary(pt="a100,t4"), "pt=a100,t4: must be a GPU type"),
    (summary(pt="12"), "pt=12: must be a GPU type"),
    (summary(gt=",".join(f"t{i}" for i in range(9))), "gt=t0,t1,t2,t3,t4,t5,t6,t7,t8: more than 8 GPU types"),
    (summary() + ";b=1", "key 'b' given twice"),
    (summary() + ";", "empty field"),
    (PREFIX + "b", "field 'b' is not key=value"),
    (PREFIX, "no fields"),
    (summary(sig=LONG_SIG) + ";" + ";".join(["x" * 200] * 5), "longer than 1024 characters"),
    (summary(b="-1"), "b=-1: must be in 1..1048576"),
    (summary(a=".5"), "a=.5: must be a decimal number"),
    (summary(bt="5."), "bt=5.: must be a decimal number"),
    (summary(m1="1e1234"), "m1=1e1234: must be a decimal number"),
    (summary(m0="1e13.5"), "m0=1e13.5: must be a decimal number"),
    (" " + summary(), "leading or trailing whitespace"),
    (summary() + " ", "leading or trailing whitespace"),
])
def test_malformed_summary_is_rejected_with_a_reason(as_user, test_user, slurm_jobs, comment, reason):
    proc = submit(as_user, test_user, "--wrap", "true", comment=comment)
    if proc.returncode == 0:  # do not leak a job if the plugin wrongly accepted it
        slurm_jobs.append(proc.stdout.strip())
    assert proc.returncode != 0
    assert f"lyasched: invalid cost summary in --comment: {reason}" in proc.stderr
    assert proc.stdout.strip() == ""
    if comment == comment.strip():  # summary.py strips surrounding whitespace when reading
        with pytest.raises(ValueError):  # the Python side of the grammar agrees
            CostSummary.decode(comment)


@pytest.mark.parametrize("override", [
    {"gmin": "1024", "gmax": "1024", "bpp": "8", "b": "1048576", "it": "1000000000", "p": "1000000000000"},
    {"a": "0", "bt": "1000", "m0": "1e13", "m1": "1E+12"},
    {"a": "0.5", "bt": "5", "m0": "0.0", "m1": "3.2e-05", "src": "e"},
    {"a": "1.25E-3", "bt": "-0.0", "m0": "12345678901234567890e-7", "m1": "7e+002"},
    {"id": "A" * 64, "sig": "x" * 128},
    {"ck": "1"},  # optional: the job is checkpointable (lyasub --checkpointable)
    {"mb": "256", "lr": "linear"},  # optional, together: an adaptive batch (lyasub --adaptive-batch)
    {"mb": "1048576", "lr": "adascale", "ck": "1"},
    {"mb": "512", "lr": "sqrt", "cb": "384"},  # the service's chosen batch (it writes it; a user may too: harmless)
    {"kn": "48.0"},  # optional: the profile's knee (the step time is flat up to 48 per GPU)
    {"kn": "1048576"},
    {"gt": "a100"},  # optional: the GPU types the job may run on (lyasub --gpu-type)
    {"gt": "a100,h100.80gb,t4_x,A-1"},
    {"pt": "a100"},  # optional: the GPU type the profile is of
    {"gt": "t4,a100", "pt": "a100-80gb"},
])
def test_boundary_values_are_accepted_and_held(as_user, test_user, slurm_jobs, override):
    job = submitted(submit(as_user, test_user, "--wrap", "true", comment=summary(**override)), slurm_jobs)
    assert squeue(job, "%T|%r") == "PENDING|JobHeldUser"
    CostSummary.decode(summary(**override))  # and the Python side accepts it too


def test_fields_in_any_order_are_accepted(as_user, test_user, slurm_jobs):
    job = submitted(submit(as_user, test_user, "--wrap", "true", comment=summary(list(reversed(FIELDS)))), slurm_jobs)
    assert squeue(job, "%r") == "JobHeldUser"


@pytest.mark.parametrize("comment", [None, "plain job", "note: lyasched:v1;id=x", "lyasched:v2;id=abcdefgh"])
def test_untagged_jobs_run_untouched(as_user, test_user, slurm_jobs, wait_job, comment):
    job = submitted(submit(as_user, test_user, "--wrap", "true", comment=comment), slurm_jobs)
    assert wait_job(job, timeout=60) == "COMPLETED"


def test_owner_keeps_full_control_of_plain_jobs(as_user, test_user, slurm_jobs, wait_job):
    job = submitted(submit(as_user, test_user, "--hold", "--wrap", "true"), slurm_jobs)
    assert squeue(job, "%r") == "JobHeldUser"
    proc = as_user(test_user, "scontrol", "update", f"jobid={job}", f"comment={summary()}")
    assert proc.returncode != 0 and DENIED in proc.stderr  # cannot sneak past validation and hold
    assert as_user(test_user, "scontrol", "update", f"jobid={job}", "comment=mine").returncode == 0
    assert as_user(test_user, "scontrol", "release", job).returncode == 0
    assert wait_job(job, timeout=60) == "COMPLETED"


def test_owner_cannot_requeue_a_released_job(as_user, test_user, slurm_jobs, wait_job):
    job = submitted(submit(as_user, test_user, "--wrap", "sleep 60", comment=summary()), slurm_jobs)
    assert subprocess.run(["scontrol", "release", job], capture_output=True).returncode == 0
    assert wait_job(job, states=frozenset({"RUNNING"}), timeout=30) == "RUNNING"
    proc = as_user(test_user, "scontrol", "requeue", job)  # would restart it without the scheduler
    assert proc.returncode != 0 and "disabled" in proc.stderr
    assert squeue(job, "%T") == "RUNNING"
