"""Wall time of replays per policy, optionally side by side with another tree in one run.

    python benchmarks/replay_speed.py [--policies fifo,lyapunov] [--max-jobs N] [--load 0.8]
                                      [--limit 120] [--rounds 1] [--against DIR] [--json]

Each policy runs on the same jobs and cluster (a trace is sized for --load, 8 GPUs/node, as
`lyasched replay --workload ../shared/data/traces/philly.csv` does); a policy still running
after --limit seconds is stopped and reported as '> limit'. ``--against DIR``: the same replays
with the lyasched package of another checkout (e.g. ``git worktree add /tmp/ccc ccc6d68``), run in
a child process, alternating with this tree's round by round so both see the same machine load;
the figures are printed side by side with this tree's / the other's wall-time ratio
(``ratio`` in the JSON, median over rounds), and the sum over the policies (``total``: wall and
CPU seconds per round, and its ratio). CPU seconds (``cpu_s``) are the replay's own, whatever
else the machine runs; the wall time is what the targets name. Examples:

    # the README's researcher command, with elastic (the first 3,000 Philly jobs at load 1.0)
    python benchmarks/replay_speed.py --max-jobs 3000 --load 1.0 --policies lyapunov,elastic,tiresias,backfill --limit 600
    # the full trace under lyapunov, against ccc6d68
    python benchmarks/replay_speed.py --policies lyapunov --limit 1800 --against /tmp/ccc
    # what the tenant input costs: each policy with the trace's tenants and without, in one process
    python benchmarks/replay_speed.py --policies lyapunov --limit 1800 --tenants --rounds 2 --json

``--tenants``: in one process, each replay with the tenant input (the trace's users as tenants,
as `replay` does) and without (``Simulation(tenant_input=False)``), alternating round by round;
printed side by side with the with / without ratio of wall and of CPU seconds (median over
rounds; ``tenants_ratio`` in the JSON) and each replay's decision digest
(decision_digest.replay_digest with the slots' Q and Z: equal before and after a change that
should not change a decision).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PHILLY = os.path.join(HERE, "..", "..", "shared", "data", "traces", "philly.csv")


def measure(trace: str, policies: list[str], max_jobs: int | None, load: float, limit: float) -> dict:
    """One round in this process: setup, then every policy's replay (wall, decide, calls, JCT)."""
    from lyasched.policy import make_policy
    from lyasched.sim import Simulation, WallTimeExceeded
    from lyasched.sim.metrics import summarize
    from lyasched.sim.workloads import load_workload

    import lyasched

    t0 = time.perf_counter()
    w = load_workload(trace, load=load, max_jobs=max_jobs)
    sim = Simulation(w.jobs, w.cluster, seed=0)
    out: dict = {"jobs": len(w.jobs), "cluster": f"{w.cluster.nodes}x{w.cluster.gpus_per_node}",
                 "setup_s": round(time.perf_counter() - t0, 2), "package": os.path.dirname(lyasched.__file__),
                 "policies": {}}
    for name in policies:
        c0 = time.process_time()  # CPU time: what the replay costs whatever else the machine runs
        try:
            r = sim.run(make_policy(name, seed=0), name=name, wall_limit_s=limit)
            out["policies"][name] = {"wall_s": round(r.wall_s, 1), "decide_s": round(r.decide_s, 1), "finished": True,
                                     "decide_calls": r.decide_calls, "avg_jct_s": round(summarize(r)["avg_jct_s"])}
        except WallTimeExceeded as e:
            out["policies"][name] = {"wall_s": round(e.wall, 1), "decide_s": round(e.decide_s, 1), "finished": False,
                                     "jobs_done": e.done}
        out["policies"][name]["cpu_s"] = round(time.process_time() - c0, 1)
    return out


def measure_tenants(trace: str, policies: list[str], max_jobs: int | None, load: float, limit: float,
                    rounds: int) -> dict:
    """Each policy's replay with the tenant input and without, alternating, in this process."""
    from decision_digest import replay_digest

    from lyasched.policy import make_policy
    from lyasched.sim import Simulation, WallTimeExceeded
    from lyasched.sim.workloads import load_workload

    w = load_workload(trace, load=load, max_jobs=max_jobs)
    out: dict = {"jobs": len(w.jobs), "cluster": f"{w.cluster.nodes}x{w.cluster.gpus_per_node}",
                 "tenants": len({j.user for j in w.jobs}), "policies": {}}
    for name in policies:
        row: dict = {"with": [], "without": []}
        for _ in range(rounds):
            for key, on in (("with", True), ("without", False)):
                sim = Simulation(w.jobs, w.cluster, seed=0, tenant_input=on)
                c0, t0 = time.process_time(), time.perf_counter()
                try:
                    r = sim.run(make_policy(name, seed=0), name=name, wall_limit_s=limit)
                    got = {"wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(time.process_time() - c0, 2),
                           "decide_s": round(r.decide_s, 2), "decide_calls": r.decide_calls, "finished": True,
                           "digest": replay_digest(r, slots=True)[:12]}
                except WallTimeExceeded as e:
                    got = {"wall_s": round(e.wall, 1), "cpu_s": round(time.process_time() - c0, 2), "finished": False,
                           "jobs_done": e.done}
                row[key].append(got)
                print(f"{name} {key} tenants: {got}", file=sys.stderr, flush=True)
        for unit in ("wall_s", "cpu_s"):
            rs = [x[unit] / y[unit] for x, y in zip(row["with"], row["without"]) if y[unit] > 0]
            row.setdefault("tenants_ratio", {})[unit] = round(statistics.median(rs), 3) if rs else None
        out["policies"][name] = row
    return out


