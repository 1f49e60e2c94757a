"""`lyasched whatif` on histories that lack Eligible, NodeList, Timelimit or ReqTRES: what stands
in for each, said in the JSON and the HTML; the default policy set and when `random` runs; the
plots' scale rules. Fed with tests/data/sacct_awkward.txt with columns removed or blanked."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from lyasched.cli import main
from lyasched.whatif.history import build_history
from lyasched.whatif.html import colors, on_scale
from lyasched.whatif.policies import CANDIDATES, LYASCHED, pick_best
from lyasched.whatif.replay import build_simulation
from lyasched.slurm.sacct import parse_sacct

DATA = Path(__file__).parent / "data"
AWKWARD = (DATA / "sacct_awkward.txt").read_text(encoding="utf-8")
NODE = ("NodeName=gpu0{i} Arch=x86_64 CPUAlloc=0 CPUTot=64 Gres=gpu:a100:8 NodeAddr=gpu0{i} Partitions=gpu "
        "State=IDLE CfgTRES=cpu=64,mem=512000M,billing=64,gres/gpu=8 AllocTRES= GresUsed=gpu:a100:0")


def drop(text: str, *fields: str) -> str:
    """The sacct text without the named columns."""
    rows = [ln.split("|") for ln in text.strip("\n").split("\n")]
    keep = [i for i, name in enumerate(rows[0]) if name not in fields]
    assert len(keep) == len(rows[0]) - len(fields)
    return "\n".join("|".join(r[i] for i in keep) for r in rows) + "\n"


def blank(text: str, field: str, job_ids: set[str], value: str = "") -> str:
    """The sacct text with ``field`` set to ``value`` on the lines of ``job_ids``."""
    rows = [ln.split("|") for ln in text.strip("\n").split("\n")]
    k = rows[0].index(field)
    for r in rows[1:]:
        if r[0] in job_ids:
            r[k] = value
    return "\n".join("|".join(r) for r in rows) + "\n"


def write(tmp_path: Path, text: str, name: str = "h.sacct") -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


VIEWS = ("--managed", "--rigid", "--elastic")


def run(*args):
    """whatif in the elastic view unless a view is named (the cases here are about the elastic and rigid
    replays with their estimate error; test_whatif_managed.py and test_whatif_views.py cover the default)."""
    view = [] if any(a in VIEWS for a in args) else ["--elastic"]
    return CliRunner().invoke(main, ["whatif", *view, *args])


def whatif_json(tmp_path, text, *args):
    r = run("--sacct", write(tmp_path, text), "--json", *args)
    assert r.exit_code == 0, r.output + r.stderr
    return json.loads(r.stdout), r


@pytest.fixture
def no_scontrol(tmp_path, monkeypatch):
    """No Slurm on this host: nothing named scontrol on PATH."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture
def scontrol_shim(tmp_path, monkeypatch):
    """A Slurm host with four 8-GPU nodes: scontrol prints them (whatever the arguments)."""
    d = tmp_path / "shim"
    d.mkdir()
    (d / "nodes.txt").write_text("\n".join(NODE.format(i=i) for i in range(1, 5)) + "\n")
    p = d / "scontrol"
    p.write_text(f'#!/bin/sh\necho "$*" >> "{d}/calls.txt"\ncat "{d}/nodes.txt"\n')
    p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{d}:/usr/bin:/bin")
    return d


# --- Eligible --------------------------------------------------------------------------------------

def test_no_eligible_field_uses_submit(tmp_path):
    s, r = whatif_json(tmp_path, drop(AWKWARD, "Eligible"), "-p", "fifo")
    full, _ = whatif_json(tmp_path, AWKWARD, "-p", "fifo")
    n = s["jobs"]["gpu"]
    (a,) = s["assumptions"]
    assert a == {"field": "Eligible", "jobs": n, "of": n,
                 "text": f"Eligible missing for {n} of {n} jobs (no Eligible field): Submit used as the arrival"}
    assert f"assumed: {a['text']}" in r.stderr
    # 1011 waited on a dependency (Submit 08:00, Eligible 09:00:05): with Submit its JCT is 3605 s longer,
    # 1006's second run has its own Eligible but the arrival is the first run's: no change there
    h = build_history(parse_sacct(AWKWARD).records)
    h2 = build_history(parse_sacct(drop(AWKWARD, "Eligible")).records)
    extra = sum(b.jct - a.jct for a, b in zip(h.jobs, h2.jobs))
    assert extra == pytest.approx(3605.0)
    assert s["actual"]["avg_jct_s"] == pytest.approx(full["actual"]["avg_jct_s"] + extra / n)
    assert full["assumptions"] == []


def test_eligible_unknown_for_some_jobs(tmp_path):
    s, _ = whatif_json(tmp_path, blank(AWKWARD, "Eligible", {"1011", "1012"}, "Unknown"), "-p", "fifo")
    n = s["jobs"]["gpu"]
    assert [a["text"] for a in s["assumptions"]] == [f"Eligible missing for 2 of {n} jobs: Submit used as the arrival"]


