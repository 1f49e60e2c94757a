"""Reading cluster state from Slurm: the queries of the CLI backend (lyasched.slurm.cli).

Pure functions only: argv builders and parsers of `squeue` / `scontrol show node|job|config` /
`sacct` output, tested by feeding recorded strings (tests/data/). `SlurmCLI.run` executes the
argv. The commands that change jobs are in lyasched.slurm.commands, submission in lyasched.slurm.submit.

Why `squeue -o` with a fixed format rather than `--json`: Slurm 22.05's `--json` goes through
the openapi v0.0.38 plugin, whose schema changes between releases; the fixed `-o` format is
stable from 20.x to 24.x and cheap to parse. The free-text fields go last: the comment (a
lyasched cost summary never contains ``|``), then the job name (anything, so it is the rest).
"""

from __future__ import annotations

import math
import re
import time
from typing import Iterable, Sequence

from lyasched.slurm.types import (  # noqa: F401 - re-exported: the parsers' results
    SERVICE_HOLD_REASONS,
    TAG,
    TERMINAL_STATES,
    UNUSABLE_NODE_FLAGS,
    AccountingRecord,
    ClusterConfig,
    NodeInfo,
    ParseError,
    SlurmJob,
)

# squeue -o fields, in order; the last two (comment, name) are free text.
SQUEUE_FIELDS: tuple[tuple[str, str], ...] = (
    ("job_id", "%i"),
    ("user", "%u"),
    ("unix_uid", "%U"),
    ("state", "%T"),
    ("reason", "%r"),
    ("priority", "%Q"),
    ("submit_time", "%V"),
    ("start_time", "%S"),
    ("end_time", "%e"),
    ("time_limit", "%l"),
    ("num_nodes", "%D"),
    ("tres_per_node", "%b"),
    ("nodes", "%N"),
    ("partition", "%P"),
    ("comment", "%k"),
    ("name", "%j"),
)
SEP = "|"
SQUEUE_FORMAT = SEP.join(code for _, code in SQUEUE_FIELDS)


# ---------------------------------------------------------------- small value parsers


def parse_time(value: str) -> float | None:
    """Slurm timestamp (``2026-11-22T13:50:01``, local time) to epoch seconds; None for N/A, Unknown."""
    v = value.strip()
    if not v or v in {"N/A", "Unknown", "None", "(null)", "0"}:
        return None
    try:
        return time.mktime(time.strptime(v, "%Y-%m-%dT%H:%M:%S"))
    except ValueError as e:
        raise ParseError(f"bad Slurm time {value!r}") from e


