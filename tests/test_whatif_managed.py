"""`lyasched whatif --managed`: estimates from earlier jobs only, true runs as recorded, backfill
with the estimates and with the time limits, the CLI's figures."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from lyasched.cli import main
from lyasched.costmodel.cost import ClusterSpec
from lyasched.policy import make_policy
from lyasched.whatif.history import build_history
from lyasched.whatif.managed import (
    BACKFILL_LIMITS,
    build_managed_simulations,
    estimate_figures,
    history_estimates,
    managed_outcome_names,
)
from lyasched.slurm.sacct import FIELDS, parse_sacct

DATA = Path(__file__).parent / "data"
T0 = datetime(2026, 10, 1).timestamp()
HEAD = "|".join((*FIELDS, "JobName"))


def _ts(t: float) -> str:
    return datetime.fromtimestamp(T0 + t).isoformat(timespec="seconds")


def line(jid: int, user: str, name: str, gpus: int, submit: float, start: float, run: float, limit_h: int,
         node: str = "n1") -> str:
    tres = f"cpu=1,gres/gpu={gpus}"
    return "|".join([str(jid), user, "acc", "gpu", _ts(submit), _ts(submit), _ts(start), _ts(start + run), str(int(run)),
                     "COMPLETED", "1", node, tres, tres, f"{limit_h:02d}:00:00", name])


def habits_text(n: int = 40) -> str:
    """Two users with steady habits (name -> run time), a queue that builds up on a 1 x 4 node."""
    rows, t, free_at = [], 0.0, [0.0] * 4
    for k in range(n):
        user, name, run, g = (("ann", "sweep", 600.0, 1) if k % 2 else ("bo", "train", 3000.0 + 10 * k, 2))
        t += 400.0
        gpus = sorted(range(4), key=lambda i: free_at[i])[:g]
        start = max(t, *(free_at[i] for i in gpus))
        for i in gpus:
            free_at[i] = start + run
        rows.append(line(1000 + k, user, name, g, t, start, run, 8))
    return HEAD + "\n" + "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def hist():
    parsed = parse_sacct(habits_text())
    return parsed, build_history(parsed.records)


def names_of(parsed):
    return {r.line: r.name for r in parsed.records}


def test_estimates_use_only_jobs_ended_before_the_arrival(hist):
    parsed, h = hist
    ests = history_estimates(h.jobs, names_of(parsed))
    assert len(ests) == len(h.jobs)
    for k, (j, e) in enumerate(zip(h.jobs, ests)):
        earlier = [o for o in h.jobs if o.end < j.arrival and o.user == j.user]
        if not earlier:
            assert e.source in ("account", "limit")
        else:
            assert e.source.startswith("user")
            assert e.mean_s <= j.time_limit
        if e.source == "user+name+gpus":  # the last two similar ones that had ended, never this job's own run
            similar = sorted((o for o in earlier if o.gpus == j.gpus), key=lambda o: o.end)[-2:]
            assert e.mean_s == pytest.approx(np.mean([o.work_s for o in similar]))
    # ann's runs are all 600 s: once two had ended, her estimate is exact
    late = [e for j, e in zip(h.jobs, ests) if j.user == "ann" and e.n == 2]
    assert late and all(e.mean_s == 600.0 for e in late)


def test_estimate_figures(hist):
    parsed, h = hist
    ests = history_estimates(h.jobs, names_of(parsed))
    f = estimate_figures(h.jobs, ests)
    actual = np.array([j.work_s for j in h.jobs])
    rel = np.abs(np.array([e.mean_s for e in ests]) - actual) / actual
    assert f["median_rel_error"] == pytest.approx(float(np.median(rel)))
    assert sum(f["sources"].values()) == len(h.jobs) == f["jobs"]
    assert f["sources"]["user+name+gpus"] > len(h.jobs) // 2
    # the time limits (8 h) are far worse than the estimates on these habits
    assert f["time_limits"]["median_rel_error"] > 5 * f["median_rel_error"]


def test_true_runs_are_recorded_and_policies_see_the_estimates(hist):
    parsed, h = hist
    ests = history_estimates(h.jobs, names_of(parsed))
    cluster = ClusterSpec(nodes=1, gpus_per_node=4)
    sim, sim_est, index = build_managed_simulations(h.jobs, cluster, ests, slot=30.0, seed=0)
    for i, j in enumerate(sim.jobs):
        k = index[j.job_id]
        seen = sim.predicted(i).run_time(j.requested_gpus, False)
        assert seen == pytest.approx(ests[k].mean_s, rel=0.02)  # up to the iteration count's rounding
        assert j.min_gpus == j.max_gpus == h.jobs[k].gpus  # rigid
        assert j.time_limit == h.jobs[k].time_limit
        assert sim_est.jobs[i].time_limit == pytest.approx(seen)  # backfill plans with the estimate
    res = sim.run(make_policy("fifo"), name="fifo")
    for r in res.records:
        assert r.run_s == pytest.approx(h.jobs[index[r.job.job_id]].work_s, rel=1e-6)


class _Spy:
    """Backfill that notes, per decision, each running job's (now, start, expected end)."""

    def __init__(self) -> None:
        self.inner = make_policy("backfill")
        self.name = "backfill"
        self.seen: list[tuple[float, float, float]] = []

    def __getattr__(self, k):
        return getattr(self.inner, k)

    def decide(self, state):
        self.seen += [(state.now, r.start_time, r.expected_end) for r in state.running]
        return self.inner.decide(state)


