"""`lyasched whatif`'s views: managed by default (the users' own GPU counts, run times estimated
from the history), --rigid and --elastic on request; the terminal, the JSON and the HTML report
say which view they show. The shipped sample history (examples/sample.sacct) is what they read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lyasched.cli import main

SAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "sample.sacct")


def run(*args):
    return CliRunner().invoke(main, ["whatif", "--sacct", SAMPLE, *args])


def test_the_sample_history_is_a_few_hundred_gpu_jobs():
    from lyasched.slurm.sacct import parse_sacct
    from lyasched.whatif.history import build_history

    text = Path(SAMPLE).read_text(encoding="utf-8")
    parsed = parse_sacct(text, SAMPLE)
    hist = build_history(parsed.records, None)
    assert 200 <= len(hist.jobs) <= 1000 and not parsed.missing
    assert len({j.user for j in hist.jobs}) > 10


def test_default_is_the_managed_view_and_says_so(tmp_path):
    out = tmp_path / "rep"
    r = run("--json", "--out", str(out))
    assert r.exit_code == 0, r.output + r.stderr
    s = json.loads(r.stdout)
    assert s["view"] == "managed" and s["rigid"] is True and "managed" in s
    assert list(s["policies"]) == ["lyapunov", "backfill", "backfill-limits"]
    assert all(p["other_gpu_count"] == 0 for p in s["policies"].values())
    assert s["view_text"].startswith("managed: every job on its recorded GPU count")
    assert "<b>View</b>: managed: every job on its recorded GPU count" in (out / "report.html").read_text()
    t = run("-p", "lyapunov,backfill")
    assert t.exit_code == 0, t.output
    assert t.stdout.splitlines()[0].startswith("view: managed: ")


@pytest.mark.parametrize("flag,rigid", [("--elastic", False), ("--rigid", True)])
def test_other_views_on_request(flag, rigid):
    r = run(flag, "-p", "lyapunov,backfill", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    s = json.loads(r.stdout)
    assert s["view"] == flag[2:] and s["rigid"] is rigid and "managed" not in s
    assert s["view_text"].startswith(flag[2:] + ":")
    assert s["estimate_error"] == 0.2
    moved = s["policies"]["lyapunov"]["other_gpu_count"]
    assert (moved == 0) if rigid else (moved > 0)  # only the elastic view gives jobs other GPU counts
    t = run(flag, "-p", "lyapunov")
    assert t.stdout.splitlines()[0].startswith(f"view: {flag[2:]}: ")


def test_estimate_error_needs_a_synthetic_view():
    r = run("--estimate-error", "0.3", "-p", "fifo")
    assert r.exit_code == 2 and "--estimate-error" in r.output and "--rigid or --elastic" in r.output
    assert run("--estimate-error", "0.3", "--rigid", "-p", "fifo", "--json").exit_code == 0


def test_two_views_are_refused():
    r = run("--rigid", "--elastic", "-p", "fifo")
    assert r.exit_code == 2 and "give one of --managed" in r.output
    assert len(r.output.strip().splitlines()) == 1
