"""Slurm query builders and parsers, fed output recorded from the 22.05 test cluster (tests/data/)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lyasched.slurm import commands
from lyasched.slurm import query as q

DATA = Path(__file__).parent / "data"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_parse_nodes_recorded_counts_gpus_from_gres_when_tres_lacks_them():
    # Recorded with a 3-GPU plain job on node1 and a 2-node x 2-GPU job on node2+node3;
    # AccountingStorageTRES has no gres/gpu there, so only Gres/GresUsed count GPUs.
    nodes = q.parse_nodes(read("scontrol_show_node.txt"))
    assert [n.name for n in nodes] == ["node1", "node2", "node3"]
    assert [n.gpus_total for n in nodes] == [4, 4, 4]
    assert [n.gpus_alloc for n in nodes] == [3, 2, 2]
    assert [n.gpus_free for n in nodes] == [1, 2, 2]
    assert all(n.usable and n.partitions == ("gpu",) for n in nodes)


@pytest.mark.parametrize(
    "state, usable",
    [("IDLE", True), ("MIXED", True), ("ALLOCATED", True), ("IDLE+DRAIN", False), ("MIXED+DRAIN", False),
     ("DOWN", False), ("DOWN*", False), ("IDLE*", False), ("DRAINED", False), ("IDLE+COMPLETING", True)],
)
def test_unusable_nodes_have_no_free_gpus(state, usable):
    line = read("scontrol_show_node.txt").splitlines()[1].replace("State=MIXED", f"State={state}")
    (node,) = q.parse_nodes(line)
    assert node.usable is usable
    assert node.gpus_free == (2 if usable else 0)


def test_parse_nodes_with_tres_and_typed_gres():
    line = ("NodeName=g1 Arch=x86_64 Gres=gpu:a100:8(S:0-1) GresUsed=gpu:a100:3(IDX:0-2) State=MIXED "
            "Partitions=p1,p2 CfgTRES=cpu=64,mem=512G,billing=64,gres/gpu=8,gres/gpu:a100=8 "
            "AllocTRES=cpu=6,gres/gpu=3,gres/gpu:a100=3 Reason=flaky [root@2026-01-01T00:00:00]")
    (n,) = q.parse_nodes(line)
    assert (n.gpus_total, n.gpus_alloc, n.gpus_free, n.gpu_type) == (8, 3, 5, "a100")
    assert n.partitions == ("p1", "p2")
    assert n.reason.startswith("flaky")


def test_parse_nodes_rejects_garbage():
    with pytest.raises(q.ParseError):
        q.parse_nodes("this is not scontrol output")


def test_parse_squeue_recorded_keeps_only_tagged_jobs_and_splits_name_with_pipes():
    jobs = {j.job_id: j for j in q.parse_squeue(read("squeue.txt"))}
    assert "1" not in jobs and "9" not in jobs  # plain jobs: no lyasched comment
    held = jobs["10"]
    assert (held.user, held.unix_uid, held.state, held.reason) == ("lyatest", 1001, "PENDING", "JobHeldUser")
    assert held.held_by_service and held.pending and not held.running
    assert held.start_time is None  # squeue's expected start of a pending job is not a start
    assert held.time_limit == 600.0 and held.priority == 0
    assert held.comment.startswith(q.TAG) and "id=testuid0002" in held.comment
    assert held.name == "held one"
    two = jobs["11"]
    assert two.running and two.nodes == ("node2", "node3") and (two.num_nodes, two.gpus_per_node, two.gpus) == (2, 2, 4)
    assert two.end_time is None  # a running job's EndTime is a projection
    done = jobs["8"]
    assert done.finished and done.name == "my|job name" and done.run_seconds == 3.0
    all_jobs = q.parse_squeue(read("squeue.txt"), lyasched_only=False)
    assert {"1", "9"} <= {j.job_id for j in all_jobs}


def test_parse_squeue_rejects_short_lines():
    with pytest.raises(q.ParseError):
        q.parse_squeue("1|root|0|RUNNING")


def test_parse_show_job_recorded():
    jobs = {j.job_id: j for j in q.parse_show_job(read("scontrol_show_job.txt"))}
    assert set(jobs) == {"9", "10", "11"}
    assert (jobs["9"].user, jobs["9"].unix_uid, jobs["9"].gpus, jobs["9"].is_lyasched) == ("lyaother", 1002, 3, False)
    assert jobs["10"].held_by_service and jobs["10"].comment.startswith(q.TAG) and jobs["10"].name == "held one"
    assert jobs["11"].nodes == ("node2", "node3") and jobs["11"].gpus == 4 and jobs["11"].time_limit == 600.0


def test_accounting_detection_recorded_config_has_none():
    assert q.accounting_enabled(read("scontrol_show_config.txt")) is False
    assert q.accounting_enabled("AccountingStorageType   = accounting_storage/slurmdbd\n") is True


def test_parse_sacct():
    text = "12|alice|COMPLETED|2026-11-22T10:00:00|2026-11-22T10:00:05|2026-11-22T10:01:05|60|2|billing=8,gres/gpu=8\n"
    (r,) = q.parse_sacct(text)
    assert (r.job_id, r.state, r.elapsed) == ("12", "COMPLETED", 60.0)
    assert r.end_time - r.start_time == 60


@pytest.mark.parametrize(
    "text, seconds",
    [("UNLIMITED", math.inf), ("5:00", 300), ("10:00", 600), ("1:00:00", 3600), ("365-00:00:00", 365 * 86400),
     ("1-02", 93600), ("7", 420), ("00:05:00", 300)],
)
def test_parse_duration(text, seconds):
    assert q.parse_duration(text) == seconds


def test_parse_duration_rejects_garbage():
    with pytest.raises(q.ParseError):
        q.parse_duration("soon")


@pytest.mark.parametrize(
    "text, gpus",
    [("gres:gpu:4", 4), ("gpu:4", 4), ("gpu:tesla:2(S:0)", 2), ("cpu=1,gres/gpu=2", 2), ("", 0), ("N/A", 0),
     ("(null)", 0), ("gres/gpu=4,gres/gpu:a100=4", 4), ("gpu:0", 0), ("gres:gpu:a100:2", 2), ("cpu=8,mem=4000M", 0)],
)
def test_gpus_in_tres(text, gpus):
    assert q.gpus_in_tres(text) == gpus


def test_expand_hostlist():
    assert q.expand_hostlist("node[1-3]") == ["node1", "node2", "node3"]
    assert q.expand_hostlist("n[01-02,7],gpu5") == ["n01", "n02", "n7", "gpu5"]
    assert q.expand_hostlist("") == [] and q.expand_hostlist("(null)") == []


def test_update_release_hold_builders():
    assert commands.update_args("42", 2, 4, ["node1", "node3"]) == [
        "scontrol", "update", "JobId=42", "NumNodes=2-2", "NumTasks=2", "NumCPUs=2", "TresPerNode=gres:gpu:4",
        "ReqNodeList=node1,node3",
    ]
    assert commands.update_args("7", 1, 2)[-1] == "ReqNodeList="
    assert commands.release_args("42") == ["scontrol", "release", "42"]
    assert commands.hold_args("42") == ["scontrol", "hold", "42"]
    with pytest.raises(ValueError):
        commands.update_args("1", 2, 1, ["node1"])
    with pytest.raises(ValueError):
        commands.update_args("1", 0, 1)


def test_squeue_args_use_fixed_format_with_free_text_last():
    args = q.squeue_args(user="alice")
    fmt = args[args.index("-o") + 1]
    assert fmt.endswith("%k|%j") and "--states=all" in args and args[-2:] == ["--user", "alice"]


def test_job_states_are_classified_once_and_consistently():
    """lyasched.slurm.types is the one classification: active and terminal are disjoint, the
    holding and ran states are subsets of them, SPECIAL_EXIT is active (held, never finished)."""
    from lyasched.slurm import types as t

    assert not t.ACTIVE_STATES & t.TERMINAL_STATES
    assert t.HOLDING_STATES <= t.ACTIVE_STATES and t.RAN_STATES <= t.TERMINAL_STATES
    assert "SPECIAL_EXIT" in t.ACTIVE_STATES
    job = q.parse_squeue("1|u|1|SPECIAL_EXIT|None|0|N/A|N/A|N/A|10:00|1|gres:gpu:1||gpu|lyasched:v1;x|n\n")[0]
    assert not job.finished and not job.running and not job.pending
    for state in t.HOLDING_STATES:
        assert q.parse_squeue(f"1|u|1|{state}|None|0|N/A|N/A|N/A|10:00|1|gres:gpu:1|n1|gpu|lyasched:v1;x|n\n")[0].running


def test_gpus_in_use_come_from_gres_used_not_a_stale_alloc_tres():
    # Seen on the docker cluster (Slurm 22.05.8, typed Gres) after node1's container was killed mid-job
    # and restarted: idle, GresUsed 0, but AllocTRES still holding one a100. The larger of the two hid
    # that GPU, and a 12-GPU job on the 12-GPU cluster was held for good.
    line = ("NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=8 CPUTot=8 AvailableFeatures=a100 "
            "ActiveFeatures=a100 Gres=gpu:a100:4 GresDrain=N/A GresUsed=gpu:a100:0(IDX:N/A) NodeAddr=172.31.77.21 "
            "State=IDLE Partitions=gpu,managed CfgTRES=cpu=8,mem=4000M,billing=8,gres/gpu=4,gres/gpu:a100=4 "
            "AllocTRES=gres/gpu:a100=1 CapWatts=n/a\n")
    (node,) = q.parse_nodes(line)
    assert (node.gpus_total, node.gpus_alloc, node.gpus_free, node.gpu_type) == (4, 0, 4, "a100")
    busy = line.replace("GresUsed=gpu:a100:0(IDX:N/A)", "GresUsed=gpu:a100:2(IDX:0-1)")
    assert q.parse_nodes(busy)[0].gpus_alloc == 2
    # without -d there is no GresUsed: AllocTRES is all there is
    assert q.parse_nodes(line.replace(" GresUsed=gpu:a100:0(IDX:N/A)", ""))[0].gpus_alloc == 1
