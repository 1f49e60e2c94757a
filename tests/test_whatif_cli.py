"""`lyasched whatif --sacct FILE` through click's CliRunner: JSON, table, HTML report, bad input."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from lyasched.cli import main
from lyasched.policy import POLICIES
from lyasched.whatif.policies import CANDIDATES
from lyasched.whatif.history import build_history
from lyasched.whatif.cluster import infer_cluster
from lyasched.whatif.replay import build_simulation, replay_history
from lyasched.slurm.sacct import FIELDS, parse_sacct

DATA = Path(__file__).parent / "data"
AWKWARD = str(DATA / "sacct_awkward.txt")


VIEWS = ("--managed", "--rigid", "--elastic")


def run(*args):
    """whatif in the elastic view unless a view is named (the cases here are about the elastic and rigid
    replays with their estimate error; test_whatif_managed.py and test_whatif_views.py cover the default)."""
    view = [] if any(a in VIEWS for a in args) else ["--elastic"]
    return CliRunner().invoke(main, ["whatif", *view, *args])


def test_json_shape_and_counts():
    r = run("--sacct", AWKWARD, "-p", "lyapunov,fifo", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    s = json.loads(r.stdout)  # one JSON object, progress went to stderr
    assert "whatif: read 17 allocation records" in r.stderr
    assert s["jobs"]["gpu"] == 10 and s["jobs"]["cpu_only"] == 1 and s["jobs"]["cancelled_before_start"] == 2
    assert s["jobs"]["still_running"] == 1 and s["jobs"]["pending"] == 2 and s["jobs"]["requeued"] == 1
    assert s["jobs"]["steps"] == 3
    assert set(s["policies"]) == {"lyapunov", "fifo"}
    keys = {"avg_jct_s", "p95_jct_s", "avg_wait_s", "p95_wait_s", "avg_slowdown", "worst_user_slowdown", "gpu_util",
            "other_gpu_count", "jobs"}
    for m in [s["actual"], *s["policies"].values()]:
        assert keys <= set(m) and m["jobs"] == 10
        assert 0 < m["gpu_util"] <= 1 and m["avg_slowdown"] >= 1
    assert s["actual"]["other_gpu_count"] == 0
    assert s["policies"]["fifo"]["other_gpu_count"] == 0  # fifo gives what was asked
    assert s["cluster"] == {**s["cluster"], "nodes": 4, "gpus_per_node": 8, "source": "records"}
    # per user / per account, unicode names intact
    assert {"张伟", "josé", "alice"} <= set(s["users"]) and set(s["accounts"]) == {"ml", "physics"}
    u = s["users"]["张伟"]
    assert u["jobs"] == 1 and u["gpu_hours"] == pytest.approx(16.0)
    assert set(u["policies"]) == {"lyapunov", "fifo"} and u["actual"]["avg_wait_s"] == pytest.approx(60.0)
    assert sum(x["jobs"] for x in s["users"].values()) == 10


def test_actual_figures_match_the_records():
    s = json.loads(run("--sacct", AWKWARD, "-p", "fifo", "--json").stdout)
    h = build_history(parse_sacct(Path(AWKWARD).read_text()).records)
    jct = [j.jct for j in h.jobs]
    assert s["actual"]["avg_jct_s"] == pytest.approx(np.mean(jct))
    assert s["actual"]["p95_jct_s"] == pytest.approx(np.percentile(jct, 95))
    # 1006 waited 300 s (arrival 08:05, two runs of 1800 + 7200 s, ended 10:40); 1010_* 300 s
    assert s["actual"]["max_wait_s"] == pytest.approx(300.0)
    busy = sum((r.end - r.start) * r.gpus for j in h.jobs for r in j.runs)
    span = max(j.end for j in h.jobs) - min(j.arrival for j in h.jobs)
    assert s["actual"]["gpu_util"] == pytest.approx(busy / (32 * span))


@pytest.mark.parametrize("error", [0.0, 0.2])
def test_replay_truth_is_the_recorded_run(error):
    """On the GPU count it got, a job runs as long as it did; the estimate carries the error."""
    h = build_history(parse_sacct(Path(AWKWARD).read_text()).records)
    spec = infer_cluster(h.jobs).spec
    rep = replay_history(h.jobs, spec, ["fifo"], {}, slot=30.0, estimate_error=error, seed=1)
    for rec in rep.results[0].records:
        j = h.jobs[rep.index[rec.job.job_id]]
        assert rec.gpus == j.gpus
        assert rec.run_s == pytest.approx(j.work_s, rel=0.01, abs=2.0), j.job_id
    sim, index = build_simulation(h.jobs, spec, slot=30.0, estimate_error=error, seed=1)
    preds = [sim.predicted(i).run_time(h.jobs[index[sj.job_id]].gpus, h.jobs[index[sj.job_id]].gpus > 8)
             for i, sj in enumerate(sim.jobs)]
    truths = [h.jobs[index[sj.job_id]].work_s for sj in sim.jobs]
    off = [abs(p / t - 1) for p, t in zip(preds, truths)]
    if error == 0:
        assert max(off) < 0.01
    else:
        assert max(off) > 0.05  # the policies see estimates, not the record


def test_real_time_limits_replace_synthetic_ones():
    h = build_history(parse_sacct(Path(AWKWARD).read_text()).records)
    sim, index = build_simulation(h.jobs, infer_cluster(h.jobs).spec, slot=30.0, estimate_error=0.2, seed=0)
    for j in sim.jobs:
        assert j.time_limit == h.jobs[index[j.job_id]].time_limit


def test_table_default_policies():
    """By default: actual, lyasched, Slurm's backfill and the best other baseline, labelled."""
    r = run("--sacct", AWKWARD)
    assert r.exit_code == 0, r.output + r.stderr
    lines = r.stdout.splitlines()
    rows = [line.split("  ")[0] for line in lines if line.startswith(("actual ", *(f"{n} " for n in POLICIES)))]
    assert rows[:3] == ["actual (recorded)", "lyapunov (lyasched)", "backfill (Slurm)"]
    assert len(rows) == 4 and rows[3].endswith(" (best other baseline)"), rows
    assert rows[3].split()[0] in CANDIDATES
    assert not any(line.startswith(("random ", "fixed-1 ", "sjf-oracle ", "srpt-oracle ", "elastic ")) for line in lines)
    assert "best other baseline: " in r.stdout
    assert "10 GPU jobs replayed" in r.stdout and "2 cancelled before start" in r.stdout
    assert "张伟" in r.stdout


