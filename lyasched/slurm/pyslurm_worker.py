"""The pyslurm side of the pyslurm backend: a long-lived process that answers requests with libslurm.

PySlurm 22.5's calls hold the GIL while libslurm waits on the controller, so a hanging controller
would freeze the caller; in this process it only freezes the worker, which the caller
(lyasched.slurm.pyslurm_backend) kills on its timeout and starts afresh. Requests and answers are
length-prefixed pickles on stdin/stdout (the process's own stdout is redirected to stderr so that
nothing libslurm prints can corrupt the channel).

    python -m lyasched.slurm.pyslurm_worker
"""

from __future__ import annotations

import math
import os
import re
import pickle
import struct
import sys
from typing import Any, Callable, Sequence

from lyasched import gcpause
from lyasched.slurm.libslurm_jobs import LibslurmJobs
from lyasched.slurm.query import expand_hostlist, features_of, gpus_in_tres
from lyasched.slurm.types import TAG, TERMINAL_STATES, ClusterConfig, NodeInfo, SlurmJob

_NOVAL32 = {0xFFFFFFFE, 0xFFFFFFFF}  # NO_VAL, INFINITE as raw uint32 times

Hook = Callable[[str, tuple, Callable[[], Any]], Any]


def read_frame(f) -> Any:
    head = f.read(4)
    if len(head) < 4:
        raise EOFError
    (n,) = struct.unpack("!I", head)
    data = f.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


def write_frame(f, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("!I", len(data)) + data)
    f.flush()


def _gpus(gres: Any) -> tuple[int, str]:
    """GPU count and type from pyslurm's gres dict ({"gpu": 4}, {"gpu:a100": 4}, {"gpu:a100": {...}})."""
    total, typ = 0, ""
    for key, val in (gres or {}).items():
        name, _, rest = str(key).partition(":")
        if name != "gpu":
            continue
        if isinstance(val, dict):
            val = val.get("count", 0)
        try:
            total += int(str(val).split("(")[0])
        except ValueError:
            continue
        if rest and not typ:
            typ = rest.split(":")[0]
    return total, typ


def _time(v: Any) -> float | None:
    if v is None or v in _NOVAL32 or v == 0:
        return None
    return float(v)


PROBE_ENV = "LYASCHED_PYSLURM_PROBE"  # "0": every job list is a full slurm_load_jobs (no update-time probe)
DIRECT_ENV = "LYASCHED_PYSLURM_DIRECT"  # "0": the every-slot job list through PySlurm's Jobs.load (as before)


class JobsChanged:
    """Asks slurmctld whether any job changed since a given answer: ``slurm_load_jobs`` with the
    update time of the answer the worker holds (what scontrol and ``squeue --iterate`` do; PySlurm
    22.5's ``Jobs.load`` always asks for everything). ``SLURM_NO_CHANGE_IN_DATA`` is the
    controller's own answer, so the list held is still its current one; the controller checks
    with a one-second margin (``update_time - 1 >= last_job_update``), so no change is missed.
    Through libslurm's C API (ctypes on the libslurm PySlurm loaded), in the worker only."""

    NO_CHANGE = 1900  # SLURM_NO_CHANGE_IN_DATA (slurm_errno.h)

    def __init__(self) -> None:
        import ctypes

        with open("/proc/self/maps") as f:
            path = next((ln.split()[-1] for ln in f if "/libslurm.so" in ln or "/libslurmfull" in ln), None)
        if path is None:
            raise RuntimeError("libslurm is not loaded")
        lib = ctypes.CDLL(path)
        lib.slurm_load_jobs.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint16]
        lib.slurm_load_jobs.restype = ctypes.c_int
        lib.slurm_free_job_info_msg.argtypes = [ctypes.c_void_p]
        lib.slurm_free_job_info_msg.restype = None
        lib.slurm_get_errno.restype = ctypes.c_int
        lib.slurm_strerror.argtypes = [ctypes.c_int]
        lib.slurm_strerror.restype = ctypes.c_char_p

        class Head(ctypes.Structure):  # job_info_msg_t's first fields (slurm.h, 22.05)
            _fields_ = [("last_backfill", ctypes.c_int64), ("last_update", ctypes.c_int64),
                        ("record_count", ctypes.c_uint32)]

        self.ct, self.lib, self.head = ctypes, lib, ctypes.POINTER(Head)

    def since(self, update_time: int) -> int | None:
        """None when no job changed since ``update_time`` (the controller's time of an answer);
        else the controller's time of now (to ask with next time, once the jobs were read)."""
        ct = self.ct
        p = ct.c_void_p()
        rc = self.lib.slurm_load_jobs(update_time, ct.byref(p), 0x0001)  # SHOW_ALL (no detail: smaller)
        if rc != 0:
            err = self.lib.slurm_get_errno()
            if err == self.NO_CHANGE:
                return None
            raise RuntimeError((self.lib.slurm_strerror(err) or b"slurm_load_jobs failed").decode(errors="replace"))
        try:
            return int(ct.cast(p, self.head).contents.last_update)
        finally:
            self.lib.slurm_free_job_info_msg(p)


