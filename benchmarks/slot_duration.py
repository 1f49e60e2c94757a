#!/usr/bin/env python3
"""How long one `lyasched serve` slot takes (prints figures; no thresholds asserted).

With ``--backend cli,pyslurm`` (docs/slurm-backends.md): the Slurm backends side by side on the
real test cluster (root, `slurm/cluster up`, run inside the shared-cluster flock), with 1,000 and
then 10,000 held lyasched jobs of the test user (parallel sbatch, as in tests/reliability/load.py)
while a plain job holds every GPU, so the slots read, record and decide but start nothing. Per
backend and job count, after a first slot (fresh records), ``--slots`` slots alternating between
the backends, twice:

- changed queue (the figures ``median_slot_s`` and ``ratio_at_N``): before every timed slot and
  every timed read the queue changes as in real operation (a new held lyasched job submitted,
  the one submitted before it cancelled), so no backend can skip reading the whole list;
- unchanged queue (``unchanged``, ``unchanged_ratio_at_N``): nothing changes between slots (the
  pyslurm worker's update-time probe then skips the read).

Each row has the median slot time and the median of the Slurm reads alone (``jobs()`` +
``nodes()``); beside them the bare ``slurm_load_jobs`` RPC (libslurm through ctypes, timed between
the changed-queue reads: ``rpc_s_at_N``), which both backends make and no backend's slot can beat
on this Slurm (22.05 has no lighter job-state RPC): ``rpc_floor_at_N`` = it / the CLI's median slot. ``--json``: one object, ``ratio_at_10000`` = pyslurm / cli median slot time (changed
queue), with the load average before and after and the jobs the controller listed (finished ones
stay listed for MinJobAge: the CLI parses their lines, the pyslurm worker skips them;
``listed_own_finished``: how many of them are held jobs this benchmark cancelled in an earlier run
within MinJobAge, 10,000 or so per run: a run right after another times "10,000 held jobs" over a
controller answer of 20,000+ jobs; the held set itself grows from one size to the next, it is
not resubmitted). Variants:
``cli-nomemo`` (every squeue line parsed anew, as before the CLI memoised them),
``pyslurm-full`` (no update-time probe), ``pyslurm-wrapped`` (the job list through PySlurm's
``Jobs.load``, as before the direct read). Progress on stderr. All the jobs are cancelled at
the end (they stay listed, CANCELLED, for MinJobAge).

    flock /tmp/lyasched-native-cluster.lock python benchmarks/slot_duration.py --backend cli,pyslurm [--json]
          [--sizes 1000,10000] [--slots 5]

Without ``--backend``:

1. live: K slots against the running Slurm cluster (if `squeue` answers), read-only: the service
   is restricted to a user with no jobs, so it reads and parses everything but changes nothing.
2. synthetic: slots with N held jobs on M nodes x 4 GPUs, Slurm answered by an
   in-process fake (same output formats as 22.05): the service's own cost (parsing, records,
   Lyapunov policy, one update+release argv per start).

    python benchmarks/slot_duration.py [--slots 20] [--jobs 1000] [--nodes 64]

``--against DIR``: the synthetic slots only, side by side with the lyasched package of another
checkout (e.g. ccc6d68's), each tree in a child process, alternating round by round (``--repeat``
rounds) so both see the same machine load; printed with this tree's / the other's median slot time
(``ratio_first``, ``ratio_later``) and the same for the slots' CPU seconds (``ratio_first_cpu``,
``ratio_later_cpu``: on a loaded machine the wall time mostly measures the wait for a core);
``--json``: one object, with the CPU time of each child and the load average before and after.
``--digest``: each tree also hashes every slot's decisions (starts, placements, Q, Z) and the job
records it left (``same_decisions``: true when the two trees decided and recorded alike; against
the tree a change started from, not against an older policy):

    python benchmarks/slot_duration.py --jobs 10000 --repeat 3 --against /work/wt-ccc [--json] [--digest]
"""

from __future__ import annotations