def format_time(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def parse_duration(value: str) -> float:
    """Slurm duration (``[days-]hours:minutes:seconds``, ``minutes:seconds``, ``minutes``) to seconds.

    ``UNLIMITED``/``INFINITE``/``NOT_SET`` are ``inf``.
    """
    v = value.strip()
    if v.upper() in {"UNLIMITED", "INFINITE", "NOT_SET", "PARTITION_LIMIT", "N/A", "NONE", ""}:
        return math.inf
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", v)
    if not m:
        raise ParseError(f"bad Slurm duration {value!r}")
    days, a, b, c = m.groups()
    d = int(days or 0)
    if days is not None:  # days-hours[:minutes[:seconds]]
        h, mi, s = int(a), int(b or 0), int(c or 0)
    elif c is not None:  # hours:minutes:seconds
        h, mi, s = int(a), int(b), int(c)
    elif b is not None:  # minutes:seconds
        h, mi, s = 0, int(a), int(b)
    else:  # minutes
        h, mi, s = 0, int(a), 0
    return float(((d * 24 + h) * 60 + mi) * 60 + s)


def gpus_in_tres(value: str) -> int:
    """GPU count in a TRES/GRES string: ``gres:gpu:4``, ``gpu:tesla:2(S:0)``, ``cpu=1,gres/gpu=2``.

    Typed and untyped entries of one string (``gres/gpu=4,gres/gpu:a100=4``) describe the same
    GPUs, so the untyped total wins when present.
    """
    v = value.strip()
    if not v or v in {"(null)", "N/A"}:
        return 0
    untyped, typed = None, 0
    for part in re.split(r",(?![^()]*\))", v):
        part = re.sub(r"\([^()]*\)$", "", part.strip())
        m = re.fullmatch(r"gres/gpu(?::[^=]+)?=(\d+)", part)
        if m:
            if ":" in part.split("=")[0]:
                typed += int(m.group(1))
            else:
                untyped = int(m.group(1))
            continue
        fields = part.split(":")
        if fields and fields[0] == "gres":
            fields = fields[1:]
        if fields and fields[0] == "gpu":
            if len(fields) == 1:
                count = 1
            elif fields[-1].isdigit():
                count = int(fields[-1])
            else:
                count = 1  # "gpu:tesla" means one GPU of that type
            if len(fields) <= 2:
                untyped = (untyped or 0) + count
            else:
                typed += count
    return untyped if untyped is not None else typed


def gpu_type_in_tres(value: str) -> str:
    """The GPU type a TRES/GRES request names: ``gres:gpu:a100:2``, ``gres/gpu:a100=2``,
    ``gpu:a100:2(S:0)`` give ``a100``; an untyped one (``gres:gpu:2``, ``gres/gpu=2``) gives ``""``."""
    v = value.strip()
    if not v or v in {"(null)", "N/A"}:
        return ""
    for part in re.split(r",(?![^()]*\))", v):
        part = re.sub(r"\([^()]*\)$", "", part.strip())
        m = re.fullmatch(r"gres/gpu:([^=:]+)=\d+", part)
        if m:
            return m.group(1)
        fields = part.split(":")
        if fields and fields[0] == "gres":
            fields = fields[1:]
        if len(fields) >= 2 and fields[0] == "gpu" and not fields[1].isdigit() and fields[1] != "(null)":
            return fields[1]
    return ""


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a Slurm hostlist (``n[1-3,5],gpu01``, ``n[01-02]``) into node names, in order."""
    v = hostlist.strip()
    if not v or v in {"(null)", "None", "N/A"}:
        return []
    out: list[str] = []
    for item in re.findall(r"[^,\[]*(?:\[[^\]]*\][^,\[]*)*", v):
        if not item:
            continue
        names = [""]
        for prefix, ranges in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
            if not prefix and not ranges:
                continue
            expanded: list[str] = []
            if ranges:
                for r in ranges.split(","):
                    if "-" in r:
                        lo, hi = r.split("-", 1)
                        width = len(lo)
                        expanded += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
                    else:
                        expanded.append(r)
            else:
                expanded = [""]
            names = [n + prefix + e for n in names for e in expanded]
        out += names
    return out


def compress_hostlist(names: Sequence[str]) -> str:
    """Node names joined by commas (Slurm accepts a plain list everywhere a hostlist goes)."""
    return ",".join(names)


def parse_kv_line(line: str) -> dict[str, str]:
    """`scontrol show ... -o` prints ``Key=value`` pairs separated by spaces; values may contain
    spaces (``OS=Linux 6.1.0-18 #1 SMP``) but a new key always starts with ``<space>Key=``."""
    out: dict[str, str] = {}
    matches = list(re.finditer(r"(?:^|(?<= ))([A-Za-z][A-Za-z0-9_/:.]*)=", line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end() : end].rstrip()
    return out


# ---------------------------------------------------------------- nodes


def node_args() -> list[str]:
    return ["scontrol", "show", "node", "-o", "-d"]


def parse_nodes(text: str) -> list[NodeInfo]:
    """Parse `scontrol show node -o [-d]`: GPUs total from CfgTRES (or Gres), in use from
    GresUsed (``-d``), else AllocTRES.

    GresUsed is the node's GRES state the scheduler allocates from. AllocTRES can keep a typed GPU
    after its job ended (Slurm 22.05, typed Gres, after a node was killed mid-job: an idle node
    with ``GresUsed=gpu:a100:0(IDX:N/A)`` and ``AllocTRES=gres/gpu:a100=1``): taking the larger
    of the two hid that GPU for good, and a job needing every GPU was never started."""
    nodes: list[NodeInfo] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("No nodes"):
            continue
        kv = parse_kv_line(line)
        if "NodeName" not in kv:
            raise ParseError(f"no NodeName in scontrol output line: {line[:80]!r}")
        # CfgTRES counts GPUs only when AccountingStorageTRES lists gres/gpu; Gres always does.
        total = max(gpus_in_tres(kv.get("CfgTRES", "")), gpus_in_tres(kv.get("Gres", "")))
        alloc = gpus_in_tres(kv["GresUsed"]) if "GresUsed" in kv else gpus_in_tres(kv.get("AllocTRES", ""))
        m = re.match(r"(?:gres:)?gpu:([A-Za-z][^:(,]*):", kv.get("Gres", ""))
        gpu_type = m.group(1) if m and m.group(1) != "(null)" else ""
        parts = tuple(p for p in kv.get("Partitions", "").split(",") if p and p != "(null)")
        feats = kv.get("ActiveFeatures", kv.get("AvailableFeatures", kv.get("Features", "")))
        nodes.append(
            NodeInfo(
                name=kv["NodeName"],
                state=kv.get("State", "UNKNOWN"),
                gpus_total=total,
                gpus_alloc=alloc,
                partitions=parts,
                reason=kv.get("Reason", ""),
                gpu_type=gpu_type,
                features=features_of(feats),
            )
        )
    return nodes


def features_of(text: str) -> tuple[str, ...]:
    """A node's Features (``a100,ib``) as names; () for none or ``(null)``."""
    return tuple(f for f in (x.strip() for x in text.split(",")) if f and f != "(null)")


# ---------------------------------------------------------------- jobs


def squeue_args(user: str | None = None, job_ids: Iterable[str] = ()) -> list[str]:
    """`squeue` for every job in any state it still knows (finished ones stay for MinJobAge)."""
    args = ["squeue", "--noheader", "--states=all", "-o", SQUEUE_FORMAT]
    if user:
        args += ["--user", user]
    ids = list(job_ids)
    if ids:
        args += ["--jobs", ",".join(ids)]
    return args


def _int(v: str, default: int = 0) -> int:
    v = v.strip()
    if v.isascii() and v.isdigit():  # "²".isdigit() is True too, but int() refuses it
        return int(v)
    try:
        return int(float(v))
    except (ValueError, OverflowError):  # "inf"
        return default


def _start_time(state: str, value: str) -> float | None:
    # For pending jobs squeue prints the *expected* start time: not a start.
    if state == "PENDING":
        return None
    return parse_time(value)


def _end_time(state: str, value: str) -> float | None:
    # For running jobs EndTime is start + time limit (a projection): not an end.
    if state not in TERMINAL_STATES:
        return None
    return parse_time(value)


_JOB_LINE = re.compile(r"^\s*\d+(_\d+|_\[[^]]*\])?\|")


def parse_squeue(text: str, lyasched_only: bool = True, memo: dict[str, SlurmJob | None] | None = None) -> list[SlurmJob]:
    """Parse output of `squeue_args()`. With ``lyasched_only`` jobs without the tag are dropped
    (their comments may contain anything, so only tagged lines are parsed strictly).

    ``memo`` (the caller's, one per kind of listing): a line already parsed in the previous call
    is not parsed again (the result is a function of the line's text; a slot's listing repeats
    nearly every line: held jobs, and finished ones for MinJobAge). It keeps this call's lines only."""
    fixed = len(SQUEUE_FIELDS) - 2
    jobs: list[SlurmJob] = []
    # A job name or comment may contain newlines (any user can submit one): a line that does not
    # start with a job id continues the previous job's free-text fields, instead of failing the
    # whole listing (which stopped every slot for MinJobAge). A job id listed twice means a
    # name forged to look like another job's line: neither is trusted.
    lines: list[str] = []
    for line in text.splitlines():
        if lines and not _JOB_LINE.match(line):
            lines[-1] += "\n" + line
        elif line.strip():
            lines.append(line)
    ids = [ln.split(SEP, 1)[0].strip() for ln in lines]
    twice = {i for i in ids if ids.count(i) > 1} if len(set(ids)) != len(ids) else set()
    seen: dict[str, SlurmJob | None] = {}
    for line in lines:
        if twice and line.split(SEP, 1)[0].strip() in twice:
            continue
        if memo is not None:
            if line in memo:
                hit = memo[line]
                seen[line] = hit
                if hit is not None:
                    jobs.append(hit)
                continue
            seen[line] = None  # until parsed below as a lyasched job
        parts = line.split(SEP, fixed)
        if len(parts) != fixed + 1:
            raise ParseError(f"squeue line has {len(parts)} fields, expected {fixed + 2}: {line[:120]!r}")
        rest = parts[fixed]
        if rest.startswith(TAG):
            comment, _, name = rest.partition(SEP)
        else:
            if lyasched_only:
                continue
            comment, _, name = rest.rpartition(SEP)
        rec = dict(zip((k for k, _ in SQUEUE_FIELDS[:fixed]), parts[:fixed]))
        state = rec["state"].strip()
        if comment == "(null)":
            comment = ""
        jobs.append(
            SlurmJob(
                job_id=rec["job_id"].strip(),
                user=rec["user"].strip(),
                unix_uid=_int(rec["unix_uid"], -1) if rec["unix_uid"].strip().isdigit() else None,
                state=state,
                reason=rec["reason"].strip(),
                priority=_int(rec["priority"]),
                submit_time=parse_time(rec["submit_time"]),
                start_time=_start_time(state, rec["start_time"]),
                end_time=_end_time(state, rec["end_time"]),
                time_limit=parse_duration(rec["time_limit"]),
                num_nodes=_int(rec["num_nodes"], 1),
                gpus_per_node=gpus_in_tres(rec["tres_per_node"]),
                nodes=tuple(expand_hostlist(rec["nodes"])),
                partition=rec["partition"].strip(),
                comment=comment,
                name=name,
                gpu_type=gpu_type_in_tres(rec["tres_per_node"]),
            )
        )
        if memo is not None:
            seen[line] = jobs[-1]
    if memo is not None:
        memo.clear()
        memo.update(seen)
    return jobs


def show_job_args(job_id: str) -> list[str]:
    return ["scontrol", "show", "job", "-o", "-d", str(job_id)]


def parse_show_job(text: str) -> list[SlurmJob]:
    """Parse `scontrol show job -o [-d]`. The comment is matched up to the next known key, so a
    lyasched summary (no spaces) is read exactly."""
    jobs: list[SlurmJob] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("No jobs"):
            continue
        kv = parse_kv_line(line)
        if "JobId" not in kv:
            raise ParseError(f"no JobId in scontrol output line: {line[:80]!r}")
        state = kv.get("JobState", "UNKNOWN")
        user = kv.get("UserId", "")
        m = re.fullmatch(r"([^()]*)\((\d+)\)", user)
        uname, unix_uid = (m.group(1), int(m.group(2))) if m else (user, None)
        tres = kv.get("TresPerNode", "")
        gpn = gpus_in_tres(tres)
        num_nodes = _int(kv.get("NumNodes", "1").split("-")[0], 1)
        if gpn == 0 and kv.get("AllocTRES"):
            total = gpus_in_tres(kv["AllocTRES"])
            gpn = total // max(1, num_nodes)
        comment = kv.get("Comment", "")
        if comment == "(null)":
            comment = ""
        nodelist = kv.get("NodeList", "")
        jobs.append(
            SlurmJob(
                job_id=kv["JobId"],
                user=uname,
                unix_uid=unix_uid,
                state=state,
                reason=kv.get("Reason", "None"),
                priority=_int(kv.get("Priority", "0")),
                submit_time=parse_time(kv.get("SubmitTime", "")),
                start_time=_start_time(state, kv.get("StartTime", "")),
                end_time=_end_time(state, kv.get("EndTime", "")),
                time_limit=parse_duration(kv.get("TimeLimit", "UNLIMITED")),
                num_nodes=num_nodes,
                gpus_per_node=gpn,
                nodes=tuple(expand_hostlist(nodelist)),
                partition=kv.get("Partition", ""),
                comment=comment,
                name=kv.get("JobName", ""),
                extra=kv,
                gpu_type=gpu_type_in_tres(tres),
            )
        )
    return jobs


# ---------------------------------------------------------------- accounting


def config_args() -> list[str]:
    return ["scontrol", "show", "config"]


def parse_config(show_config: str) -> ClusterConfig:
    """The settings lyasched needs from `scontrol show config` (version, accounting, submit plugins)."""
    kv: dict[str, str] = {}
    for line in show_config.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            kv[key.strip()] = value.strip()
    plugins = tuple(p.strip() for p in kv.get("JobSubmitPlugins", "").split(",") if p.strip() and p.strip() != "(null)")
    return ClusterConfig(version=kv.get("SLURM_VERSION", ""), accounting=accounting_enabled(show_config),
                         submit_plugins=plugins)


def accounting_enabled(show_config: str) -> bool:
    """True when slurmdbd (or another accounting store) is configured, so `sacct` can answer."""
    for line in show_config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "AccountingStorageType":
            v = value.strip().lower()
            return bool(v) and not v.endswith("/none") and v != "(null)"
    return False


SACCT_FIELDS = ("JobID", "User", "State", "Submit", "Start", "End", "ElapsedRaw", "NNodes", "AllocTRES")


def sacct_args(job_ids: Iterable[str]) -> list[str]:
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        "--allusers",
        "--format",
        ",".join(SACCT_FIELDS),
        "--jobs",
        ",".join(job_ids),
    ]


def history_args(since: str, until: str | None, partition: str | None, fields: Sequence[str]) -> list[str]:
    """`Slurm.history`'s sacct: allocations only (no steps), every user, every run of requeued jobs
    (--duplicates), the header kept (the reader finds the fields by name)."""
    args = ["sacct", "--parsable2", "--allusers", "--allocations", "--duplicates",
            f"--format={','.join(fields)}", f"--starttime={since}"]
    if until:
        args.append(f"--endtime={until}")
    if partition:
        args.append(f"--partition={partition}")
    return args


def parse_sacct(text: str) -> list[AccountingRecord]:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.split("|")
        if len(f) < len(SACCT_FIELDS):
            raise ParseError(f"sacct line has {len(f)} fields, expected {len(SACCT_FIELDS)}: {line[:120]!r}")
        rec = dict(zip(SACCT_FIELDS, f))
        state = rec["State"].split()[0] if rec["State"].split() else ""
        raw = rec["ElapsedRaw"].strip()
        elapsed = float(raw) if raw.isascii() and raw.isdigit() else None
        out.append(
            AccountingRecord(
                job_id=rec["JobID"],
                state=state,
                start_time=parse_time(rec["Start"]),
                end_time=parse_time(rec["End"]),
                elapsed=elapsed,
            )
        )
    return out

