"""The pyslurm worker's every-slot job read, straight from libslurm's job records (Slurm 22.05).

PySlurm 22.5's ``Jobs.load`` wraps every listed job (finished ones included, which Slurm keeps for
MinJobAge) in a Python object, and its properties convert one field at a time (``gres_per_node``
through regular expressions); at 10,000 held jobs that was most of a full read that was not
Slurm's own time. Here one ``slurm_load_jobs`` call (ctypes, on the libslurm PySlurm loaded)
does both jobs: with the update time of the previous answer it is the "anything changed?" probe
(``SLURM_NO_CHANGE_IN_DATA``: a few milliseconds), otherwise it is the read itself. The numeric
fields of every record are taken as numpy columns at the offsets of ``slurm_job_info_t``
(mirrored below from 22.05's slurm.h); only the comments of unfinished jobs are looked at, and
only lyasched's jobs (comment tag) have their other strings read.

The mirror is only used against libslurm 22.05 (``slurm_api_version`` 38.x), and the worker checks
it once against PySlurm's own reading of the same jobs before trusting it
(lyasched.slurm.pyslurm_worker.Worker); anything else reads through PySlurm as before.
"""

from __future__ import annotations

import ctypes as ct
import math
import pwd
from typing import Any

import numpy as np

from lyasched.slurm.query import expand_hostlist, gpu_type_in_tres, gpus_in_tres
from lyasched.slurm.types import TAG, TERMINAL_STATES

API_CURRENT = 38  # libslurm.so.38: Slurm 22.05, the release whose slurm_job_info_t is mirrored here
NO_CHANGE = 1900  # SLURM_NO_CHANGE_IN_DATA (slurm_errno.h)
SHOW_ALL = 0x0001  # hidden partitions too, as squeue --all... and no SHOW_DETAIL: smaller answer
NO_VAL, INFINITE = 0xFFFFFFFE, 0xFFFFFFFF

# slurm_job_info_t of Slurm 22.05 (slurm.h), in order: P pointer, T time_t, D double, uN/iN ints.
_LAYOUT = (
    "account:P accrue_time:T admin_comment:P alloc_node:P alloc_sid:u32 array_bitmap:P array_job_id:u32 "
    "array_task_id:u32 array_max_tasks:u32 array_task_str:P assoc_id:u32 batch_features:P batch_flag:u16 "
    "batch_host:P bitflags:u64 boards_per_node:u16 burst_buffer:P burst_buffer_state:P cluster:P "
    "cluster_features:P command:P comment:P container:P contiguous:u16 core_spec:u16 cores_per_socket:u16 "
    "billable_tres:D cpus_per_task:u16 cpu_freq_min:u32 cpu_freq_max:u32 cpu_freq_gov:u32 cpus_per_tres:P "
    "cronspec:P deadline:T delay_boot:u32 dependency:P derived_ec:u32 eligible_time:T end_time:T exc_nodes:P "
    "exc_node_inx:P exit_code:u32 features:P fed_origin_str:P fed_siblings_active:u64 fed_siblings_active_str:P "
    "fed_siblings_viable:u64 fed_siblings_viable_str:P gres_detail_cnt:u32 gres_detail_str:P gres_total:P "
    "group_id:u32 het_job_id:u32 het_job_id_set:P het_job_offset:u32 job_id:u32 job_resrcs:P job_state:u32 "
    "last_sched_eval:T licenses:P mail_type:u16 mail_user:P max_cpus:u32 max_nodes:u32 mcs_label:P "
    "mem_per_tres:P name:P network:P nodes:P nice:u32 node_inx:P ntasks_per_core:u16 ntasks_per_tres:u16 "
    "ntasks_per_node:u16 ntasks_per_socket:u16 ntasks_per_board:u16 num_cpus:u32 num_nodes:u32 num_tasks:u32 "
    "partition:P prefer:P pn_min_memory:u64 pn_min_cpus:u16 pn_min_tmp_disk:u32 power_flags:u8 preempt_time:T "
    "preemptable_time:T pre_sus_time:T priority:u32 profile:u32 qos:P reboot:u8 req_nodes:P req_node_inx:P "
    "req_switch:u32 requeue:u16 resize_time:T restart_cnt:u16 resv_name:P sched_nodes:P select_jobinfo:P "
    "selinux_context:P shared:u16 show_flags:u16 site_factor:u32 sockets_per_board:u16 sockets_per_node:u16 "
    "start_time:T start_protocol_ver:u16 state_desc:P state_reason:u16 std_err:P std_in:P std_out:P "
    "submit_time:T suspend_time:T system_comment:P time_limit:u32 time_min:u32 threads_per_core:u16 tres_bind:P "
    "tres_freq:P tres_per_job:P tres_per_node:P tres_per_socket:P tres_per_task:P tres_req_str:P "
    "tres_alloc_str:P user_id:u32 user_name:P wait4switch:u32 wckey:P work_dir:P"
)
_CT: dict[str, Any] = {"P": ct.c_void_p, "T": ct.c_int64, "D": ct.c_double, "u8": ct.c_uint8, "u16": ct.c_uint16,
       "u32": ct.c_uint32, "u64": ct.c_uint64, "i32": ct.c_int32}