import argparse
import json
import shutil
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# ``--tree DIR`` (a child of ``--against``): that checkout's lyasched package instead of this one's
_TREE = Path(sys.argv[sys.argv.index("--tree") + 1]).resolve() if "--tree" in sys.argv[:-1] else Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_TREE))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the reliability harness (tests/reliability)

from lyasched.config import Config  # noqa: E402
from lyasched.service import Service  # noqa: E402
from lyasched.slurm import SlurmCLI  # noqa: E402
from lyasched.slurm import query as q  # noqa: E402
from lyasched.store.records import open_records  # noqa: E402
from lyasched.summary import CostSummary  # noqa: E402

NODE = ("NodeName={n} Arch=x86_64 CPUTot=64 Gres=gpu:4 GresUsed=gpu:{u} NodeAddr=10.0.0.1 State={s} "
        "Partitions=gpu CfgTRES=cpu=64,mem=512G AllocTRES=")


class Fake:
    """squeue / scontrol show node in 22.05's formats; a released job turns pending-unheld."""

    def __init__(self, jobs: int, nodes: int) -> None:
        self.nodes = "\n".join(NODE.format(n=f"n{i:04d}", u=i % 3, s="MIXED") for i in range(nodes)) + "\n"
        self.jobs = {}
        for i in range(jobs):
            s = CostSummary(uid=f"bench-{i:08d}", sig="resnet:bench", global_batch=256, iterations=1000 + 37 * i,
                            min_gpus=1, max_gpus=16, alpha=0.01, beta=0.001, params=11_000_000).encode()
            self.jobs[str(1000 + i)] = (f"{1000 + i}|u{i % 50}|{2000 + i % 50}|PENDING|{{reason}}|0|"
                                        f"{q.format_time(1e9 + i)}|N/A|N/A|1-00:00:00|1|gres:gpu:1||gpu|{s}|job{i}")
        self.released: set[str] = set()

    def run(self, args, *, idempotent=True, input=None):
        if args[0] == "squeue":
            return "".join(line.format(reason="Resources" if j in self.released else "JobHeldUser") + "\n"
                           for j, line in self.jobs.items())
        if args[:3] == ["scontrol", "show", "node"]:
            return self.nodes
        if args[:2] == ["scontrol", "release"]:
            self.released.add(args[2])
        return ""


def stats(xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]
    return f"median {statistics.median(xs) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, max {xs[-1] * 1000:.1f} ms (n={len(xs)})"


def say(msg: str) -> None:
    print(f"[slot_duration {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# Backend variants: (backend, environment of its pyslurm worker).
VARIANTS = {
    "cli": ("cli", {}),
    # the CLI parsing every squeue line anew each slot, as before its lines were memoised
    "cli-nomemo": ("cli", {}),
    "pyslurm": ("pyslurm", {}),
    # every job list a full read, even of an unchanged queue (no update-time probe)
    "pyslurm-full": ("pyslurm", {"LYASCHED_PYSLURM_PROBE": "0"}),
    # the job list through PySlurm's Jobs.load and Job objects, as before the direct read
    "pyslurm-wrapped": ("pyslurm", {"LYASCHED_PYSLURM_DIRECT": "0"}),
}


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _listed() -> dict[str, int]:
    """Jobs the controller lists, by state (finished ones stay listed for MinJobAge)."""
    return _listed_with_own()[0]


def _listed_with_own() -> tuple[dict[str, int], int]:
    """Jobs the controller lists by state, and how many of the finished ones carry the held jobs'
    name (left by earlier runs of this benchmark or of the load test within MinJobAge: they make
    the controller's answer longer without being part of "N held jobs")."""
    from reliability.load import HELD_NAME

    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%T|%j"], capture_output=True, text=True,
                         timeout=300).stdout
    by: dict[str, int] = {}
    own = 0
    for line in out.splitlines():
        st, _, name = line.partition("|")
        by[st] = by.get(st, 0) + 1
        own += st not in ("PENDING", "RUNNING") and name == HELD_NAME
    return by, own


def _max_job_count() -> int:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60).stdout
    for line in out.splitlines():
        k, _, v = line.partition("=")
        if k.strip() == "MaxJobCount" and v.strip().isdigit():
            return int(v.strip())
    return 10_000  # Slurm's default