class Worker:
    """Maps lyasched's requests to PySlurm calls; results are lyasched.slurm.types values."""

    def __init__(self) -> None:
        import pyslurm

        self.ps = pyslurm
        self._sent: dict[str, tuple] = {}  # jobs_delta: the fields last sent, by job id
        self._order: list[str] = []  # jobs_delta: the job ids last sent, in order
        self._final: dict[int, tuple] = {}  # jobs_delta: fields of lyasched jobs seen finished, by job id
        self._token: str | None = None
        self._seq = 0
        self._probe: JobsChanged | None = None
        self._as_of = 0  # the controller's update time that _sent is at least as new as (0: none)
        self._use_probe = os.environ.get(PROBE_ENV, "1") != "0"
        self._direct: LibslurmJobs | None = None  # the job read from libslurm's records (None: PySlurm's Jobs.load)
        self._direct_checked = False  # checked against PySlurm's reading of the same jobs
        self._to_free: list[Any] = []  # libslurm job messages already read, freed after the answer
        if os.environ.get(DIRECT_ENV, "1") != "0":
            try:
                d = LibslurmJobs()
                if d.layout_ok:
                    self._direct = d
                else:
                    print(f"pyslurm worker: libslurm API {'.'.join(map(str, d.version))} is not the release whose job "
                          f"records lyasched mirrors: jobs read through PySlurm", file=sys.stderr)
            except Exception as e:  # noqa: BLE001 - PySlurm's reading works without it
                print(f"pyslurm worker: no direct job read ({e}): jobs read through PySlurm", file=sys.stderr)
        if self._direct is None and self._use_probe:
            try:
                self._probe = JobsChanged()
            except Exception as e:  # noqa: BLE001 - without it every read is a full one
                print(f"pyslurm worker: no update-time probe ({e}): full job reads", file=sys.stderr)

    # ------------------------------------------------------------ reading

    def hello(self) -> dict[str, Any]:
        ps = self.ps
        out: dict[str, Any] = {"pyslurm": ps.__version__, "pid": os.getpid()}
        try:
            out["libslurm"] = ".".join(str(x) for x in ps.slurm_api_version())
        except Exception:  # noqa: BLE001
            out["libslurm"] = ""
        return out

    def config(self) -> ClusterConfig:
        c = self.ps.config().get()
        acct = str(c.get("accounting_storage_type") or "").lower()
        plugins = tuple(p.strip() for p in str(c.get("job_submit_plugins") or "").split(",")
                        if p.strip() and p.strip() != "(null)")
        return ClusterConfig(version=str(c.get("version") or ""),
                             accounting=bool(acct) and not acct.endswith("/none") and acct != "(null)",
                             submit_plugins=plugins)

    def nodes(self) -> list[NodeInfo]:
        # PySlurm's older node API: it loads with SHOW_DETAIL, without which 22.05 reports no GPUs
        # in use (its Nodes.load() does not ask for it). Slurm's order, as scontrol prints it.
        out = []
        for name, d in self.ps.node().get().items():
            gres = ",".join(d.get("gres") or [])
            m = re.match(r"(?:gres:)?gpu:([A-Za-z][^:(,]*):", gres)
            out.append(NodeInfo(
                name=str(name), state=str(d.get("state") or "UNKNOWN"), gpus_total=gpus_in_tres(gres),
                gpus_alloc=gpus_in_tres(",".join(d.get("gres_used") or [])),
                partitions=tuple(p for p in (d.get("partitions") or []) if p and p != "(null)"),
                reason=str(d.get("reason") or ""), gpu_type=m.group(1) if m and m.group(1) != "(null)" else "",
                features=_features(d)))
        return out

    def jobs(self, user: str | None = None, job_ids: Sequence[str] = (), lyasched_only: bool = True) -> list[SlurmJob]:
        wanted = {str(j) for j in job_ids}
        out = []
        for jid, j in self.ps.Jobs.load(preload_passwd_info=True).items():
            comment = j.comment or ""
            if lyasched_only and not comment.startswith(TAG):
                continue
            if wanted and str(jid) not in wanted:
                continue
            job = _job(j)
            if user and job.user != user:
                continue
            out.append(job)
        return out

    def jobs_delta(self, have: str | None) -> tuple[str, list[str], dict[str, tuple]]:
        """Every lyasched job, for a caller that kept the previous answer: (token of this answer,
        job ids in order, SlurmJob fields of the jobs that changed since the answer ``have``
        names). A slot re-reads thousands of held jobs that rarely change; this sends only the
        changes (all of them when ``have`` is not this worker's last answer)."""
        fresh = have is not None and have == self._token
        if self._direct is not None:
            got = self._direct_rows()
            if got is not None:
                as_of, listed = got
                if listed is None:  # the controller: no job changed since the jobs in _sent were read
                    return self._answer(list(self._order), {} if fresh else dict(self._sent))
                return self._delta(listed, fresh, as_of)
        as_of = 0
        if self._probe is not None:
            probed = self._probe.since(self._as_of) if self._as_of else self._probe.since(0)
            if probed is None:
                return self._answer(list(self._order), {} if fresh else dict(self._sent))
            as_of = probed
        listed = []
        for jid, j in self.ps.Jobs.load(preload_passwd_info=True).items():
            t = self._final.get(jid)  # a finished job never changes: not read again (MinJobAge keeps it listed)
            if t is not None and t[6] != _time(j.submit_time):  # the id was reused (controller state lost)
                t = None
            if t is None:
                comment = j.comment or ""
                if not comment.startswith(TAG):
                    continue
                t = _fields(j, comment)
                if t[3] in TERMINAL_STATES:
                    self._final[jid] = t
            listed.append(t)
        return self._delta(listed, fresh, as_of)

    def _answer(self, order: list[str], changed: dict[str, tuple]) -> tuple[str, list[str], dict[str, tuple]]:
        self._seq += 1
        self._token = f"{os.getpid()}:{self._seq}"
        return self._token, order, changed

    def _delta(self, listed: list[tuple], fresh: bool, as_of: int) -> tuple[str, list[str], dict[str, tuple]]:
        """The answer for the lyasched jobs ``listed`` (SlurmJob fields, Slurm's order): only what
        changed since the answer the caller holds (``fresh``), everything otherwise."""
        sent, rows, order, changed = self._sent, {}, [], {}
        for t in listed:
            order.append(t[0])
            rows[t[0]] = t
            if not fresh or sent.get(t[0]) != t:
                changed[t[0]] = t
        self._sent, self._order = rows, order
        self._as_of = as_of  # asked before the jobs were read: what was read is at least this new
        if len(self._final) > len(rows):  # purged jobs (MinJobAge): forget them
            self._final = {k: v for k, v in self._final.items() if v[0] in rows}
        return self._answer(order, changed)

    def _direct_rows(self) -> tuple[int, list[tuple] | None] | None:
        """(the controller's time of the answer, the lyasched jobs' fields, or None when no job
        changed since the last read) from libslurm's records; None when they cannot be trusted
        here (checked once against PySlurm's reading: a mismatch and PySlurm reads from then on)."""
        d = self._direct
        assert d is not None
        got = d.load(self._as_of if self._use_probe else 0)
        if got is None:
            return self._as_of, None
        as_of, msg = got
        try:
            listed = d.rows(msg, self._final)
        except BaseException:
            d.free(msg)
            raise
        self._to_free.append((d, msg))  # freed once the answer is sent (`after_answer`): not the caller's wait
        if not self._direct_checked:
            verdict = self._check_direct(listed)
            if verdict is False:
                self._direct, self._final = None, {}
                if self._use_probe:
                    try:
                        self._probe = JobsChanged()
                    except Exception:  # noqa: BLE001
                        self._probe = None
                return None
            self._direct_checked = verdict is True
        return as_of, listed

    def after_answer(self) -> None:
        """Work left for when the caller has its answer (freeing libslurm's job message)."""
        while self._to_free:
            reader, msg = self._to_free.pop()
            reader.free(msg)

    def _check_direct(self, listed: list[tuple]) -> bool | None:
        """Whether the fields read from libslurm's records are PySlurm's (state aside: PySlurm
        passes only its low 16 bits to slurm_job_state_string); None when the queue changed
        meanwhile, so the comparison says nothing (checked again at the next read)."""
        def key(rows) -> dict:
            return {t[0]: t[:3] + t[4:] for t in rows}

        mine = key(listed)
        theirs = key(_fields(j, j.comment) for _, j in self.ps.Jobs.load(preload_passwd_info=True).items()
                     if (j.comment or "").startswith(TAG))
        if mine == theirs:
            return True
        d = self._direct
        assert d is not None
        got = d.load(0)
        assert got is not None  # update time 0: always an answer
        try:
            again = key(d.rows(got[1], {}))
        finally:
            d.free(got[1])
        if again != mine:
            return None
        diff = next((i for i in sorted(set(mine) | set(theirs)) if mine.get(i) != theirs.get(i)), None)
        print(f"pyslurm worker: libslurm's job records read differently from PySlurm (job {diff}: "
              f"{mine.get(diff)} vs {theirs.get(diff)}): jobs read through PySlurm", file=sys.stderr)
        return False

    def _load(self, job_id: str) -> Any:
        """PySlurm's record of one job, any owner; None when Slurm does not know it (or the id is no number)."""
        try:
            return self.ps.Job.load(int(job_id))
        except ValueError:
            return None
        except self.ps.RPCError as e:
            if "Invalid job id" in str(e):
                return None
            raise

    def job(self, job_id: str) -> SlurmJob | None:
        j = self._load(job_id)
        try:
            return None if j is None else _job(j)
        except ValueError:  # a record that does not convert reads as unknown (as before the shared load)
            return None

    def work_dir(self, job_id: str) -> str | None:
        j = self._load(job_id)
        return None if j is None else (j.working_directory or None)

    # ------------------------------------------------------------ changing jobs

    def release(self, job_id: str) -> None:
        self.ps.Job(int(job_id)).release()

    def hold(self, job_id: str) -> None:
        self.ps.Job(int(job_id)).hold()

    def cancel(self, job_id: str) -> None:
        # Job.cancel() says nothing about a job Slurm does not know (as scancel): load it first,
        # which raises "Invalid job id specified" for a missing one.
        self.ps.Job.load(int(job_id)).cancel()

    def submit(self, fields: dict[str, Any], script: str) -> str:
        desc = self.ps.JobSubmitDescription(script=script, **fields)
        return str(desc.submit())

    # ------------------------------------------------------------ moves (docs/elastic.md)

    def signal(self, job_id: str, signal: str) -> None:
        import signal as sig

        num = int(getattr(sig, "SIG" + signal.upper().removeprefix("SIG")))
        self.ps.Job(int(job_id)).send_signal(num)  # every step's processes, as scancel --signal

    def requeue_hold(self, job_id: str) -> None:
        self.ps.Job(int(job_id)).requeue(hold=True)


