"""Reliability figures of issue 5: the fault, load and bad-input suites, one line per figure.

    python benchmarks/reliability.py [--json] [--quick] [--only faults,load,badinput] [--details FILE]
                                     [--backend cli[,pyslurm]]

Runs, against the real local Slurm cluster (`slurm/cluster up`; needs root):

- faults (tests/reliability/faults.py): SIGKILLs of the service at points of a slot, a slurmctld
  outage, failing/hanging Slurm commands, a job purged after MinJobAge while the service is down;
- load (tests/reliability/load.py): a burst of `lyasub` submissions from 8 processes while the
  service runs, and one slot over many held jobs;
- bad input (tests/reliability/badinput.py): the table of malformed inputs;
- moves (tests/reliability/moves.py, with the faults, CLI backend): SIGKILLs of an `elastic`
  service at the four points of a move of a running checkpointable job (12; ``--quick`` 4).

Full sizes: 20 kills, a 120 s outage, 1,000 submissions, 10,000 held jobs. ``--quick``: 3
kills, a 20 s outage, 100 submissions, 1,000 held jobs (then ``slot_s_at_10k`` is null and the
measured size is printed instead). Each cluster phase holds /run/lock/lyasched-rel.lock (shared
with other users of the test cluster) only while it runs. A suite that is missing or fails to
run gives null figures, never a guess. ``--json`` prints one object with the keys kills_tried,
kills_survived, outages_survived, jobs_lost, jobs_duplicated, bad_inputs_tried,
bad_inputs_refused, burst_accepted, burst_lost, slot_s_at_10k (plus ``details``).
Exit 0 when every suite ran and no job was lost or duplicated, else 1.

``--backend cli,pyslurm`` runs the fault suites once per Slurm backend of the service (and of
lyasub in the flaky suite; docs/slurm-backends.md): the figures then add up over the backends and
``--json`` has them per backend under ``by_backend``. Load and bad-input suites run once (CLI).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from .load import cluster_lock, run_burst, run_held, say

FULL = {"kills": 20, "outage": 120.0, "burst": 1000, "procs": 8, "held": 10_000, "move_kills": 12}
QUICK = {"kills": 3, "outage": 20.0, "burst": 100, "procs": 8, "held": 1000, "move_kills": 4}
KEYS = ("kills_tried", "kills_survived", "outages_survived", "jobs_lost", "jobs_duplicated", "bad_inputs_tried",
        "bad_inputs_refused", "burst_accepted", "burst_lost", "slot_s_at_10k")


def attempt(name: str, fn: Callable[[], dict[str, Any]], details: dict[str, Any], locked: bool = True) -> dict | None:
    """Run one suite (under the cluster lock); its dict, or None (and the error in details)."""
    say(f"{name}: running")
    t0 = time.monotonic()
    try:
        if locked:
            with cluster_lock(name):
                res = fn()
        else:
            res = fn()
    except Exception as e:  # noqa: BLE001 - one suite failing must not hide the others' figures
        details[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
        say(f"{name}: FAILED to run: {type(e).__name__}: {e}")
        return None
    details[name] = res
    say(f"{name}: done in {time.monotonic() - t0:.0f}s")
    return res


def fault_suites(sizes: dict[str, Any], details: dict[str, Any], backend: str = "cli") -> dict[str, dict | None]:
    try:
        from . import faults as rel_faults
    except Exception as e:  # noqa: BLE001
        details["faults"] = {"error": f"tests/reliability/faults.py not importable: {type(e).__name__}: {e}"}
        return {}
    out: dict[str, dict | None] = {}
    calls = {"kills": ("run_kills", {"n": sizes["kills"]}), "outage": ("run_outage", {"seconds": sizes["outage"]}),
             "flaky": ("run_flaky", {}), "minjobage": ("run_minjobage", {})}
    calls = {k: (f, {**kw, "backend": backend}) for k, (f, kw) in calls.items()}
    for name, (fn_name, kw) in calls.items():
        fn = getattr(rel_faults, fn_name, None)
        if fn is None:
            details[name] = {"error": f"reliability.faults.{fn_name} missing"}
            out[name] = None
            continue
        out[name] = attempt(f"{name}[{backend}]" if backend != "cli" else name, lambda fn=fn, kw=kw: fn(**kw), details)
    if backend == "cli":  # kills during moves (issue 13, tests/reliability/moves.py): the CLI backend's calls
        try:
            from .moves import run_move_kills
        except Exception as e:  # noqa: BLE001
            details["moves"] = {"error": f"tests/reliability/moves.py not importable: {type(e).__name__}: {e}"}
            out["moves"] = None
        else:
            out["moves"] = attempt("moves", lambda: run_move_kills(sizes.get("move_kills", 12)), details)
    return out


def merge_faults(by_backend: dict[str, dict[str, dict | None]]) -> dict[str, dict | None]:
    """One backend's suites as they are; several: each suite's counts added up over the backends that ran
    it (None if it failed to run on one). A suite run for one backend only (moves: CLI) is taken as it is;
    before, it counted as missing on the others, so `--backend cli,pyslurm` printed the moves figures as
    null and left the moves' lost jobs and lost steps out of the totals and the exit status."""
    if len(by_backend) <= 1:
        return next(iter(by_backend.values()), {})
    out: dict[str, dict | None] = {}
    for name in dict.fromkeys(k for fs in by_backend.values() for k in fs):  # first-seen order, not a set's
        parts = [fs[name] for fs in by_backend.values() if name in fs]
        if any(p is None for p in parts):
            out[name] = None
            continue
        if len(parts) == 1:
            out[name] = parts[0]
            continue
        keys = ("kills_tried", "kills_survived", "outages_survived", "jobs_lost", "jobs_duplicated")
        out[name] = {k: sum(p.get(k) or 0 for p in parts) for k in keys if any(k in p for p in parts)}
    return out