class Churn:
    """One change in the queue, as in real operation: a new held lyasched job of the test user
    is submitted and the one the previous change submitted is cancelled (so the number held
    stays put). Every backend then has to read the whole list again."""

    def __init__(self, user: str, work: Path) -> None:
        self.user, self.work, self.last = user, work, None
        self.n = 0

    def __call__(self) -> None:
        import uuid

        from reliability.load import HELD_NAME, summaries
        from reliability.users import as_user

        script = self.work / "noop-churn.sbatch"
        if not script.exists():
            script.write_text("#!/bin/bash\ntrue\n")
            script.chmod(0o755)
        comment = summaries(1, "c" + uuid.uuid4().hex[:7])[0]
        r = as_user(self.user, "sbatch", "--parsable", "-J", HELD_NAME, "-N1", "-n1", "--gres=gpu:1", "-t", "10",
                    "-o", "/dev/null", "-D", str(self.work), f"--comment={comment}", str(script))
        if r.returncode != 0:
            raise SystemExit(f"slot_duration: error: could not submit a held job: {r.stderr.strip()[:300]}")
        before, self.last = self.last, r.stdout.strip().split(";")[0]
        if before:
            subprocess.run(["scancel", before], capture_output=True, timeout=60)
        self.n += 1


def _rpc_timer():
    """A function timing one bare ``slurm_load_jobs`` (libslurm through ctypes: the RPC both backends
    make, with no conversion to Python and no text), or None where libslurm does not load. It is the
    floor of any backend's job read on this Slurm: ``rpc_floor_at_N`` = its median / the CLI's slot."""
    import ctypes
    import ctypes.util

    try:  # RTLD_GLOBAL: libslurm's plugins (auth_munge, ...) resolve their symbols in it
        lib = ctypes.CDLL(ctypes.util.find_library("slurm") or "libslurm.so", mode=ctypes.RTLD_GLOBAL)
        lib.slurm_init(None)
    except (OSError, AttributeError):
        return None
    ptr = ctypes.c_void_p()

    def once() -> float:
        t = time.perf_counter()
        rc = lib.slurm_load_jobs(ctypes.c_long(0), ctypes.byref(ptr), ctypes.c_uint16(0))
        dt = time.perf_counter() - t
        if rc == 0:
            lib.slurm_free_job_info_msg(ptr)
        return dt if rc == 0 else math.nan

    return once