_NP = {"P": "<u8", "T": "<i8", "u16": "<u2", "u32": "<u4"}


_STRINGS = {"comment", "name", "partition", "tres_per_node", "nodes", "state_desc"}  # read as bytes (c_char_p)


class JobInfo(ct.Structure):
    _fields_ = [(name, ct.c_char_p if name in _STRINGS else _CT[kind])
                for name, kind in (f.split(":") for f in _LAYOUT.split())]


class JobInfoMsg(ct.Structure):
    _fields_ = [("last_backfill", ct.c_int64), ("last_update", ct.c_int64), ("record_count", ct.c_uint32),
                ("job_array", ct.c_void_p)]


# The columns read for every record (numpy, at the C offsets) and for lyasched's jobs only.
_KINDS = dict(f.split(":") for f in _LAYOUT.split())
_COLUMNS = ("job_id", "job_state", "submit_time", "comment", "user_id", "state_reason", "state_desc", "priority",
            "start_time", "end_time", "time_limit", "num_nodes", "nodes", "partition", "name", "tres_per_node")
_DTYPE = np.dtype({"names": list(_COLUMNS), "formats": [_NP[_KINDS[c]] for c in _COLUMNS],
                   "offsets": [getattr(JobInfo, c).offset for c in _COLUMNS], "itemsize": ct.sizeof(JobInfo)})
_TAG = TAG.encode()


def _time(v: int) -> float | None:
    """A time_t as the pyslurm path gives it: None for unset (0, NO_VAL, INFINITE)."""
    return None if v == 0 or v == NO_VAL or v == INFINITE else float(v)


def _str(b: bytes | None) -> str:
    """A C string as the pyslurm path gives it (PySlurm's ``cstr.to_unicode``, then ``or ""``):
    "" for NULL, "" and "None"."""
    return "" if not b or b == b"None" else b.decode("utf-8", "replace")