def _features(d: dict) -> tuple[str, ...]:
    """A PySlurm node dict's active (else available) features as names."""
    v = d.get("features_active") or d.get("features") or ""
    return features_of(",".join(v) if isinstance(v, (list, tuple)) else str(v))


def _job(j: Any) -> SlurmJob:
    return SlurmJob(*_fields(j))


def _fields(j: Any, comment: str | None = None) -> tuple:
    """A PySlurm Job as the positional fields of SlurmJob (what squeue's line would give)."""
    state = str(j.state or "UNKNOWN")
    gpn, gtype = _gpus(j.gres_per_node)
    limit = j.time_limit
    tl = math.inf if limit is None or limit in _NOVAL32 else float(limit) * 60.0
    nodes = j.allocated_nodes
    uid = j.user_id
    return (
        str(j.id),  # job_id
        str(j.user_name or uid),  # user
        int(uid) if uid is not None else None,  # unix_uid
        state,
        str(j.state_reason or "None"),  # reason
        int(j.priority or 0),
        _time(j.submit_time),
        None if state == "PENDING" else _time(j.start_time),
        _time(j.end_time) if state in TERMINAL_STATES else None,
        tl,  # time_limit (s)
        int(j.num_nodes or 1),
        gpn,  # gpus_per_node
        tuple(expand_hostlist(nodes)) if nodes else (),
        str(j.partition or ""),
        str(j.comment or "") if comment is None else comment,
        str(j.name or ""),
        {},  # extra
        gtype,  # gpu_type
    )