# --- Timelimit --------------------------------------------------------------------------------------

def test_no_timelimit_field_means_no_limit(tmp_path):
    text = drop(AWKWARD, "Timelimit")
    s, _ = whatif_json(tmp_path, text, "-p", "backfill,fifo")
    n = s["jobs"]["gpu"]
    assert [(a["field"], a["jobs"], a["of"]) for a in s["assumptions"]] == [("Timelimit", n, n)]
    assert s["assumptions"][0]["text"].startswith(f"Timelimit missing for {n} of {n} jobs (no Timelimit field): no time limit")
    h = build_history(parse_sacct(text).records)
    assert all(j.time_limit is None for j in h.jobs)
    sim, _ = build_simulation(h.jobs, _spec(), slot=30.0, estimate_error=0.2, seed=0)
    assert all(j.time_limit is None for j in sim.jobs)
    assert set(s["policies"]) == {"backfill", "fifo"} and s["policies"]["backfill"]["jobs"] == n


def _spec():
    from lyasched.costmodel.cost import ClusterSpec

    return ClusterSpec(nodes=4, gpus_per_node=8)


def test_timelimit_blank_is_counted_unlimited_is_not(tmp_path):
    # 1012 says UNLIMITED (a real value), 1001 and 1002 have none at all
    s, _ = whatif_json(tmp_path, blank(AWKWARD, "Timelimit", {"1001", "1002"}), "-p", "fifo")
    assert [(a["field"], a["jobs"]) for a in s["assumptions"]] == [("Timelimit", 2)]


# --- NodeList ---------------------------------------------------------------------------------------

def test_no_nodelist_and_no_cluster_is_a_clear_error(tmp_path, no_scontrol):
    out = tmp_path / "rep"
    r = run("--sacct", write(tmp_path, drop(AWKWARD, "NodeList")), "-p", "fifo", "--out", str(out))
    assert r.exit_code == 2, r.output + r.stderr
    err = r.stderr.strip().splitlines()
    assert len([ln for ln in err if ln.startswith("Error")]) == 1
    assert err[-1].startswith("Error: ") and "no NodeList" in err[-1]
    assert "give --nodes and --gpus-per-node" in err[-1] and "scontrol show node" in err[-1]
    assert not out.exists()
    r = run("--sacct", write(tmp_path, drop(AWKWARD, "NodeList")), "-p", "fifo", "--nodes", "4")
    assert r.exit_code == 2 and "give --gpus-per-node" in r.stderr and "--nodes and" not in r.stderr


def test_no_nodelist_cluster_from_options(tmp_path, no_scontrol):
    s, _ = whatif_json(tmp_path, drop(AWKWARD, "NodeList"), "-p", "fifo", "--nodes", "3", "--gpus-per-node", "8")
    n = s["jobs"]["gpu"]
    assert s["cluster"]["source"] == "options" and s["cluster"]["total_gpus"] == 24
    (a,) = s["assumptions"]
    assert a["field"] == "NodeList" and (a["jobs"], a["of"]) == (n, n)
    assert a["text"] == f"NodeList missing for {n} of {n} jobs (no NodeList field): cluster given: --nodes 3 --gpus-per-node 8"


def test_no_nodelist_cluster_from_scontrol(tmp_path, scontrol_shim):
    s, r = whatif_json(tmp_path, drop(AWKWARD, "NodeList"), "-p", "fifo")
    assert s["cluster"]["source"] == "scontrol" and (s["cluster"]["nodes"], s["cluster"]["gpus_per_node"]) == (4, 8)
    assert "scontrol show node" in s["assumptions"][0]["text"]
    assert (scontrol_shim / "calls.txt").exists()


def test_nodelist_present_scontrol_not_asked(tmp_path, scontrol_shim):
    """A saved file whose records name their nodes is replayed on the cluster they imply."""
    s, _ = whatif_json(tmp_path, AWKWARD, "-p", "fifo")
    assert s["cluster"]["source"] == "records" and not (scontrol_shim / "calls.txt").exists()


def test_nodelist_blank_for_some_jobs(tmp_path, no_scontrol):
    s, _ = whatif_json(tmp_path, blank(AWKWARD, "NodeList", {"1010_1", "1010_2"}), "-p", "fifo")
    assert s["cluster"]["source"] == "records" and s["cluster"]["total_gpus"] == 32
    assert [(a["field"], a["jobs"]) for a in s["assumptions"]] == [("NodeList", 2)]
    assert "inferred from the other jobs' nodes" in s["assumptions"][0]["text"]