def compare_backends(backends: list[str], sizes: list[int], slots: int, procs: int = 8) -> dict:
    """Slot times of each backend at each number of held jobs, side by side (see the module doc)."""
    import os

    from reliability.load import HELD_NAME, TEST_USER, block_gpus, cancel_named, submit_held, workdir

    from lyasched.slurm.backend import make_backend

    made = {}
    for b in backends:
        name, env = VARIANTS[b]
        before = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # read by the pyslurm worker when it starts (make_backend's hello)
        try:
            made[b] = make_backend(name, timeout=120)
            if b == "cli-nomemo":
                made[b][0].memo = False  # type: ignore[attr-defined] - CliSlurm
        finally:
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    for b, (slurm, why) in made.items():
        say(f"backend {b}: {slurm.name} ({why})")
        if slurm.name != VARIANTS[b][0]:
            raise SystemExit(f"slot_duration: error: backend {b} not usable here: {why}")
    work = workdir("lyasched-slotbench-")
    listed0, own0 = _listed_with_own()
    out: dict = {"backends": {b: {} for b in backends}, "sizes": sizes, "slots": slots,
                 "load_before": _load(), "listed_before": listed0, "listed_before_own_finished": own0}
    say(f"load average {out['load_before']}; the controller lists {sum(out['listed_before'].values())} jobs "
        f"{out['listed_before']}, {own0} of them finished held jobs of earlier runs (kept for MinJobAge)")
    room = _max_job_count() - sum(out["listed_before"].values()) - max(sizes) - 4 * slots * len(backends) - 100
    if room < 0:  # sbatch would wait (and make everybody's wait) until MinJobAge purges finished jobs
        for slurm, _ in made.values():
            slurm.close()
        shutil.rmtree(work, ignore_errors=True)
        raise SystemExit(f"slot_duration: error: the controller lists {sum(out['listed_before'].values())} jobs; "
                         f"{max(sizes)} more would pass MaxJobCount ({_max_job_count()}): wait for MinJobAge to "
                         f"purge finished ones")
    blocker = None
    churn = Churn(TEST_USER, work)
    rpc = _rpc_timer()
    try:
        cancel_named(TEST_USER, HELD_NAME)
        blocker = block_gpus(TEST_USER, work)
        held = 0
        for n in sorted(sizes):
            sub = submit_held(n - held, procs, TEST_USER, work) if n > held else {"submitted": 0, "submit_s": 0.0}
            held += sub["submitted"]
            listed, own = _listed_with_own()
            say(f"{held} held jobs ({sub['submitted']} submitted in {sub['submit_s']:.0f} s), {sum(listed.values())} "
                f"listed ({own} finished held jobs of earlier runs); timing slots")
            svcs = {b: Service(Config(slot_seconds=30, users=(TEST_USER,)), open_records(work / f"{b}-{n}.db"),
                               slurm=made[b][0]) for b in backends}
            first = {b: svcs[b].run_slot() for b in backends}
            errors: dict[str, str] = {b: first[b].error for b in backends if first[b].error}
            res: dict[str, dict] = {b: {} for b in backends}
            # changed: the queue changes before every timed slot and read (the default figures);
            # unchanged: nothing changes between slots (a pyslurm worker may then skip the read)
            rpcs: list[float] = []
            for phase in ("changed", "unchanged"):
                times: dict[str, list[float]] = {b: [] for b in backends}
                reads: dict[str, list[float]] = {b: [] for b in backends}
                if phase == "unchanged":
                    for b in backends:  # each backend catches up with the last change, untimed
                        svcs[b].run_slot()
                for i in range(slots):
                    for b in (backends if i % 2 == 0 else backends[::-1]):  # alternate who goes first
                        if phase == "changed":
                            churn()
                        rep = svcs[b].run_slot()
                        if rep.error:
                            errors[b] = rep.error
                        times[b].append(rep.duration)
                    for b in (backends if i % 2 == 0 else backends[::-1]):
                        if phase == "changed":
                            churn()
                        slurm = made[b][0]
                        reads[b].append(_timed(lambda: (slurm.jobs(), slurm.nodes())))
                    if phase == "changed" and rpc is not None:
                        churn()
                        rpcs.append(rpc())
                for b in backends:
                    res[b][phase] = {"median_slot_s": statistics.median(times[b]) if times[b] else None,
                                     "slot_s": times[b],
                                     "median_read_s": statistics.median(reads[b]) if reads[b] else None}
            ok_rpc = [x for x in rpcs if not math.isnan(x)]
            out[f"rpc_s_at_{n}"] = statistics.median(ok_rpc) if ok_rpc else None
            if ok_rpc:
                say(f"  bare slurm_load_jobs {n:6d} held: median {out[f'rpc_s_at_{n}'] * 1000:.0f} ms")
            for b in backends:
                ch, un = res[b]["changed"], res[b]["unchanged"]
                out["backends"][b][str(n)] = {
                    "held_jobs": held, "listed_jobs": sum(listed.values()),
                    "listed_finished": sum(v for k, v in listed.items() if k not in ("PENDING", "RUNNING")),
                    "listed_own_finished": own,
                    "waiting_seen": first[b].waiting, "first_slot_s": first[b].duration,
                    "median_slot_s": ch["median_slot_s"], "slot_s": ch["slot_s"], "median_read_s": ch["median_read_s"],
                    "unchanged": un, "error": errors.get(b, ""),
                }
                say(f"  {b:15s} {n:6d} held: slot median {ch['median_slot_s'] * 1000:.0f} ms, unchanged queue "
                    f"{un['median_slot_s'] * 1000:.0f} ms (first {first[b].duration * 1000:.0f} ms, "
                    f"{first[b].waiting} waiting); Slurm reads {ch['median_read_s'] * 1000:.0f} / "
                    f"{un['median_read_s'] * 1000:.0f} ms")
    finally:
        say("cancelling the held jobs")
        cancel_named(TEST_USER, HELD_NAME)
        if blocker:
            subprocess.run(["scancel", blocker], capture_output=True, timeout=60)
        for slurm, _ in made.values():
            slurm.close()
        shutil.rmtree(work, ignore_errors=True)
    out["load_after"] = _load()
    out["queue_changes"] = churn.n
    say(f"load average {out['load_after']}")
    # ratio_at_N: pyslurm / cli; <variant>_ratio_at_N: that pyslurm variant / cli;
    # ratio_vs_cli_nomemo_at_N: pyslurm / the CLI without its line memo. unchanged_*: the second row.
    pairs = [(("" if p == "pyslurm" else p.replace("pyslurm-", "").replace("-", "_") + "_"), p, "cli")
             for p in backends if p.startswith("pyslurm") and "cli" in backends]
    if "pyslurm" in backends and "cli-nomemo" in backends:
        pairs.append(("", "pyslurm", "cli-nomemo"))
    for tag, other, base in pairs:
        suffix = "" if base == "cli" else "_vs_cli_nomemo"
        for n in sizes:
            c, p = out["backends"][base][str(n)], out["backends"][other][str(n)]
            for key, cr, pr in (("ratio", c, p), ("unchanged_ratio", c["unchanged"], p["unchanged"])):
                ok = cr["median_slot_s"] and pr["median_slot_s"] is not None
                out[f"{tag}{key}{suffix}_at_{n}"] = pr["median_slot_s"] / cr["median_slot_s"] if ok else None
                okr = cr["median_read_s"] and pr["median_read_s"] is not None
                out[f"{tag}{key.replace('ratio', 'read_ratio')}{suffix}_at_{n}"] = (
                    pr["median_read_s"] / cr["median_read_s"] if okr else None)
    for n in sizes:  # no backend's slot can be shorter than the bare RPC: the ratio's floor
        c = out["backends"].get("cli", {}).get(str(n), {})
        rpc_s = out.get(f"rpc_s_at_{n}")
        out[f"rpc_floor_at_{n}"] = rpc_s / c["median_slot_s"] if rpc_s is not None and c.get("median_slot_s") else None
    return out