def serve(hook: Hook | None = None) -> int:
    """Answer requests until stdin closes. ``hook(op, args, call)`` may wrap each call (the fault
    injector of tests/reliability/flaky_slurm.py); it returns the answer or raises."""
    inp = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed from now on goes to stderr, never into the channel
    sys.stdout = sys.stderr
    try:
        worker = Worker()
    except Exception as e:  # noqa: BLE001 - reported to the caller as the answer to its first request
        worker, broken = None, f"cannot import pyslurm: {type(e).__name__}: {e}"
    while True:
        try:
            op, args = read_frame(inp)
        except EOFError:
            return 0
        try:
            if worker is None:
                raise RuntimeError(broken)
            fn = getattr(worker, op)

            def call(fn=fn, args=args) -> Any:
                return fn(*args)

            with gcpause.paused():  # a job list wraps thousands of records: no heap scans meanwhile
                result = hook(op, args, call) if hook else call()
            write_frame(out, ("ok", result))
        except Exception as e:  # noqa: BLE001 - every failure goes back as an answer
            write_frame(out, ("err", type(e).__name__, str(e)))
        if worker is not None:
            try:
                worker.after_answer()
            except Exception as e:  # noqa: BLE001 - never a second answer to one request
                print(f"pyslurm worker: {type(e).__name__}: {e}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(serve())