def test_all_three_missing_and_reqtres_in_the_report(tmp_path, no_scontrol):
    out = tmp_path / "rep"
    text = drop(AWKWARD, "Eligible", "NodeList", "Timelimit", "ReqTRES")
    r = run("--sacct", write(tmp_path, text), "-p", "fifo", "--nodes", "4", "--gpus-per-node", "8", "--out", str(out))
    assert r.exit_code == 0, r.output + r.stderr
    s = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert [a["field"] for a in s["assumptions"]] == ["Eligible", "NodeList", "Timelimit"]
    assert s["jobs"]["gpu"] == 10  # the same jobs as with every field
    page = (out / "report.html").read_text(encoding="utf-8")
    for a in s["assumptions"]:
        assert a["text"] in page
        assert f"assumed: {a['text']}" in r.stdout  # the terminal table too


def test_bad_values_still_fail_when_fields_are_missing(tmp_path, no_scontrol):
    text = drop(AWKWARD, "Eligible", "Timelimit").replace("2026-10-01T08:01:30", "yesterday", 1)
    r = run("--sacct", write(tmp_path, text), "-p", "fifo", "--json")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines()[-1].startswith("Error: ") and "line 6: Start: cannot parse time" in r.stderr


# --- the default policy set ---------------------------------------------------------------------------

def test_default_set_and_the_best_other_baseline(tmp_path):
    s, r = whatif_json(tmp_path, AWKWARD)
    ch = s["baseline_choice"]
    assert list(s["policies"]) == [LYASCHED, "backfill", ch["chosen"]]
    assert "random" not in s["policies"] and set(ch["candidates"]) == set(CANDIDATES)
    # the pick is the candidate with the lowest average JCT when each is replayed on its own
    alone, _ = whatif_json(tmp_path, AWKWARD, "-p", ",".join(CANDIDATES))
    assert ch["candidates"] == pytest.approx({n: alone["policies"][n]["avg_jct_s"] for n in CANDIDATES})
    assert ch["chosen"] == min(CANDIDATES, key=lambda n: (alone["policies"][n]["avg_jct_s"], CANDIDATES.index(n)))
    assert s["policies"][ch["chosen"]] == pytest.approx({**alone["policies"][ch["chosen"]],
                                                        "wall_s": s["policies"][ch["chosen"]]["wall_s"],
                                                        "decide_s": s["policies"][ch["chosen"]]["decide_s"]})
    assert s["labels"] == {"actual": "actual (recorded)", LYASCHED: f"{LYASCHED} (lyasched)", "backfill": "backfill (Slurm)",
                           ch["chosen"]: f"{ch['chosen']} (best other baseline)"}
    assert f"best other baseline by average JCT: {ch['chosen']}" in r.stderr


def test_random_only_when_named(tmp_path):
    s, _ = whatif_json(tmp_path, AWKWARD, "-p", "random,lyapunov")
    assert list(s["policies"]) == ["random", "lyapunov"] and s["baseline_choice"] is None
    assert s["labels"]["random"] == "random"


def test_pick_best_and_ties():
    figs = {"fifo": {"avg_jct_s": 50.0}, "tiresias": {"avg_jct_s": 40.0}, "optimus": {"avg_jct_s": 40.0}}
    assert pick_best(figs)["chosen"] == "tiresias"  # a tie goes to the earlier candidate
    figs["fifo"]["avg_jct_s"] = 10.0
    assert pick_best(figs) == {"chosen": "fifo", "by": "avg_jct_s", "candidates": {"fifo": 10.0, "tiresias": 40.0,
                                                                                    "optimus": 40.0}}


# --- the report's plots -------------------------------------------------------------------------------

def test_scale_rules_and_colours():
    assert on_scale({"a": 10.0, "b": 12.0, "c": 11.0}, 1.5) == 12.0
    assert on_scale({"a": 10.0, "b": 100.0, "c": 11.0}, 1.5) == 11.0  # b would squash the rest
    assert on_scale({"a": 10.0, "b": 100.0, "c": 1000.0}, 1.5) == 10.0
    # never cut the kept ones; two long tails together do not stretch the axis either
    spans = {"actual": 2.1, "lyapunov": 2.0, "random": 6.5, "fixed-1": 9.2, "fifo": 2.9}
    assert on_scale(spans, 1.5, keep=("actual", "lyapunov")) == 2.9
    assert on_scale({**spans, "lyapunov": 20.0}, 1.5, keep=("actual", "lyapunov")) == 20.0
    c = colors(["actual", "lyapunov", "backfill", "tiresias", "random"])
    assert c["actual"] == "black" and len(set(c.values())) == 5


def test_report_panels_one_per_outcome(tmp_path):
    out = tmp_path / "rep"
    r = run("--sacct", write(tmp_path, AWKWARD), "--out", str(out))
    assert r.exit_code == 0, r.output + r.stderr
    page = (out / "report.html").read_text(encoding="utf-8")
    s = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert "(best other baseline)" in page and "random" not in s["labels"]
    svgs = [base64.b64decode(b).decode("utf-8") for b in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', page)]
    gpus = svgs[2]
    assert gpus.count("GPU util") == 1 + len(s["policies"])  # one panel per outcome, each saying its use
    for name, label in s["labels"].items():
        assert all(label in svg for svg in svgs), label
    assert not any("random" in svg for svg in svgs)