def print_comparison(res: dict) -> None:
    backends = list(res["backends"])
    print(f"slot time on the test cluster, median of {res['slots']} slots per backend (every GPU busy); "
          f"load average {res['load_before']} before, {res['load_after']} after")
    for phase, what in (("changed", "the queue changes before every slot (a job submitted, one cancelled)"),
                        ("unchanged", "unchanged queue between slots")):
        print(f"{what}:")
        print(f"{'held jobs':>10} {'listed':>7} " + " ".join(f"{b + ' slot':>22} {b + ' reads':>22}" for b in backends))
        for n in res["sizes"]:
            cells, listed = [], ""
            for b in backends:
                r = res["backends"][b][str(n)]
                listed = r["listed_jobs"]
                r = r if phase == "changed" else r["unchanged"]
                cells.append(f"{r['median_slot_s'] * 1000:>19.0f} ms {r['median_read_s'] * 1000:>19.0f} ms")
            print(f"{n:>10} {listed:>7} " + " ".join(cells))
    for k, v in res.items():
        if ("ratio_at_" in k or "rpc_floor_at_" in k) and v is not None:
            print(f"{k}: {v:.2f}")


def _digest(h, rep, db) -> None:
    """Fold one slot's decisions (starts with their placements and batches, Q, Z, counts) and the
    job records it left (every column but times of day) into ``h``."""
    h.update(json.dumps([rep.started, rep.q, rep.z, rep.waiting, rep.running, rep.held_again, rep.finished,
                         rep.error], sort_keys=True, default=str).encode())
    for row in db.execute("select * from jobs order by uid").fetchall():
        h.update(repr(row).encode())