def line(name: str, row: dict, limit: float) -> str:
    cpu = f", CPU {row['cpu_s']:.1f} s" if "cpu_s" in row else ""
    if not row["finished"]:
        return f"> {limit:.0f} s (stopped with {row['jobs_done']} jobs finished{cpu})"
    return (f"{row['wall_s']:7.1f} s (decide {row['decide_s']:.1f} s in {row['decide_calls']} calls; "
            f"avg JCT {row['avg_jct_s']} s{cpu})")


def total(rnd: dict) -> dict:
    """One round's sum over its policies (a stopped one counts its time so far: a lower bound)."""
    rows = rnd["policies"].values()
    return {"wall_s": round(sum(r["wall_s"] for r in rows), 1), "cpu_s": round(sum(r.get("cpu_s", 0.0) for r in rows), 1),
            "finished": all(r["finished"] for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=PHILLY)
    ap.add_argument("--policies", default=None, help="comma-separated (default: every registered policy)")
    ap.add_argument("--max-jobs", type=int, default=None)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--limit", type=float, default=120.0, help="stop a policy after this many seconds")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--against", default=None, help="a checkout whose lyasched package runs the same replays")
    ap.add_argument("--tenants", action="store_true", help="each replay with the tenant input and without, side by side")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.policies is None:
        from lyasched.policy import POLICIES

        a.policies = ",".join(POLICIES)
    policies = [p for p in a.policies.split(",") if p]
    if a.child:
        print(json.dumps(measure(a.trace, policies, a.max_jobs, a.load, a.limit)))
        return
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]), file=sys.stderr)
    if a.tenants:
        if a.against:
            sys.exit("Error: --tenants and --against: one at a time")
        sys.path.insert(0, HERE)
        load0 = os.getloadavg()
        got = measure_tenants(a.trace, policies, a.max_jobs, a.load, a.limit, a.rounds)
        got.update(load=a.load, machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
                   load_average_start=load0, load_average=os.getloadavg())
        if a.json:
            print(json.dumps(got))
            return
        print(f"{got['jobs']} jobs on {got['cluster']} GPUs, load {a.load}, {got['tenants']} tenants")
        for p, row in got["policies"].items():
            for key in ("with", "without"):
                print(f"{p:11s} {key:7s} tenants: " + "; ".join(
                    f"{r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU" + (f", digest {r['digest']}" if r["finished"] else ", stopped")
                    for r in row[key]))
            print(f"{'':11s} with / without: wall {row['tenants_ratio']['wall_s']}, CPU {row['tenants_ratio']['cpu_s']}")
        print("load average (1, 5, 15 min) at the start: " + " ".join(f"{x:.2f}" for x in load0)
              + "; at the end: " + " ".join(f"{x:.2f}" for x in got["load_average"]))
        return
    trees = {"this": os.path.dirname(HERE)}
    if a.against:
        if not os.path.isdir(os.path.join(a.against, "lyasched")):
            sys.exit(f"Error: --against {a.against}: no lyasched package there")
        trees["against"] = os.path.abspath(a.against)
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    load0 = os.getloadavg()
    for rnd in range(a.rounds):
        for key, root in trees.items():
            argv = [sys.executable, os.path.abspath(__file__), "--child", "--trace", a.trace, "--policies", a.policies,
                    "--load", str(a.load), "--limit", str(a.limit)] + (["--max-jobs", str(a.max_jobs)] if a.max_jobs else [])
            env = {**os.environ, "PYTHONPATH": root}
            got = json.loads(subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout)
            runs[key].append(got)
            print(f"round {rnd + 1}, {key} ({got['package']}): " + "; ".join(
                f"{p} {line(p, got['policies'][p], a.limit).strip()}" for p in policies), file=sys.stderr, flush=True)
    first = runs["this"][0]
    out: dict = {"jobs": first["jobs"], "cluster": first["cluster"], "load": a.load,
                 "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
                 "load_average_start": load0, "load_average": os.getloadavg(), "rounds": runs, "policies": {}}
    for p in policies:
        row: dict = {k: [r["policies"][p] for r in v] for k, v in runs.items()}
        if a.against:
            ratios = [x["wall_s"] / y["wall_s"] for x, y in zip(row["this"], row["against"]) if y["wall_s"] > 0]
            row["ratio"] = round(statistics.median(ratios), 3) if ratios else None
        out["policies"][p] = row
    out["total"] = {k: [total(r) for r in v] for k, v in runs.items()}  # per round: every policy's replay, summed
    if a.against:
        tr = [x["wall_s"] / y["wall_s"] for x, y in zip(out["total"]["this"], out["total"]["against"]) if y["wall_s"] > 0]
        out["total"]["ratio"] = round(statistics.median(tr), 3) if tr else None
    if a.json:
        print(json.dumps(out))
        return
    print(f"{first['jobs']} jobs on {first['cluster']} GPUs, load {a.load}")
    for p, row in out["policies"].items():
        text = f"{p:11s} this: {line(p, row['this'][-1], a.limit)}"
        if a.against:
            text += f"\n{'':11s} against: {line(p, row['against'][-1], a.limit)}\n{'':11s} ratio this/against: {row['ratio']}"
        print(text)
    for key in trees:
        t = out["total"][key][-1]
        print(f"{'total':11s} {key}: {t['wall_s']:.1f} s wall, {t['cpu_s']:.1f} s CPU" + ("" if t["finished"] else " (a policy was stopped: at least)"))
    if a.against:
        print(f"{'':11s} ratio this/against: {out['total']['ratio']}")
    print("load average (1, 5, 15 min) at the start: " + " ".join(f"{x:.2f}" for x in load0)
          + "; at the end: " + " ".join(f"{x:.2f}" for x in out["load_average"]))


if __name__ == "__main__":
    main()
