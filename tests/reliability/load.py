"""Load on the real local Slurm cluster (issue 5, "Load"): a burst of `lyasub` submissions and
many held jobs. Functions return dicts of figures; `benchmarks/reliability.py` prints them.

- `run_burst(n, procs)`: ``n`` real `lyasub` runs as the test user, ``procs`` at a time, while
  `lyasched serve` (root, short slots) runs. Every run must be accepted (exit 0, a job id) or
  cleanly refused (non-zero exit, one ``lyasub: error:`` line, nothing queued). Checks: every
  accepted job exists in Slurm with its cost summary, every uid is queued at most once and
  recorded once by the service, nobody ever saw "database is locked"; slot durations while
  the burst lands come from the service's own records.
- `run_held(n, procs)`: ``n`` separate held lyasched jobs (parallel `sbatch` as the test user,
  valid summaries, held by the job_submit plugin, a script that does nothing), then one
  `lyasched serve --once` slot (query Slurm, decide, apply) against them, with the cluster's
  GPUs busy and then free; then all are cancelled.

Needs root and the cluster (`slurm/cluster up`). Cluster phases hold the shared lock
``/run/lock/lyasched-rel.lock`` (skipped when this process or an ancestor, e.g. ``flock(1)``,
already holds it). Only jobs named ``lyaload-*`` of the test user are ever cancelled.

    python -m tests.reliability.load burst [--n 1000] [--procs 8]
    python -m tests.reliability.load held [--n 10000] [--procs 8]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Iterator

from .users import TEST_USER, as_user, as_user_argv

LOCK_PATH = Path("/run/lock/lyasched-rel.lock")
BURST_NAME = "lyaload-burst"
HELD_NAME = "lyaload-held"
BLOCK_NAME = "lyaload-block"
LOCKED_MSG = "database is locked"
_lock_depth = 0


def say(msg: str) -> None:
    print(f"[load] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the shared-cluster lock


def _lock_holders(path: Path) -> set[int]:
    """Pids holding a flock on ``path`` (from /proc/locks)."""
    try:
        ino = path.stat().st_ino
        text = Path("/proc/locks").read_text()
    except OSError:
        return set()
    pids = set()
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 00:19:567 0 EOF"; blocked waiters carry "->"
        if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
            continue
        try:
            if int(parts[5].split(":")[-1]) == ino:
                pids.add(int(parts[4]))
        except ValueError:
            continue
    return pids


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


@contextlib.contextmanager
def cluster_lock(what: str = "cluster phase") -> Iterator[None]:
    """Exclusive use of the shared test cluster; re-entrant, and a no-op when an ancestor
    (``flock /run/lock/lyasched-rel.lock pytest ...``) already holds the lock."""
    global _lock_depth
    if _lock_depth or _lock_holders(LOCK_PATH) & _ancestors():
        _lock_depth += 1
        try:
            yield
        finally:
            _lock_depth -= 1
        return
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_PATH, "a") as f:
        t0 = time.monotonic()
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for {LOCK_PATH} ({what}) ...")
            fcntl.flock(f, fcntl.LOCK_EX)
            say(f"got {LOCK_PATH} after {time.monotonic() - t0:.0f}s")
        _lock_depth += 1
        try:
            yield
        finally:
            _lock_depth -= 1
            fcntl.flock(f, fcntl.LOCK_UN)


# ---------------------------------------------------------------- helpers


def stats_ms(xs: list[float]) -> dict[str, float | int | None]:
    if not xs:
        return {"n": 0, "median_s": None, "p95_s": None, "max_s": None}
    s = sorted(xs)
    p95 = s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]
    return {"n": len(s), "median_s": statistics.median(s), "p95_s": p95, "max_s": s[-1]}


def workdir(prefix: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o1777)
    return d


def queued_uids(user: str, name: str) -> dict[str, list[tuple[str, str]]]:
    """uid -> [(job id, state)] of the user's jobs called ``name`` (every state squeue still lists)."""
    from lyasched.summary import CostSummary

    out = subprocess.run(["squeue", "-h", "-t", "all", "-u", user, "-n", name, "-o", "%i|%T|%k"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    by_uid: dict[str, list[tuple[str, str]]] = {}
    for line in out.splitlines():
        job_id, state, comment = line.split("|", 2)
        try:
            uid = CostSummary.decode(comment).uid
        except ValueError:
            uid = f"?{job_id}"
        by_uid.setdefault(uid, []).append((job_id, state))
    return by_uid


def cancel_named(user: str, name: str) -> float:
    """Cancel the user's jobs called ``name``; returns seconds until squeue lists none active."""
    t0 = time.monotonic()
    subprocess.run(["scancel", "-u", user, "-n", name], capture_output=True, timeout=300)
    while time.monotonic() - t0 < 300:
        out = subprocess.run(["squeue", "-h", "-u", user, "-n", name, "-t", "PD,R,CG,S", "-o", "%i"],
                             capture_output=True, text=True, timeout=120).stdout
        if not out.strip():
            break
        time.sleep(1)
    return time.monotonic() - t0


@contextlib.contextmanager
def cancel_on_error(user: str, *names: str) -> Iterator[None]:
    """A run that fails half-way leaves none of its jobs behind (the GPU blocker above all: it would
    hold every GPU of the shared cluster for an hour)."""
    try:
        yield
    except BaseException:
        for name in names:
            cancel_named(user, name)
        raise


def block_gpus(user: str, work: Path, wait: float = 30) -> str | None:
    """A plain job of ``user`` holding every GPU of the cluster (so slots decide but start
    nothing); returns its id once running, or None if it could not start in time."""
    from lyasched.slurm import query as q

    nodes = [n for n in q.parse_nodes(subprocess.run(q.node_args(), capture_output=True, text=True).stdout)
             if n.gpus_total > 0]
    r = as_user(user, "sbatch", "--parsable", "-J", BLOCK_NAME, f"-N{len(nodes)}", f"--gres=gpu:{max(n.gpus_total for n in nodes)}",
                "-t", "60", "-o", "/dev/null", "-D", str(work), "--wrap", "sleep 3600", timeout=60)
    if r.returncode != 0:
        say(f"could not submit the GPU-blocking job: {r.stderr.strip()}")
        return None
    job = r.stdout.strip().split(";")[0]
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait:
        st = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()
        if st == "RUNNING":
            return job
        time.sleep(0.5)
    say(f"GPU-blocking job {job} did not start within {wait:.0f}s (GPUs in use elsewhere?)")
    return job


def service_slots(db_path: Path, since: float) -> list[tuple[float, str]]:
    import sqlite3

    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return [(d, e or "") for d, e in con.execute("SELECT duration, error FROM slots WHERE time >= ? ORDER BY id", [since])]
    finally:
        con.close()


def service_jobs(db_path: Path) -> dict[str, list[str]]:
    import sqlite3

    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        out: dict[str, list[str]] = {}
        for uid, sid in con.execute("SELECT uid, slurm_id FROM jobs"):
            out.setdefault(uid, []).append(sid)
        return out
    finally:
        con.close()


def start_service(db: Path, log: Path, slot_seconds: float, user: str) -> subprocess.Popen:
    exe = shutil.which("lyasched") or "lyasched"
    return subprocess.Popen([exe, "serve", "--db", str(db), "--slot-seconds", str(slot_seconds), "--users", user],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def stop_service(p: subprocess.Popen, timeout: float = 120) -> int | None:
    import signal

    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()


# ---------------------------------------------------------------- burst


def cluster_device_keys() -> set[str]:
    """The cost-table device keys lyasub may key a job on here: the generic one and each GPU type
    the cluster's nodes declare (a job with no --gpu-type is keyed on the first typed node's)."""
    from lyasched.profile.signature import device_type

    out = subprocess.run(["sinfo", "-h", "-o", "%G"], capture_output=True, text=True).stdout
    return {"gpu", *(device_type(t) for t in re.findall(r"gpu:([A-Za-z][\w.-]*):\d", out))}


def seed_cost_table(db: Path, model: str, devices: Iterable[str] | None = None) -> str:
    """A measured cost-table entry for ``model`` so lyasub reuses it (the common case of a
    user resubmitting a known model: no profiling job), under every device key of this cluster
    (`cluster_device_keys`: a miss would send a profiling job that waits behind the blocked GPUs);
    returns the model signature."""
    from lyasched.store import open_db
    from lyasched.store.costtable import put
    from lyasched.submitter import model_signature_of

    spec, sig = model_signature_of(model, {})
    params = sum(p.numel() for p in spec.model.parameters())
    conn = open_db(db)
    for device in sorted(cluster_device_keys() if devices is None else devices):
        put(conn, {"signature": sig, "device_type": device, "model": model, "source": "measured",
                   "alpha": 1e-3, "beta": 1e-5, "m0": 1e7, "m1": 1e4, "params": params, "bytes_per_param": 4})
    return sig


def lyasub_argv(db: Path, script: Path, uid: str) -> list[str]:
    exe = shutil.which("lyasub") or "lyasub"
    return [exe, "--parsable", "--db", str(db), "--uid", uid, "--job-name", BURST_NAME, "--time", "00:10:00",
            "--output", "/dev/null", "--model", "mlp", "--global-batch", "8", "--iterations", "5", "--", str(script)]


def classify(rc: int, out: str, err: str) -> str:
    """accepted | refused (clean: one `lyasub: error:` line, no traceback) | unclean."""
    if rc == 0 and out.strip().isdigit():
        return "accepted"
    errors = [ln for ln in err.splitlines() if ln.startswith("lyasub: error:")]
    if rc != 0 and len(errors) == 1 and "Traceback" not in err:
        return "refused"
    return "unclean"


def run_burst(n: int = 1000, procs: int = 8, user: str = TEST_USER, slot_seconds: float = 2.0,
              block: bool = True, keep: bool = False) -> dict[str, Any]:
    """``n`` lyasub submissions, ``procs`` at a time, while the service runs; see the module doc."""
    work = workdir("lyaload-burst-")
    cost_db, svc_db = work / "cost" / "lyasched.db", work / "service.db"
    cost_db.parent.mkdir()
    script = work / "train.py"
    script.write_text("print('lyaload')\n")
    script.chmod(0o644)
    say(f"burst: seeding the cost table {cost_db}")
    seed_cost_table(cost_db, "mlp")
    subprocess.run(["chown", "-R", user, str(cost_db.parent)], check=True)
    tag = uuid.uuid4().hex[:8]
    uids = [f"ld{tag}-{i:06d}" for i in range(n)]
    with cluster_lock("burst"), cancel_on_error(user, BURST_NAME, BLOCK_NAME):
        t0 = time.monotonic()
        cancel_named(user, BURST_NAME)
        blocker = block_gpus(user, work) if block else None
        wall0 = time.time()
        svc = start_service(svc_db, work / "serve.log", slot_seconds, user)
        time.sleep(1.0)
        results: list[dict[str, Any]] = []

        def one(uid: str) -> dict[str, Any]:
            s = time.monotonic()
            try:
                r = as_user(user, *lyasub_argv(cost_db, script, uid), timeout=600)
                rc, out, err = r.returncode, r.stdout, r.stderr
            except subprocess.TimeoutExpired as e:
                rc, out, err = -9, "", f"timeout after 600s {e}"
            return {"uid": uid, "rc": rc, "out": out, "err": err, "s": time.monotonic() - s}

        b0 = time.monotonic()
        with ThreadPoolExecutor(procs) as pool:
            for i, res in enumerate(pool.map(one, uids), 1):
                results.append(res)
                if i % max(1, n // 10) == 0 or i == n:
                    say(f"burst: {i}/{n} lyasub runs done, {time.monotonic() - b0:.0f}s")
        burst_s = time.monotonic() - b0
        time.sleep(2 * slot_seconds + 1)  # the service sees the last submissions
        svc_rc = stop_service(svc)
        queued = queued_uids(user, BURST_NAME)
        slots = service_slots(svc_db, wall0)
        recorded = service_jobs(svc_db)
        if not keep:
            cancel_named(user, BURST_NAME)
            if blocker:
                subprocess.run(["scancel", blocker], capture_output=True)
        locked_s = time.monotonic() - t0

    kinds = [classify(r["rc"], r["out"], r["err"]) for r in results]
    accepted = {r["uid"]: r["out"].strip() for r, k in zip(results, kinds) if k == "accepted"}
    refused = [r for r, k in zip(results, kinds) if k == "refused"]
    unclean = [r for r, k in zip(results, kinds) if k == "unclean"]
    lost = [u for u, j in accepted.items() if j not in [jid for jid, _ in queued.get(u, [])]]
    duplicated = [u for u in uids if len(queued.get(u, [])) > 1]
    orphans = [r["uid"] for r in results if r["uid"] not in accepted and queued.get(r["uid"])]
    not_recorded = [u for u, j in accepted.items() if recorded.get(u) != [j]]
    serve_log = (work / "serve.log").read_text(errors="replace")
    locked_msgs = sum(LOCKED_MSG in r["err"] for r in results) + serve_log.count(LOCKED_MSG)
    durations = [d for d, e in slots if not e]
    out = {
        "n": n, "procs": procs, "accepted": len(accepted), "refused_clean": len(refused), "unclean": len(unclean),
        "lost": len(lost), "duplicated": len(duplicated), "orphans": len(orphans),
        "not_recorded_by_service": len(not_recorded), "database_locked_messages": locked_msgs,
        "burst_s": burst_s, "submissions_per_s": n / burst_s if burst_s else None,
        "lyasub_s": stats_ms([r["s"] for r in results]),
        "slots": stats_ms(durations), "slot_errors": sum(1 for _, e in slots if e), "slot_seconds": slot_seconds,
        "gpus_blocked": bool(blocker), "service_exit": svc_rc, "locked_s": locked_s,
        "refusals": sorted({r["err"].strip().splitlines()[-1][:200] for r in refused})[:5],
        "unclean_samples": [f"rc={r['rc']} {r['err'].strip()[-300:]}" for r in unclean[:3]],
        "lost_samples": lost[:5], "slot_error_samples": sorted({e[:300] for _, e in slots if e})[:5],
        "work": str(work),
    }
    if not keep and not unclean and not lost and not not_recorded and not out["slot_errors"]:
        shutil.rmtree(work, ignore_errors=True)
    return out


# ---------------------------------------------------------------- held jobs


SBATCH_LOOP = r"""
while IFS= read -r c; do
  if ! sbatch --parsable -J "$NAME" -N1 -n1 --gres=gpu:1 -t 10 -o /dev/null -D "$WORK" --comment="$c" "$SCRIPT"; then
    echo "FAILED" >&2
  fi
done < "$1"
"""


def summaries(n: int, tag: str) -> list[str]:
    from lyasched.summary import CostSummary

    return [CostSummary(uid=f"lh{tag}-{i:06d}", sig="lyaload0000000ab", global_batch=64, iterations=100 + 7 * (i % 500),
                        min_gpus=1, max_gpus=8, alpha=0.01, beta=0.001, params=1_000_000).encode() for i in range(n)]


def submit_held(n: int, procs: int, user: str, work: Path) -> dict[str, Any]:
    """``n`` separate held lyasched jobs from ``procs`` parallel sbatch loops as ``user``."""
    tag = uuid.uuid4().hex[:8]
    comments = summaries(n, tag)
    script = work / "noop.sbatch"
    script.write_text("#!/bin/bash\ntrue\n")
    script.chmod(0o755)
    loop = work / "submit.sh"
    loop.write_text(SBATCH_LOOP)
    chunks = []
    for p in range(procs):
        f = work / f"comments.{p}"
        f.write_text("".join(c + "\n" for c in comments[p::procs]))
        chunks.append(f)
    env = {**os.environ, "NAME": HELD_NAME, "WORK": str(work), "SCRIPT": str(script)}
    t0 = time.monotonic()
    ps = [subprocess.Popen(as_user_argv(user, "bash", str(loop), str(f)), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env) for f in chunks]
    ids, errs = [], []
    for p in ps:
        o, e = p.communicate()
        ids += [ln.split(";")[0] for ln in o.split() if ln.strip()]
        errs += [ln for ln in e.splitlines() if ln.strip()]
    secs = time.monotonic() - t0
    return {"tag": tag, "submitted": len(ids), "failed": sum(1 for e in errs if e == "FAILED"),
            "errors": sorted(set(e for e in errs if e != "FAILED"))[:5], "submit_s": secs,
            "sbatch_per_s": len(ids) / secs if secs else None}


def serve_once(db: Path, user: str) -> dict[str, Any]:
    """One `lyasched serve --once --json` slot; its own duration and the process's wall time."""
    exe = shutil.which("lyasched") or "lyasched"
    t0 = time.monotonic()
    r = subprocess.run([exe, "serve", "--once", "--json", "--db", str(db), "--users", user],
                       capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    try:
        rep = json.loads(r.stdout)
    except json.JSONDecodeError:
        return {"error": f"exit {r.returncode}: {r.stderr.strip()[-300:]}", "wall_s": wall}
    return {"duration_s": rep["duration"], "wall_s": wall, "waiting": rep["waiting"], "started": len(rep["started"]),
            "free_gpus": sum(rep["free"].values()), "error": rep["error"], "locked": LOCKED_MSG in r.stderr}


def run_held(n: int = 10_000, procs: int = 8, user: str = TEST_USER, slot_seconds: float = 30.0,
             free_too: bool = True) -> dict[str, Any]:
    """``n`` held jobs, then timed slots against them; see the module doc."""
    from lyasched.config import Config

    slot_len = slot_seconds or Config().slot_seconds
    work = workdir("lyaload-held-")
    db = work / "service.db"
    with cluster_lock("held jobs"), cancel_on_error(user, HELD_NAME, BLOCK_NAME):
        t0 = time.monotonic()
        cancel_named(user, HELD_NAME)
        blocker = block_gpus(user, work)
        say(f"held: submitting {n} held jobs ({procs} parallel sbatch loops as {user})")
        sub = submit_held(n, procs, user, work)
        say(f"held: {sub['submitted']} submitted in {sub['submit_s']:.0f}s; timing slots")
        queued = queued_uids(user, HELD_NAME)
        held_now = sum(1 for v in queued.values() for _, st in v if st == "PENDING")
        busy_first = serve_once(db, user)  # fresh records: decode and record every job
        busy_later = serve_once(db, user)  # records up to date: the steady state
        free_slot = None
        if free_too and blocker:
            subprocess.run(["scancel", blocker], capture_output=True)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # wait until Slurm gives the GPUs back
                st = subprocess.run(["squeue", "-h", "-j", blocker, "-o", "%T"], capture_output=True, text=True).stdout.strip()
                if st in ("", "CANCELLED", "COMPLETED"):
                    break
                time.sleep(0.5)
            free_slot = serve_once(db, user)
        recorded = service_jobs(db)
        cancel_s = cancel_named(user, HELD_NAME)
        if blocker:
            subprocess.run(["scancel", blocker], capture_output=True)
        locked_s = time.monotonic() - t0
    mine = {u: v for u, v in queued.items() if u.startswith(f"lh{sub['tag']}-")}
    slots = [s for s in (busy_first, busy_later, free_slot) if s and "duration_s" in s]
    out = {
        "n": n, "procs": procs, **{k: v for k, v in sub.items() if k != "tag"}, "held_in_slurm": held_now,
        "queued_jobs": sum(len(v) for v in mine.values()), "duplicated": sum(1 for v in mine.values() if len(v) > 1),
        "recorded_by_service": sum(1 for u in recorded if u in mine),
        "slot_busy_first": busy_first, "slot_busy_later": busy_later, "slot_free": free_slot,
        "slot_s_max": max((s["duration_s"] for s in slots), default=None), "slot_len_s": slot_len,
        "cancel_s": cancel_s, "locked_s": locked_s,
    }
    shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["burst", "held"])
    ap.add_argument("--n", type=int)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r = run_burst(a.n or 1000, a.procs) if a.what == "burst" else run_held(a.n or 10_000, a.procs)
    print(json.dumps(r, indent=None if a.json else 2, default=str))


if __name__ == "__main__":
    main()