def synthetic(jobs: int, nodes: int, repeat: int, tmp: Path, digest: bool = False) -> dict:
    """Slots with ``jobs`` held jobs against `Fake`: per repeat, a first slot on fresh records (decode
    and record every job) and three later ones (records up to date); seconds each. ``digest``: also
    a hash of each slot's decisions and the records it left (`_digest`; outside the timed slots)."""
    import hashlib

    first, later, started = [], [], 0
    cpu: dict[str, list[float]] = {"first": [], "later": []}  # CPU seconds of the same slots (this process)
    h = hashlib.sha256()
    for r in range(repeat):
        db = open_records(tmp / f"syn{r}.db")
        svc = Service(Config(slot_seconds=30, release_grace=1e9), db,
                      slurm=Fake(jobs, nodes), clock=lambda: 1e9 + 10_000)
        c0 = time.process_time()
        rep = svc.run_slot()
        cpu["first"].append(time.process_time() - c0)
        first.append(rep.duration)
        started = len(rep.started)
        if digest:
            _digest(h, rep, db)
        for _ in range(3):
            c0 = time.process_time()
            rep = svc.run_slot()
            cpu["later"].append(time.process_time() - c0)
            later.append(rep.duration)
            if digest:
                _digest(h, rep, db)
    out = {"first": first, "later": later, "first_cpu": cpu["first"], "later_cpu": cpu["later"], "started": started}
    if digest:
        out["digest"] = h.hexdigest()[:16]
    return out