def bad_input_suite(details: dict[str, Any]) -> dict | None:
    try:
        from .badinput import run_bad_inputs
    except Exception as e:  # noqa: BLE001
        details["badinput"] = {"error": f"tests/reliability/badinput.py not importable: {type(e).__name__}: {e}"}
        return None
    return attempt("badinput", run_bad_inputs, details)


def _sum(parts: list[int | None]) -> int | None:
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def figures(faults: dict[str, dict | None], burst: dict | None, held: dict | None, bad: dict | None,
            sizes: dict[str, Any]) -> dict[str, Any]:
    kills, outage = faults.get("kills"), faults.get("outage")
    lost: list[int | None] = [(s or {}).get("jobs_lost") for s in faults.values() if s]
    dup: list[int | None] = [(s or {}).get("jobs_duplicated") for s in faults.values() if s]
    if burst:
        lost.append(burst["lost"])
        dup.append(burst["duplicated"])
    if held:
        lost.append(max(0, held["submitted"] - held["queued_jobs"]))
        dup.append(held["duplicated"])
    return {
        "kills_tried": kills.get("kills_tried") if kills else None,
        "kills_survived": kills.get("kills_survived") if kills else None,
        "outages_survived": outage.get("outages_survived") if outage else None,
        "jobs_lost": _sum(lost),
        "jobs_duplicated": _sum(dup),
        "bad_inputs_tried": bad.get("tried") if bad else None,
        "bad_inputs_refused": bad.get("refused") if bad else None,
        "burst_accepted": burst["accepted"] if burst else None,
        "burst_lost": burst["lost"] if burst else None,
        "slot_s_at_10k": held["slot_s_max"] if held and held["n"] == 10_000 else None,
        "kills_during_moves": (faults.get("moves") or {}).get("kills_during_moves"),
        "move_kills_survived": (faults.get("moves") or {}).get("kills_survived"),
        "move_kills_tried": (faults.get("moves") or {}).get("kills_tried"),
        "steps_lost_beyond_checkpoint": (faults.get("moves") or {}).get("steps_lost_beyond_checkpoint"),
    }


def fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "null (not measured)"
    return f"{v:.3f}{unit}" if isinstance(v, float) else f"{v}{unit}"