def test_param_uses_replay_validation():
    r = run("--sacct", AWKWARD, "-p", "lyapunov", "--param", "lyapunov.V=10", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    assert json.loads(r.stdout)["params"] == {"lyapunov": {"V": 10}}
    bad = run("--sacct", AWKWARD, "-p", "fifo", "--param", "nosuch=1")
    assert bad.exit_code == 2 and "no replayed policy has a parameter 'nosuch'" in bad.output


def test_out_dir_self_contained_report(tmp_path):
    out = tmp_path / "rep"
    r = run("--sacct", AWKWARD, "-p", "lyapunov,fifo,backfill", "--out", str(out))
    assert r.exit_code == 0, r.output + r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "summary.json"]
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "张伟" in page
    assert not re.search(r"""(src|href)=["'](?!data:)""", page)  # nothing outside the file
    imgs = re.findall(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) == 3
    svgs = [base64.b64decode(b).decode("utf-8") for b in imgs]
    assert all("<svg" in s for s in svgs)
    assert "JCT CDF" in svgs[0] and "average wait per user" in svgs[1] and "GPUs in use" in svgs[2]
    assert "张伟" in svgs[1]  # text kept as text: the browser draws any script
    for name in ("actual", "lyapunov", "fifo", "backfill"):
        assert all(name in s for s in (svgs[0], svgs[2]))
    s = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert set(s["policies"]) == {"lyapunov", "fifo", "backfill"}


def _file(tmp_path, text: str | bytes) -> str:
    p = tmp_path / "bad.txt"
    p.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return str(p)


GOOD = Path(AWKWARD).read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize(
    "content,expect",
    [
        ("submit_time,duration,num_gpus\n0,60,1\n", "line 1: not sacct --parsable2 output"),
        ("\n".join([GOOD[0].replace("|AllocTRES", "")] + [ln.rsplit("|", 3)[0] for ln in GOOD[1:3]]),
         "line 1: header lacks field(s) AllocTRES"),
        ("\n".join(GOOD[:5] + [GOOD[5].replace("2026-10-01T08:01:30", "01/10/26 08:01")]), "line 6: Start: cannot parse time"),
        ("\n".join(GOOD[:7] + [GOOD[7].replace("|0|CANCELLED", "|zero|CANCELLED")]), "line 8: ElapsedRaw:"),
        ("\n".join(GOOD[:2] + [GOOD[2][:40]]), "line 3: 6 fields where the header names 15"),
        ("\n".join([GOOD[0], GOOD[8]]), "no finished GPU job to replay"),  # CPU-only history
        ("\n".join(GOOD[1:]), "line 1: not sacct --parsable2 output"),  # --noheader
        (GOOD[0].encode() + b"\n" + GOOD[1].encode() + b"\n1002|b\xe9b|ml\n", "line 3: not UTF-8 text"),
        ("", "empty"),
    ],
)
def test_bad_input_one_line_exit_2_no_report(tmp_path, content, expect):
    out = tmp_path / "rep"
    r = run("--sacct", _file(tmp_path, content), "-p", "fifo", "--out", str(out), "--json")
    assert r.exit_code == 2, r.output + r.stderr
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith("Error: ") and expect in err, err
    assert r.stdout == "" and not out.exists()