def against(other: str, jobs: int, nodes: int, repeat: int, digest: bool = False) -> dict:
    """`synthetic` for this tree and ``other`` in child processes, one repeat each in turn (with
    ``digest``: each tree's digest of decisions and records, equal when both decide alike)."""
    import os

    trees = {"this": str(_TREE), "against": str(Path(other).resolve())}
    runs: dict[str, dict] = {k: {"first": [], "later": [], "first_cpu": [], "later_cpu": [], "cpu_s": 0.0} for k in trees}
    load_before = _load()
    for r in range(repeat):
        for key, root in trees.items():
            argv = [sys.executable, str(Path(__file__).resolve()), "--child", "--tree", root, "--jobs", str(jobs),
                    "--nodes", str(nodes), "--repeat", "1", *(["--digest"] if digest else [])]
            env = {**os.environ, "PYTHONPATH": root}
            got = json.loads(subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout)
            runs[key]["first"] += got["first"]
            runs[key]["later"] += got["later"]
            for part in ("first_cpu", "later_cpu"):  # a child of an older benchmark has none
                runs[key][part] += got.get(part, [])
            runs[key]["cpu_s"] = round(runs[key]["cpu_s"] + got["cpu_s"], 2)
            runs[key]["started"] = got["started"]
            if digest:
                runs[key].setdefault("digests", []).append(got["digest"])
            say(f"round {r + 1}, {key} ({root}): first {got['first'][0]:.2f} s ({got['first_cpu'][0]:.2f} s CPU), later "
                + ", ".join(f"{x:.3f}" for x in got["later"]) + " s ("
                + ", ".join(f"{x:.3f}" for x in got["later_cpu"]) + " s CPU)")
    out: dict = {"jobs": jobs, "nodes": nodes, "repeat": repeat, "load_before": load_before, "trees": trees, "runs": runs}
    # wall seconds (what the slot's report says it took) and CPU seconds (less moved by the load)
    for part in ("first", "later", "first_cpu", "later_cpu"):
        for key in trees:
            out[f"median_{part}_s_{key}"] = round(statistics.median(runs[key][part]), 3)
        out[f"ratio_{part}"] = round(out[f"median_{part}_s_this"] / out[f"median_{part}_s_against"], 3)
    out["load_after"] = _load()
    if digest:  # one per round; each round starts from fresh records, so all should agree
        out["digest_this"], out["digest_against"] = (sorted(set(runs[k].get("digests", []))) for k in trees)
        out["same_decisions"] = out["digest_this"] == out["digest_against"] and len(out["digest_this"]) == 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, default=None, help="slots per run (default 20; 5 with --backend)")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", help="compare Slurm backends on the real cluster, comma-separated: cli, pyslurm, "
                    "cli-nomemo (every squeue line parsed anew), pyslurm-full (no update-time probe), "
                    "pyslurm-wrapped (jobs read through PySlurm's Jobs.load)")
    ap.add_argument("--sizes", default="1000,10000", help="with --backend: numbers of held jobs")
    ap.add_argument("--json", action="store_true", help="with --backend or --against: one JSON object")
    ap.add_argument("--against", default=None, help="a checkout whose lyasched package runs the same synthetic slots")
    ap.add_argument("--digest", action="store_true", help="with --against: also compare a hash of each tree's "
                    "decisions and job records over the same slots (same_decisions; the timed slots are not hashed)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        tmp = Path(tempfile.mkdtemp(prefix="lyasched-bench-"))
        try:
            c0 = time.process_time()
            res = synthetic(a.jobs, a.nodes, a.repeat, tmp, a.digest)
            res["cpu_s"] = time.process_time() - c0
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(json.dumps(res))
        return
    if a.against:
        if not (Path(a.against) / "lyasched").is_dir():
            print(f"slot_duration: error: --against {a.against}: no lyasched package there", file=sys.stderr)
            sys.exit(2)
        res = against(a.against, a.jobs, a.nodes, a.repeat, a.digest)
        if a.json:
            print(json.dumps(res))
        else:
            print(f"synthetic, {a.jobs} held jobs on {a.nodes}x4 GPUs (lyapunov), {a.repeat} rounds; load {res['load_before']}")
            for part in ("first", "later"):
                print(f"  {part} slot: this {res[f'median_{part}_s_this']:.3f} s, against {res[f'median_{part}_s_against']:.3f} s, "
                      f"ratio {res[f'ratio_{part}']}; CPU this {res[f'median_{part}_cpu_s_this']:.3f} s, against "
                      f"{res[f'median_{part}_cpu_s_against']:.3f} s, ratio {res[f'ratio_{part}_cpu']}")
            print(f"  load average {res['load_before']} before, {res['load_after']} after")
            print(f"  CPU time: this {res['runs']['this']['cpu_s']} s, against {res['runs']['against']['cpu_s']} s")
            if a.digest:
                print(f"  decisions and records: this {res['digest_this']}, against {res['digest_against']}: "
                      + ("the same" if res["same_decisions"] else "DIFFERENT"))
        return
    if a.backend:
        backends = [b for b in a.backend.split(",") if b]
        if not backends or any(b not in VARIANTS for b in backends) or len(set(backends)) != len(backends):
            print(f"slot_duration: error: --backend takes {', '.join(VARIANTS)} (comma-separated, each once), "
                  f"got {a.backend!r}", file=sys.stderr)
            sys.exit(2)
        try:
            sizes = [int(x) for x in a.sizes.split(",") if x]
        except ValueError:
            print(f"slot_duration: error: --sizes takes numbers, got {a.sizes!r}", file=sys.stderr)
            sys.exit(2)
        res = compare_backends(backends, sizes, a.slots or 5)
        if a.json:
            print(json.dumps(res))
        else:
            print_comparison(res)
        return
    a.slots = a.slots or 20
    tmp = Path(tempfile.mkdtemp(prefix="lyasched-bench-"))
    try:
        if shutil.which("squeue"):
            svc = Service(Config(slot_seconds=1, users=("__no_such_user__",)), open_records(tmp / "live.db"),
                          slurm=SlurmCLI(timeout=30, retries=0))
            durs = []
            for _ in range(a.slots):
                rep = svc.run_slot()
                if rep.error:
                    print(f"live: Slurm did not answer ({rep.error}); skipped")
                    break
                durs.append(rep.duration)
            if durs:
                print(f"live cluster, read-only slot ({sum(rep.free.values())} free GPUs): {stats(durs)}")
        else:
            print("live: no squeue on PATH; skipped")
        got = synthetic(a.jobs, a.nodes, a.repeat, tmp)
        first, later, started = got["first"], got["later"], got["started"]
        print(f"synthetic, {a.jobs} held jobs on {a.nodes}x4 GPUs (lyapunov):")
        print(f"  first slot (decode + record every job, {started} started): {stats(first)}")
        print(f"  later slots (records up to date):                        {stats(later)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