class LibslurmJobs:
    """``slurm_load_jobs`` and the fields lyasched keeps, read from libslurm's records."""

    def __init__(self) -> None:
        with open("/proc/self/maps") as f:
            path = next((ln.split()[-1] for ln in f if "/libslurm.so" in ln or "/libslurmfull" in ln), None)
        if path is None:
            raise RuntimeError("libslurm is not loaded")
        lib = ct.CDLL(path)
        lib.slurm_load_jobs.argtypes = [ct.c_int64, ct.POINTER(ct.POINTER(JobInfoMsg)), ct.c_uint16]
        lib.slurm_load_jobs.restype = ct.c_int
        lib.slurm_free_job_info_msg.argtypes = [ct.POINTER(JobInfoMsg)]
        lib.slurm_free_job_info_msg.restype = None
        lib.slurm_get_errno.restype = ct.c_int
        lib.slurm_strerror.argtypes = [ct.c_int]
        lib.slurm_strerror.restype = ct.c_char_p
        lib.slurm_job_state_string.argtypes = [ct.c_uint32]
        lib.slurm_job_state_string.restype = ct.c_char_p
        lib.slurm_job_reason_string.argtypes = [ct.c_int]
        lib.slurm_job_reason_string.restype = ct.c_char_p
        lib.slurm_api_version.restype = ct.c_long
        v = lib.slurm_api_version()
        self.version = ((v >> 16) & 0xFF, (v >> 8) & 0xFF, v & 0xFF)
        self.lib = lib
        self.layout_ok = self.version[0] == API_CURRENT  # the mirror describes this release's records
        self._states: dict[int, str] = {}
        self._reasons: dict[int, str] = {}
        self._gres: dict[bytes | None, tuple[int, str]] = {}  # tres_per_node -> (GPUs per node, type) (few distinct values)
        self._hosts: dict[bytes, tuple[str, ...]] = {}
        self._texts: dict[bytes | None, str] = {}  # partitions, job names

    def load(self, update_time: int = 0) -> tuple[int, Any] | None:
        """None when no job changed since ``update_time`` (the controller's time of an earlier
        answer, 0: always an answer); else (the controller's time of this answer, the message,
        to be read with `rows` and then freed with `free`)."""
        p = ct.POINTER(JobInfoMsg)()
        if self.lib.slurm_load_jobs(update_time, ct.byref(p), SHOW_ALL) != 0:
            err = self.lib.slurm_get_errno()
            if err == NO_CHANGE:
                return None
            raise RuntimeError((self.lib.slurm_strerror(err) or b"slurm_load_jobs failed").decode(errors="replace"))
        return int(p.contents.last_update), p

    def free(self, msg: Any) -> None:
        self.lib.slurm_free_job_info_msg(msg)

    def rows(self, msg: Any, final: dict[int, tuple]) -> list[tuple]:
        """SlurmJob fields (positional, as squeue's line gives them) of every lyasched job in the
        message, in Slurm's order. ``final``: fields of lyasched jobs already seen finished, by job
        id, reused without reading (a finished job never changes); finished ones are added."""
        m = msg.contents
        n = int(m.record_count)
        if n == 0:
            return []
        recs = (JobInfo * n).from_address(m.job_array)
        raw = memoryview((ct.c_char * (n * _DTYPE.itemsize)).from_address(m.job_array)).cast("B")
        cols = np.frombuffer(raw, dtype=_DTYPE, count=n)
        ids = cols["job_id"].tolist()
        submits = cols["submit_time"].tolist()
        has_comment = cols["comment"].tolist()
        out: list[Any] = []  # fields, or the record's index where they are still to be read
        todo: list[int] = []
        comments: list[bytes] = []
        for i, (jid, submit, cp) in enumerate(zip(ids, submits, has_comment)):
            t = final.get(jid)
            if t is not None and t[6] == _time(submit):  # else the id was reused (controller state lost)
                out.append(t)
            elif cp:
                c = recs[i].comment
                if c.startswith(_TAG):
                    todo.append(i)
                    comments.append(c)
                    out.append(i)
        if not todo:
            return out
        got = iter(self._fields(recs, cols[todo], todo, comments))
        for pos, v in enumerate(out):
            if type(v) is int:
                t = out[pos] = next(got)
                if t[3] in TERMINAL_STATES:
                    final[ids[v]] = t
        return out

    def _fields(self, recs: Any, sel: np.ndarray, todo: list[int], comments: list[bytes]) -> list[tuple]:
        users: dict[int, str] = {}
        states, reasons, gres, hosts, texts = self._states, self._reasons, self._gres, self._hosts, self._texts
        out: list[tuple] = []
        for (i, c, jid, submit, uid, js, sr, sd, prio, start, end, tl, nn, nodes_p) in zip(
                todo, comments, sel["job_id"].tolist(), sel["submit_time"].tolist(), sel["user_id"].tolist(),
                sel["job_state"].tolist(), sel["state_reason"].tolist(), sel["state_desc"].tolist(),
                sel["priority"].tolist(), sel["start_time"].tolist(), sel["end_time"].tolist(),
                sel["time_limit"].tolist(), sel["num_nodes"].tolist(), sel["nodes"].tolist()):
            r = recs[i]
            state = states.get(js)
            if state is None:
                state = states[js] = (self.lib.slurm_job_state_string(js) or b"UNKNOWN").decode()
            if sd:
                reason = _str(r.state_desc) or "None"
            else:
                known = reasons.get(sr)
                if known is None:
                    known = reasons[sr] = _str(self.lib.slurm_job_reason_string(sr)) or "None"
                reason = known
            user = users.get(uid)
            if user is None:
                if uid == NO_VAL or uid == INFINITE:
                    user = str(uid)
                else:
                    try:
                        user = pwd.getpwuid(uid).pw_name
                    except KeyError:
                        user = str(uid)
                users[uid] = user
            tres = r.tres_per_node
            known_gres = gres.get(tres)
            if known_gres is None:
                known_gres = (gpus_in_tres(_str(tres)), gpu_type_in_tres(_str(tres)))
                if len(gres) < 4096:
                    gres[tres] = known_gres
            gpn, gtype = known_gres
            nodes: tuple[str, ...] = ()
            if nodes_p:
                b = r.nodes
                if b and b != b"None":
                    cached = hosts.get(b)
                    if cached is None:
                        cached = tuple(expand_hostlist(_str(b)))
                        if len(hosts) < 4096:
                            hosts[b] = cached
                    nodes = cached
            part, name = r.partition, r.name
            p_s = texts.get(part)
            if p_s is None:
                p_s = _str(part)
                if len(texts) < 4096:
                    texts[part] = p_s
            n_s = texts.get(name)
            if n_s is None:
                n_s = _str(name)
                if len(texts) < 4096:
                    texts[name] = n_s
            out.append((
                str(jid), user, None if uid == NO_VAL or uid == INFINITE else uid, state, reason,
                0 if prio == NO_VAL or prio == INFINITE else prio, _time(submit),
                None if state == "PENDING" else _time(start), _time(end) if state in TERMINAL_STATES else None,
                math.inf if tl == 0 or tl == NO_VAL or tl == INFINITE else float(tl) * 60.0,
                1 if nn == 0 or nn == NO_VAL else nn, gpn, nodes, p_s, _str(c), n_s, {}, gtype,
            ))
        return out