def test_usage_errors_exit_2(tmp_path):
    assert run("-p", "fifo").exit_code == 2  # neither --sacct nor --since
    r = run("--sacct", AWKWARD, "--since", "now-1days")
    assert r.exit_code == 2 and "either --sacct FILE or --since DATE" in r.stderr
    assert run("--sacct", AWKWARD, "--until", "now").exit_code == 2
    assert run("--sacct", AWKWARD, "-p", "nosuch").exit_code == 2
    r = run("--sacct", str(tmp_path / "missing.txt"))
    assert r.exit_code == 2 and "missing.txt" in r.stderr
    f = tmp_path / "file"
    f.write_text("x")
    assert run("--sacct", AWKWARD, "--out", str(f)).exit_code == 2


def test_cluster_too_small_for_a_recorded_job(tmp_path):
    out = tmp_path / "rep"
    r = run("--sacct", AWKWARD, "-p", "fifo", "--nodes", "1", "--gpus-per-node", "8", "--out", str(out))
    assert r.exit_code == 2 and "1 recorded jobs used more than the cluster's 8 GPUs (job 1009: 16)" in r.stderr
    assert not out.exists()


def test_given_cluster_and_partition(tmp_path):
    r = run("--sacct", AWKWARD, "-p", "fifo", "--nodes", "3", "--gpus-per-node", "8", "--partition", "gpu", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    s = json.loads(r.stdout)
    assert s["cluster"]["total_gpus"] == 24 and s["cluster"]["source"] == "options"
    assert s["jobs"]["gpu"] == 9 and s["jobs"]["other_partition"] == 2


def test_existing_report_untouched_on_bad_input(tmp_path):
    out = tmp_path / "rep"
    assert run("--sacct", AWKWARD, "-p", "fifo", "--out", str(out)).exit_code == 0
    before = (out / "report.html").read_bytes()
    bad = _file(tmp_path, "\n".join(GOOD[:5] + [GOOD[5].replace("|FAILED|", "|failed!|")]))
    r = run("--sacct", bad, "-p", "fifo", "--out", str(out))
    assert r.exit_code == 2 and "line 6: State" in r.stderr
    assert (out / "report.html").read_bytes() == before


def test_columns_found_by_name(tmp_path):
    """Columns are found by name: a file with the fields reversed reads the same."""
    rows = [ln.split("|") for ln in GOOD]
    rev = "\n".join("|".join(reversed(r)) for r in rows)
    a = json.loads(run("--sacct", AWKWARD, "-p", "fifo", "--json").stdout)
    b = json.loads(run("--sacct", _file(tmp_path, rev), "-p", "fifo", "--json").stdout)
    assert a["jobs"] == b["jobs"] and a["actual"] == b["actual"]
    assert FIELDS[0] == "JobID"


def test_progress_on_stderr_only():
    r = run("--sacct", AWKWARD, "-p", "lyapunov", "--json")
    assert "replaying under lyapunov (1/1)" in r.stderr and "whatif:" not in r.stdout


def test_rigid_keeps_recorded_gpu_counts():
    elastic = json.loads(run("--sacct", AWKWARD, "-p", "lyapunov,optimus", "--json").stdout)
    rigid = json.loads(run("--sacct", AWKWARD, "-p", "lyapunov,optimus", "--rigid", "--json").stdout)
    assert elastic["policies"]["lyapunov"]["other_gpu_count"] > 0 and not elastic["rigid"]
    assert rigid["rigid"] and all(p["other_gpu_count"] == 0 for p in rigid["policies"].values())


def test_zero_length_job_slowdown_is_at_least_one(tmp_path):
    """A job that failed the second it started (ElapsedRaw 0) is replayed; bounded slowdown >= 1."""
    row = ("1099|gil|ml|gpu|2026-10-01T08:20:00|2026-10-01T08:20:00|2026-10-01T08:20:00|2026-10-01T08:20:00|0|FAILED|1|"
           "gpu03|billing=2,cpu=2,gres/gpu=1,mem=16G,node=1|billing=2,cpu=2,gres/gpu=1,mem=16G,node=1|00:30:00")
    f = _file(tmp_path, "\n".join(GOOD + [row]) + "\n")
    r = run("--sacct", f, "-p", "fifo,lyapunov", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    s = json.loads(r.stdout)
    assert s["jobs"]["gpu"] == 11 and s["users"]["gil"]["jobs"] == 1
    for m in [s["actual"], *s["policies"].values()]:
        assert m["avg_slowdown"] >= 1 and m["worst_user_slowdown"] >= 1
    for u in s["users"].values():
        assert all(p["avg_slowdown"] >= 1 for p in [u["actual"], *u["policies"].values()])
