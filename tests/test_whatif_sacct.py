"""The sacct parser and the history built from it, on sacct --parsable2 text with the awkward
cases (steps, requeues, typed gres, Unknown ends, cancelled before start, CPU-only, unicode)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from lyasched.whatif.cluster import cluster_from_nodes, infer_cluster
from lyasched.whatif.history import build_history
from lyasched.slurm.sacct import FIELDS, SACCT_FORMAT, SacctError, parse_gpus, parse_sacct
from lyasched.slurm.query import history_args, parse_nodes

DATA = Path(__file__).parent / "data"
AWKWARD = (DATA / "sacct_awkward.txt").read_text(encoding="utf-8")


def ts(s: str) -> float:
    return datetime.fromisoformat(s).timestamp()


@pytest.fixture(scope="module")
def parsed():
    return parse_sacct(AWKWARD, "awkward")


@pytest.fixture(scope="module")
def hist(parsed):
    return build_history(parsed.records)


def job(hist, jid):
    (j,) = [j for j in hist.jobs if j.job_id == jid]
    return j


def test_steps_skipped_and_allocations_kept(parsed):
    assert parsed.steps == 3  # 1001.batch, 1001.extern, 1001.0
    ids = [r.job_id for r in parsed.records]
    assert "1001" in ids and not any("." in i for i in ids)
    assert len(parsed.records) == 17


def test_typed_and_untyped_gres():
    assert parse_gpus("billing=8,cpu=8,gres/gpu:a100=4,gres/gpu=4,mem=64G,node=1") == (4, "a100")  # untyped total wins
    assert parse_gpus("cpu=8,gres/gpu:a100=8,mem=64G") == (8, "a100")  # typed only
    assert parse_gpus("gres/gpu:v100=1,gres/gpu:t4=1") == (2, "v100")  # two types summed
    assert parse_gpus("billing=2,cpu=2,mem=8G,node=1") == (0, "")
    assert parse_gpus("") == (0, "")
    with pytest.raises(ValueError, match="whole number"):
        parse_gpus("cpu=1,gres/gpu=four")


def test_record_fields(parsed):
    r = next(r for r in parsed.records if r.job_id == "1002")
    assert (r.user, r.account, r.partition, r.state) == ("bob", "ml", "gpu", "FAILED")
    assert r.alloc_gpus == 8 and r.gpu_type == "a100" and r.nnodes == 1 and r.nodelist == "gpu02"
    assert r.start == ts("2026-10-01T08:01:30") and r.end == ts("2026-10-01T08:31:30") and r.elapsed == 1800
    assert r.time_limit == 7200
    running = next(r for r in parsed.records if r.job_id == "1007")
    assert running.end is None and running.state == "RUNNING"  # End=Unknown
    cancelled = next(r for r in parsed.records if r.job_id == "1012")
    assert cancelled.state == "CANCELLED" and cancelled.time_limit is None  # "CANCELLED by 0", UNLIMITED
    assert next(r for r in parsed.records if r.job_id == "1011").time_limit is None  # Partition_Limit


def test_counts_account_for_every_job(hist):
    c = hist.counts
    assert c["records"] == 17 and c["total"] == 16  # the two runs of requeued 1006 are one job
    assert (c["gpu"], c["cpu_only"], c["cancelled_before_start"], c["still_running"], c["pending"]) == (10, 1, 2, 1, 2)
    assert c["requeued"] == 1 and c["never_started"] == 0 and c["other_partition"] == 0
    assert sum(c[k] for k in ("gpu", "cpu_only", "cancelled_before_start", "still_running", "pending",
                              "never_started", "other_partition")) == c["total"]
    assert hist.final_states == {"COMPLETED": 5, "FAILED": 1, "TIMEOUT": 1, "OUT_OF_MEMORY": 1, "CANCELLED": 1, "NODE_FAIL": 1}
    ids = {j.job_id for j in hist.jobs}
    assert ids == {"1001", "1002", "1006", "1009", "1010_1", "1010_2", "1011", "1012", "1013", "1014"}


def test_cancelled_before_start_both_spellings(hist):
    # 1003: Start=None; 1004: Start=End, no allocation (NodeList "None assigned", empty AllocTRES)
    ids = {j.job_id for j in hist.jobs}
    assert not ids & {"1003", "1004", "1007", "1008", "1015_[3-5]", "1005"}


def test_requeued_job_merged(hist):
    j = job(hist, "1006")
    assert j.requeues == 1 and len(j.runs) == 2
    assert j.arrival == ts("2026-10-01T08:05:00")  # first run's submit/eligible
    assert j.end == ts("2026-10-01T10:40:00")
    assert j.work_s == 7200  # the last run is the work replayed
    assert j.used_s == 9000  # both runs held GPUs
    assert j.state == "COMPLETED"


def test_eligible_time_is_the_arrival(hist):
    j = job(hist, "1011")  # submitted 08:00, dependency met at 09:00:05
    assert j.arrival == ts("2026-10-01T09:00:05")
    assert j.jct == 1825


def test_unicode_users_and_multi_node(hist):
    users = {j.user for j in hist.jobs}
    assert {"张伟", "josé"} <= users
    j = job(hist, "1009")
    assert j.gpus == 16 and j.runs[0].nnodes == 2 and j.state == "TIMEOUT" and j.time_limit == 3600


def test_partition_filter(parsed):
    h = build_history(parsed.records, partition="gpu")
    assert h.counts["other_partition"] == 2  # 1005 (cpu), 1014 (debug)
    assert h.counts["gpu"] == 9 and h.counts["cpu_only"] == 0


def test_id_reuse_is_not_a_requeue():
    text = "|".join(FIELDS) + "\n" + "".join(
        f"77|u|a|gpu|2026-10-0{d}T08:00:00|2026-10-0{d}T08:00:00|2026-10-0{d}T08:00:00|2026-10-0{d}T09:00:00|3600|COMPLETED|1|n1|"
        "cpu=1,gres/gpu=1|cpu=1,gres/gpu=1|01:00:00\n" for d in (1, 2))
    h = build_history(parse_sacct(text).records)
    assert sorted(j.job_id for j in h.jobs) == ["77", "77#2"] and h.counts["requeued"] == 0


def test_infer_cluster_from_records(hist):
    site = infer_cluster(hist.jobs)
    # gpu01-04 ran GPU jobs; 1002 (8 GPUs on gpu02) and 1009 (16 on gpu[03-04]) fill a node
    assert (site.spec.nodes, site.spec.gpus_per_node) == (4, 8)
    assert site.source == "records" and "4 nodes" in site.how


def test_infer_cluster_counts_concurrent_jobs_on_one_node():
    # eight 1-GPU jobs at once on one node: the node has at least 8 GPUs, not 1
    rows = "".join(
        f"{i}|u|a|gpu|2026-10-01T08:00:00|2026-10-01T08:00:00|2026-10-01T08:00:00|2026-10-01T09:00:00|3600|COMPLETED|1|n1|"
        "cpu=1,gres/gpu=1|cpu=1,gres/gpu=1|01:00:00\n" for i in range(8))
    h = build_history(parse_sacct("|".join(FIELDS) + "\n" + rows).records)
    assert (infer_cluster(h.jobs).spec.nodes, infer_cluster(h.jobs).spec.gpus_per_node) == (1, 8)


def test_cluster_from_scontrol():
    nodes = parse_nodes((DATA / "scontrol_show_node.txt").read_text())
    site = cluster_from_nodes(nodes)
    assert site is not None and (site.spec.nodes, site.spec.gpus_per_node) == (3, 4) and site.source == "scontrol"
    assert cluster_from_nodes(nodes, partition="nosuch") is None


def test_parsable1_elapsed_other_order_extra_columns():
    p = parse_sacct((DATA / "sacct_parsable_elapsed.txt").read_text(), "p1")
    assert p.steps == 1
    h = build_history(p.records)
    assert h.counts["gpu"] == 2 and h.counts["cpu_only"] == 1
    a = job(h, "2001")
    assert a.work_s == 26 * 3600 and a.gpus == 2 and a.time_limit == 2 * 86400
    assert job(h, "2002").gpus == 2  # gres/gpu:v100=1 + gres/gpu:t4=1
    assert h.gpu_types == {"v100": 2}


def test_live_sacct_args():
    args = history_args("now-30days", "2026-11-01", "gpu", FIELDS)
    assert args[:5] == ["sacct", "--parsable2", "--allusers", "--allocations", "--duplicates"]
    assert f"--format={SACCT_FORMAT}" in args and "--starttime=now-30days" in args
    assert "--endtime=2026-11-01" in args and "--partition=gpu" in args
    assert not any(a.startswith("--endtime") for a in history_args("2026-10-01", None, None, FIELDS))


HEADER = "|".join(FIELDS)
GOOD = ("5|u|a|gpu|2026-10-01T08:00:00|2026-10-01T08:00:00|2026-10-01T08:00:10|2026-10-01T09:00:10|3600|COMPLETED|1|n1|"
        "cpu=1,gres/gpu=1|cpu=1,gres/gpu=1|01:00:00")


def _bad(row_or_text: str, header: str = HEADER) -> SacctError:
    text = header + "\n" + GOOD + "\n" + row_or_text + "\n"
    with pytest.raises(SacctError) as e:
        parse_sacct(text, "f.txt")
    return e.value


def _swap(field: str, value: str) -> str:
    f = GOOD.split("|")
    f[FIELDS.index(field)] = value
    return "|".join(f)


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("Submit", "yesterday", "cannot parse time"),
        ("Submit", "Unknown", "no time"),
        ("Start", "2026-13-01T00:00:00", "cannot parse time"),
        ("ElapsedRaw", "1:00", "whole number"),
        ("State", "", "job state"),
        ("NNodes", "two", "whole number"),
        ("AllocTRES", "cpu=1,gres/gpu=x", "whole number"),
        ("ReqTRES", "gres/gpu:a100=", "whole number"),
        ("Timelimit", "forever", "duration"),
        ("End", "2026-10-01T07:00:00", "before Start"),
        ("JobID", "", "empty"),
    ],
)
def test_bad_values_name_line_and_field(field, value, words):
    e = _bad(_swap(field, value))
    msg = str(e)
    assert msg.startswith(f"f.txt line 3: {field}: ") and words in msg and "\n" not in msg
    assert (e.line, e.field) == (3, field)


def test_wrong_field_count_names_line():
    e = _bad("6|u|a|gpu")
    assert "line 3" in str(e) and "4 fields where the header names 15" in str(e)


def test_not_sacct_output():
    with pytest.raises(SacctError, match=r"line 1: not sacct --parsable2 output"):
        parse_sacct("submit_time,duration,num_gpus\n0,10,1\n", "x.csv")
    with pytest.raises(SacctError, match=r"line 1: not sacct --parsable2 output.*without --noheader"):
        parse_sacct(GOOD + "\n", "noheader.txt")
    with pytest.raises(SacctError, match="empty"):
        parse_sacct("\n\n", "e.txt")


def test_missing_fields_listed():
    header = HEADER.replace("|Submit", "").replace("|AllocTRES", "").replace("|Eligible", "")
    with pytest.raises(SacctError, match=r"line 1: header lacks field\(s\) Submit, AllocTRES; record with sacct"):
        parse_sacct(header + "\n", "h.txt")  # Eligible is optional: not listed


def test_heterogeneous_components_and_crlf_and_bom():
    rows = [GOOD.replace("5|", f"9+{k}|", 1) for k in (0, 1)]
    text = "\ufeff" + HEADER + "\r\n" + "\r\n".join(rows) + "\r\n"
    h = build_history(parse_sacct(text).records)
    assert sorted(j.job_id for j in h.jobs) == ["9+0", "9+1"]  # each component is a job
    assert all(j.time_limit == 3600 for j in h.jobs)


def test_a_typed_history_gives_each_job_its_gpu_type(hist):
    by_id = {j.job_id: j for j in hist.jobs}
    assert by_id["1002"].gpu_types == "a100"  # AllocTRES gres/gpu:a100=8
    assert {j.gpu_types for j in hist.jobs} >= {"a100", ""}  # untyped jobs allow any type


def test_the_sites_typed_node_groups_in_the_simulators_cluster_grammar():
    from lyasched.slurm.query import NodeInfo
    from lyasched.whatif.cluster import typed_cluster_spec

    nodes = [NodeInfo("node1", "IDLE", 4, 0, ("gpu",), gpu_type="a100"), NodeInfo("node2", "IDLE", 4, 0, ("gpu",), gpu_type="a100"),
             NodeInfo("node3", "MIXED", 4, 2, ("gpu",), gpu_type="t4"), NodeInfo("cpu1", "IDLE", 0, 0, ("cpu",))]
    assert typed_cluster_spec(nodes) == "a100:2x4,t4:1x4"
    assert cluster_from_nodes(nodes).typed == "a100:2x4,t4:1x4"
    big = NodeInfo("node4", "IDLE", 8, 0, ("big",), gpu_type="a100")
    assert typed_cluster_spec([*nodes, big]) == "a100:2x4,t4:1x4,a100:1x8"  # another GPU count: another group
    assert typed_cluster_spec([*nodes, big], partition="big") == "a100:1x8"
    assert typed_cluster_spec([NodeInfo("n", "IDLE", 4, 0), *nodes[2:3]]) == "gpu:1x4,t4:1x4"  # untyped among typed
    assert typed_cluster_spec([NodeInfo("n", "IDLE", 4, 0)]) == ""  # an untyped site: the plain spec holds
