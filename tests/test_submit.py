"""Pure sbatch/squeue/scontrol builders and parsers (lyasched.slurm.submit), fed strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from lyasched.slurm import submit as cmd
from lyasched.submitter import SubmitRequest, gpu_counts_for_batch, profile_job_argv


def test_sbatch_command_minimal() -> None:
    assert cmd.sbatch_command(cmd.SbatchOptions(), "job.sh") == ["sbatch", "--parsable", "job.sh"]
    assert cmd.sbatch_command(cmd.SbatchOptions()) == ["sbatch", "--parsable"]


def test_sbatch_command_every_option() -> None:
    opts = cmd.SbatchOptions(
        partition="gpu", account="proj", qos="normal", time="2:00:00", mem="32G", cpus_per_gpu=4, job_name="my job",
        output="out-%j.txt", error="err-%j.txt", constraint="a100&ib", comment="lyasched:v1;id=x", gpus_per_node=2,
        nodes=1, hold=True, chdir="/scratch/me", extra=("--ntasks=1",),
    )
    assert cmd.sbatch_command(opts, "/tmp/launch.sbatch") == [
        "sbatch", "--parsable", "--partition=gpu", "--account=proj", "--qos=normal", "--time=2:00:00", "--mem=32G",
        "--cpus-per-gpu=4", "--job-name=my job", "--output=out-%j.txt", "--error=err-%j.txt",
        "--constraint=a100&ib", "--comment=lyasched:v1;id=x", "--nodes=1", "--chdir=/scratch/me",
        "--gres=gpu:2", "--hold", "--ntasks=1", "/tmp/launch.sbatch",
    ]


def test_option_values_cannot_become_options() -> None:
    # "--partition=--wrap=rm" is one argv element: sbatch reads it as a partition name
    argv = cmd.sbatch_command(cmd.SbatchOptions(partition="--wrap=rm -rf ~", job_name="x --hold"), "s")
    assert argv == ["sbatch", "--parsable", "--partition=--wrap=rm -rf ~", "--job-name=x --hold", "s"]


@pytest.mark.parametrize(
    "out, want",
    [
        ("123\n", ("123", None)),
        ("123", ("123", None)),
        ("123;cluster\n", ("123", "cluster")),
        ("  4567;lyatest  \n", ("4567", "lyatest")),
        ("sbatch: warning: something\n89\n", ("89", None)),
        ("12_3\n", ("12_3", None)),
        ("12;\n", ("12", None)),
    ],
)
def test_parse_parsable(out: str, want: tuple) -> None:
    assert cmd.parse_parsable(out) == want


@pytest.mark.parametrize("out", ["", "\n", "Submitted batch job 123\n", "abc", ";cluster", "-5", "12 13"])
def test_parse_parsable_rejects(out: str) -> None:
    with pytest.raises(ValueError):
        cmd.parse_parsable(out)


SQUEUE = """\
101|PENDING|lyasched:v1;id=aaaaaaaa11;sig=x;b=8
102|RUNNING|lyasched:v1;id=bbbbbbbb22;sig=x;b=8
103|CANCELLED|lyasched:v1;id=cccccccc33;sig=x
104|PENDING|my own comment id=dddddddd44
105|PENDING|lyasched:v1;id=eeeeeeee55x;sig=x
garbage line
"""


def test_squeue_lookup_by_uid() -> None:
    assert cmd.squeue_comments_command("alice") == ["squeue", "--noheader", "--user=alice", "--format=%i|%T|%k"]
    assert cmd.find_job_by_uid(SQUEUE, "aaaaaaaa11") == "101"
    assert cmd.find_job_by_uid(SQUEUE, "bbbbbbbb22") == "102"
    assert cmd.find_job_by_uid(SQUEUE, "cccccccc33") is None  # finished: a retry may submit again
    assert cmd.find_job_by_uid(SQUEUE, "dddddddd44") is None  # not a lyasched comment
    assert cmd.find_job_by_uid(SQUEUE, "eeeeeeee55") is None  # a prefix of another uid
    assert cmd.find_job_by_uid("", "aaaaaaaa11") is None


SHOW_JOB = (
    "JobId=42 JobName=train.py UserId=lyatest(1001) GroupId=lyatest(1001) Priority=0 Nice=0 Account=(null) "
    "QOS=(null) JobState=PENDING Reason=JobHeldUser Dependency=(null) NumNodes=1-1 NumCPUs=1 "
    "TRES=cpu=1,node=1,billing=1 Command=/tmp/my dir/launch.sbatch WorkDir=/tmp "
    "Comment=lyasched:v1;id=aaaaaaaa11;sig=x TresPerNode=gres:gpu:1\n"
)


def test_parse_scontrol_show_job() -> None:
    f = cmd.parse_scontrol_show(SHOW_JOB)
    assert f["JobId"] == "42"
    assert f["UserId"] == "lyatest(1001)"
    assert f["Comment"] == "lyasched:v1;id=aaaaaaaa11;sig=x"
    assert f["Command"] == "/tmp/my dir/launch.sbatch"
    assert f["TresPerNode"] == "gres:gpu:1"
    assert cmd.job_state(f) == "PENDING"
    assert cmd.job_state({"JobState": "CANCELLED by 0"}) == "CANCELLED"
    assert cmd.scontrol_show_job_command("42") == ["scontrol", "--oneliner", "show", "job", "42"]
    assert cmd.scancel_command("42") == ["scancel", "42"]


@pytest.mark.parametrize(
    "line, want",
    [
        ("JobSubmitPlugins        = lua", True),
        ("JobSubmitPlugins        = job_submit/lua,require_timelimit", True),
        ("JobSubmitPlugins        = lua_extra", False),
        ("JobSubmitPlugins        = (null)", False),
        ("JobCompType             = jobcomp/none", False),
    ],
)
def test_has_lua_submit_plugin(line: str, want: bool) -> None:
    assert cmd.has_lua_submit_plugin("Configuration data as of now\n" + line + "\n") is want


def test_gpu_counts_for_batch() -> None:
    assert gpu_counts_for_batch(12, 1, 8) == [1, 2, 3, 4, 6]
    assert gpu_counts_for_batch(7, 2, 6) == []
    assert gpu_counts_for_batch(4, 1, 16) == [1, 2, 4]  # B/g >= 1


def test_profile_job_argv() -> None:
    req = SubmitRequest(command=["t.py"], model="resnet", global_batch=8, iterations=1, model_args={"width": 32},
                        options=cmd.SbatchOptions(partition="gpu", account="a", time="9:00:00", job_name="mine"))
    argv = profile_job_argv(req, Path("/d/u.json"), Path("/d/u.out"), Path("/d/db"), python="/py")
    assert argv[:2] == ["sbatch", "--parsable"]
    assert "--partition=gpu" in argv and "--account=a" in argv
    assert "--time=00:30:00" in argv and "--job-name=lyasched-profile" in argv  # not the user's
    assert "--gres=gpu:1" in argv and "--nodes=1" in argv and "--ntasks=1" in argv
    assert "--output=/d/u.out" in argv
    assert not any(a.startswith("--comment") for a in argv)  # a plain job: the plugin leaves it alone
    assert argv[-1] == ("--wrap=exec /py -m lyasched.profile resnet --out /d/u.json --db /d/db --max-batch 8 "
                        "--time-budget 300 --quiet --arg width=32")
    big = SubmitRequest(command=["t.py"], model="mlp", global_batch=65536, iterations=1, min_gpus=2)
    assert "--max-batch 1024" in profile_job_argv(big, Path("o"), Path("l"), Path("d"))[-1]