def test_a_job_past_its_estimate_is_planned_from_the_history_never_as_ended(hist):
    parsed, h = hist
    ests = history_estimates(h.jobs, names_of(parsed))
    cluster = ClusterSpec(nodes=1, gpus_per_node=4)
    _, sim_est, index = build_managed_simulations(h.jobs, cluster, ests, slot=30.0, seed=0)
    assert sim_est.running_estimate is not None
    rule = sim_est.running_estimate
    sim_est.running_estimate = None  # the prediction made at the start, as before the rule
    before = _Spy()
    sim_est.run(before, name="backfill")
    assert any(end <= now for now, _, end in before.seen)  # bo's runs grow: his estimates fall short
    sim_est.running_estimate = rule
    after = _Spy()
    sim_est.run(after, name="backfill")
    assert after.seen and all(end > now for now, _, end in after.seen)
    assert all(end - start <= 8 * 3600 + 60 for now, start, end in after.seen)  # the 8 h limit (+ min_left_s)


def test_outcome_names():
    assert managed_outcome_names(["lyapunov", "backfill"]) == ["lyapunov", "backfill", BACKFILL_LIMITS]
    assert managed_outcome_names(["fifo"]) == ["fifo"]


def test_cli_managed_json(tmp_path):
    f = tmp_path / "h.sacct"
    f.write_text(habits_text())
    r = CliRunner().invoke(main, ["whatif", "--sacct", str(f), "--managed", "--json"])
    assert r.exit_code == 0, r.output + r.stderr
    s = json.loads(r.stdout)
    assert s["rigid"] is True and list(s["policies"]) == ["lyapunov", "backfill", "backfill-limits"]
    assert s["labels"]["backfill-limits"] == "backfill (Slurm, time limits)"
    m = s["managed"]
    assert m["estimates"]["jobs"] == 40 and "user+name+gpus" in m["estimates"]["sources"]
    assert m["avg_jct_vs_backfill"]["backfill"] == pytest.approx(1.0)
    assert m["avg_jct_vs_backfill"]["lyapunov"] == pytest.approx(
        s["policies"]["lyapunov"]["avg_jct_s"] / s["policies"]["backfill"]["avg_jct_s"])
    assert all(p["other_gpu_count"] == 0 for p in s["policies"].values())
    assert "estimates of 40 jobs" in r.stderr
    t = CliRunner().invoke(main, ["whatif", "--sacct", str(f), "--managed", "-p", "fifo,backfill"])
    assert t.exit_code == 0, t.output
    assert "backfill (Slurm, estimates)" in t.stdout and "median error" in t.stdout and "fifo" in t.stdout


def test_cli_managed_without_names_or_limits():
    r = CliRunner().invoke(main, ["whatif", "--sacct", str(DATA / "sacct_awkward.txt"), "--managed", "--json"])
    assert r.exit_code == 0, r.output + r.stderr
    src = json.loads(r.stdout)["managed"]["estimates"]["sources"]
    assert not any("name" in k for k in src)  # no JobName column: the name keys are never used


def test_cli_managed_refuses_estimate_error(tmp_path):
    f = tmp_path / "h.sacct"
    f.write_text(habits_text(6))
    r = CliRunner().invoke(main, ["whatif", "--sacct", str(f), "--managed", "--estimate-error", "0.3"])
    assert r.exit_code == 2 and "--estimate-error" in r.output and "--managed" in r.output


def test_cli_managed_html_report(tmp_path):
    f = tmp_path / "h.sacct"
    f.write_text(habits_text(12))
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["whatif", "--sacct", str(f), "--managed", "--out", str(out)])
    assert r.exit_code == 0, r.output + r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["managed"]["estimates"]["jobs"] == 12 and "backfill (Slurm, time limits)" in (out / "report.html").read_text()
    assert "Managed view: every policy saw" in (out / "report.html").read_text()


def _bench():
    import importlib.util

    path = Path(__file__).parent.parent / "benchmarks" / "managed_whatif.py"
    spec = importlib.util.spec_from_file_location("managed_whatif", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_history_has_habits_and_loose_limits():
    bench = _bench()
    text = bench.synthetic_history(5, jobs=600)
    assert text == bench.synthetic_history(5, jobs=600)  # fixed by its seed
    parsed = parse_sacct(text, "synth")
    h = build_history(parsed.records)
    assert len(h.jobs) == 600 and all(j.time_limit and j.work_s <= j.time_limit for j in h.jobs)
    assert {j.state for j in h.jobs} <= {"COMPLETED", "FAILED", "TIMEOUT"}
    done = [j for j in h.jobs if j.state == "COMPLETED"]
    assert np.median([j.time_limit / j.work_s for j in done]) > 2  # users ask for much more than they use
    f = estimate_figures(h.jobs, history_estimates(h.jobs, names_of(parsed)))
    assert f["sources"].get("user+name+gpus", 0) > len(h.jobs) // 2  # users repeat their jobs
    assert f["median_rel_error"] < f["time_limits"]["median_rel_error"]