def print_lines(f: dict[str, Any], faults: dict, burst: dict | None, held: dict | None, bad: dict | None,
                sizes: dict[str, Any]) -> None:
    print(f"kills survived / tried: {fmt(f['kills_survived'])} / {fmt(f['kills_tried'])}")
    print(f"kills during moves (elastic): {fmt(f['kills_during_moves'])} at move points, survived / tried "
          f"{fmt(f['move_kills_survived'])} / {fmt(f['move_kills_tried'])}; steps lost beyond the last checkpoint: "
          f"{fmt(f['steps_lost_beyond_checkpoint'])} (must be 0)")
    print(f"outages survived: {fmt(f['outages_survived'])}"
          + (f" (slurmctld down {sizes['outage']:g} s)" if f["outages_survived"] is not None else ""))
    counted = [k for k, v in faults.items() if v] + (["burst"] if burst else []) + (["held"] if held else [])
    print(f"jobs lost: {fmt(f['jobs_lost'])} (must be 0; suites counted: {', '.join(counted) or 'none'})")
    print(f"jobs duplicated: {fmt(f['jobs_duplicated'])} (must be 0)")
    print(f"bad inputs tried / cleanly refused: {fmt(f['bad_inputs_tried'])} / {fmt(f['bad_inputs_refused'])}")
    if burst:
        s = burst["slots"]
        print(f"burst submissions accepted / lost: {burst['accepted']} / {burst['lost']} "
              f"({burst['n']} lyasub from {burst['procs']} processes in {burst['burst_s']:.0f} s, refused cleanly "
              f"{burst['refused_clean']}, unclean {burst['unclean']}, \"database is locked\" "
              f"{burst['database_locked_messages']}; service slots ({burst['slot_seconds']:g} s) while it landed: "
              f"median {fmt(s['median_s'], ' s')}, p95 {fmt(s['p95_s'], ' s')}, max {fmt(s['max_s'], ' s')}, n={s['n']})")
    else:
        print("burst submissions accepted / lost: null (not measured) / null (not measured)")
    if held and "slot_busy_first" in held:
        def one(s: dict | None) -> str:
            return "-" if not s else (f"error {s['error']}" if s.get("error") else f"{s['duration_s']:.2f} s")
        label = "10,000" if held["n"] == 10_000 else f"{held['n']:,} (quick; 10,000: null)"
        print(f"slot time at {label} held jobs: {fmt(held['slot_s_max'], ' s')} worst of: first slot "
              f"{one(held['slot_busy_first'])}, next {one(held['slot_busy_later'])} (GPUs busy), "
              f"GPUs free {one(held['slot_free'])}; slot length {held['slot_len_s']:g} s; "
              f"{held['submitted']} sbatch in {held['submit_s']:.0f} s")
    else:
        print("slot time at 10,000 held jobs: null (not measured)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (see the module doc)")
    ap.add_argument("--only", default="faults,load,badinput", help="comma-separated suites to run")
    ap.add_argument("--details", type=Path, help="write every suite's full result as JSON here")
    ap.add_argument("--backend", default="cli", help="the service's Slurm backend(s) for the fault suites: cli, pyslurm "
                    "or cli,pyslurm")
    a = ap.parse_args(argv)
    backends = [b for b in a.backend.split(",") if b]
    if not backends or any(b not in ("cli", "pyslurm") for b in backends):
        print(f"reliability: error: --backend must be cli, pyslurm or cli,pyslurm, got {a.backend!r}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("reliability: error: needs root (runs the service and submits as the test user)", file=sys.stderr)
        return 1
    if not shutil.which("squeue") or subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True).returncode:
        print("reliability: error: the Slurm test cluster does not answer (run slurm/cluster up)", file=sys.stderr)
        return 1
    sizes = QUICK if a.quick else FULL
    only = set(a.only.split(","))
    details: dict[str, Any] = {"sizes": sizes}
    t0 = time.monotonic()
    by_backend: dict[str, dict[str, dict | None]] = {}
    if "faults" in only:
        for b in backends:
            by_backend[b] = fault_suites(sizes, details, b)
    faults = merge_faults(by_backend)
    burst = held = None
    if "load" in only:
        burst = attempt("burst", lambda: run_burst(sizes["burst"], sizes["procs"]), details)
        held = attempt("held", lambda: run_held(sizes["held"], sizes["procs"]), details)
    bad = bad_input_suite(details) if "badinput" in only else None
    details["wall_s"] = round(time.monotonic() - t0, 1)
    f = figures(faults, burst, held, bad, sizes)
    per = {b: figures(fs, None, None, None, sizes) for b, fs in by_backend.items()}
    if a.details:
        a.details.write_text(json.dumps({**f, "by_backend": per, "details": details}, indent=2, default=str))
    if a.json:
        print(json.dumps({**f, "by_backend": per, "details": details}, default=str))
    else:
        if len(per) > 1:
            for b, fb in per.items():
                print(f"[{b}] kills survived / tried: {fmt(fb['kills_survived'])} / {fmt(fb['kills_tried'])}; "
                      f"outages survived: {fmt(fb['outages_survived'])}; jobs lost {fmt(fb['jobs_lost'])}, "
                      f"duplicated {fmt(fb['jobs_duplicated'])}")
        print_lines(f, faults, burst, held, bad, sizes)
        print(f"({details['wall_s']:.0f} s in all)")
    ran_all = all(fs.get(k) for fs in by_backend.values() for k in ("kills", "outage", "flaky", "minjobage")) \
        if "faults" in only else True
    ran_all = ran_all and (burst is not None and held is not None if "load" in only else True)
    ran_all = ran_all and (bad is not None if "badinput" in only else True)
    good = (f["jobs_lost"] in (0, None) and f["jobs_duplicated"] in (0, None) and f["burst_lost"] in (0, None)
            and f["steps_lost_beyond_checkpoint"] in (0, None))
    return 0 if ran_all and good else 1

