"""Pure parser of `sacct --parsable2` text into typed accounting records.

No I/O and no interpretation beyond types: which records become replayed jobs is
`lyasched.whatif.history`'s business, which become run-time history `lyasched.estimates.sacct`'s.
Any value that does not parse stops the whole read with a `SacctError` naming the line and the
field (`lyasched whatif` turns it into one line, exit 2; the live service logs it).
docs/whatif.md lists the fields and what each awkward case means.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from lyasched.slurm.query import ParseError, parse_duration

# The --format `lyasched whatif` asks sacct for, in this order; a saved file's header must name
# all of them but OPTIONAL (in any order).
FIELDS: tuple[str, ...] = (
    "JobID", "User", "Account", "Partition", "Submit", "Eligible", "Start", "End",
    "ElapsedRaw", "State", "NNodes", "NodeList", "AllocTRES", "ReqTRES", "Timelimit",
)
SACCT_FORMAT = ",".join(FIELDS)
# `Elapsed` ([D-]HH:MM:SS) is accepted in place of `ElapsedRaw` (seconds) in a saved file.
ALTERNATIVES = {"ElapsedRaw": "Elapsed"}
# Fields a history may lack (a site's own --format, an older saved file); what stands in for each
# is said in the report (docs/whatif.md): Eligible -> Submit; NodeList -> the cluster from
# --nodes/--gpus-per-node or scontrol; Timelimit -> no limit; ReqTRES -> only AllocTRES is read.
OPTIONAL: tuple[str, ...] = ("Eligible", "NodeList", "Timelimit", "ReqTRES")
# Read when the header has them, never required and never reported missing: the job's name keys
# the run-time estimates of `whatif --managed` (lyasched.estimates, docs/estimates.md).
EXTRA: tuple[str, ...] = ("JobName",)

_NO_TIME = frozenset({"", "Unknown", "None", "N/A", "(null)"})
_STATE = re.compile(r"[A-Z][A-Z_]*")
_INT = re.compile(r"\d+")


class SacctError(ValueError):
    """sacct text that cannot be read; the message is one line naming the line and field."""

    def __init__(self, source: str, line: int, field: str | None, message: str) -> None:
        where = f"{source} line {line}" + (f": {field}" if field else "")
        super().__init__(f"{where}: {message}")
        self.line, self.field = line, field


@dataclass(frozen=True)
class SacctRecord:
    """One allocation line of sacct (a job, an array task, a heterogeneous component, or one
    run of a requeued job when sacct was given --duplicates). Times are epoch seconds."""

    line: int
    job_id: str
    user: str
    account: str
    partition: str
    submit: float
    eligible: float | None  # None: Unknown (never became eligible)
    start: float | None  # None: Unknown/None (never started)
    end: float | None  # None: Unknown (still running or pending)
    elapsed: float  # seconds the allocation ran (suspended time excluded)
    state: str  # first word: "CANCELLED by 1000" -> "CANCELLED"
    nnodes: int
    nodelist: str  # raw hostlist ("gpu[01-02]"), "None assigned" when it never ran
    alloc_gpus: int
    req_gpus: int
    has_alloc: bool  # AllocTRES non-empty: an allocation existed
    gpu_type: str  # "a100" from gres/gpu:a100=4; "" when untyped
    time_limit: float | None  # None: UNLIMITED (or not recorded: see ``unrecorded``)
    # of Eligible, NodeList, Timelimit: those with no value on this line (no such column, an empty
    # value, Eligible Unknown, NodeList "None assigned"); what stands in for them is the history's
    unrecorded: frozenset[str] = frozenset()
    name: str = ""  # JobName when recorded, else ""
    req_gpu_type: str = ""  # the type its request named (ReqTRES gres/gpu:a100=4); "" untyped or not recorded


@dataclass(frozen=True)
class SacctText:
    records: tuple[SacctRecord, ...]
    steps: int  # job-step lines (JobID with a dot: 12.batch, 12.0, 12.extern), skipped
    lines: int
    missing: tuple[str, ...] = ()  # optional fields (OPTIONAL) the header lacks


def parse_time(text: str) -> float | None:
    """Slurm's ``2026-11-22T13:50:01`` (local time, as sacct prints it) to epoch seconds."""
    v = text.strip()
    if v in _NO_TIME:
        return None
    return datetime.fromisoformat(v).timestamp()


def parse_gpus(tres: str) -> tuple[int, str]:
    """GPUs in a TRES string (``billing=8,cpu=8,gres/gpu:a100=4,gres/gpu=4,mem=64G,node=1``).

    The untyped ``gres/gpu=N`` is the total when present; otherwise the typed entries
    (``gres/gpu:a100=2,gres/gpu:v100=2``) are summed. Returns (count, first type or "").
    """
    untyped: int | None = None
    typed = 0
    kind = ""
    for part in tres.split(","):
        key, _, val = part.strip().partition("=")
        if key != "gres/gpu" and not key.startswith("gres/gpu:"):
            continue
        if not _INT.fullmatch(val):
            raise ValueError(f"{part.strip()!r}: GPU count is not a whole number")
        if key == "gres/gpu":
            untyped = int(val)
        else:
            typed += int(val)
            kind = kind or key.split(":", 1)[1]
    return (untyped if untyped is not None else typed), kind


def _header(line: str, source: str) -> dict[str, int]:
    names = line.rstrip("\n").split("|")
    if names and names[-1] == "":  # --parsable (not 2) ends every line with "|"
        names = names[:-1]
    index = {n.strip().lower(): i for i, n in enumerate(names)}
    if "jobid" not in index:
        raise SacctError(source, 1, None, "not sacct --parsable2 output with a header: the first line must name "
                         f"the fields ({'|'.join(FIELDS[:3])}|...); record it without --noheader")
    cols: dict[str, int] = {}
    missing = []
    for f in FIELDS:
        i = index.get(f.lower())
        if i is None and f in ALTERNATIVES:
            i = index.get(ALTERNATIVES[f].lower())
            if i is not None:
                cols[ALTERNATIVES[f]] = i
                continue
        if i is None:
            if f not in OPTIONAL:
                missing.append(f)
        else:
            cols[f] = i
    for f in EXTRA:
        if f.lower() in index:
            cols[f] = index[f.lower()]
    if missing:
        raise SacctError(source, 1, None, f"header lacks field(s) {', '.join(missing)}; record with "
                         f"sacct --parsable2 --allusers --allocations --duplicates --format={SACCT_FORMAT}")
    cols["_width"] = len(names)
    return cols


def parse_sacct(text: str, source: str = "sacct") -> SacctText:
    """Parse the whole text (header first); raise SacctError on the first bad value."""
    lines = text.removeprefix("\ufeff").split("\n")  # a byte-order mark from an editor
    first = next((k for k, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        raise SacctError(source, 1, None, "empty: no sacct header and no records")
    cols = _header(lines[first], source)
    width = cols.pop("_width")
    absent = tuple(f for f in OPTIONAL if f not in cols)
    parsable1 = lines[first].rstrip().endswith("|")
    records: list[SacctRecord] = []
    steps = 0
    for k in range(first + 1, len(lines)):
        raw = lines[k].rstrip("\r")
        if not raw.strip():
            continue
        n = k + 1
        f = raw.split("|")
        if parsable1 and f and f[-1] == "":
            f = f[:-1]
        if len(f) != width:
            raise SacctError(source, n, None, f"{len(f)} fields where the header names {width} "
                             "(not sacct --parsable2 output, or a value contains '|')")
        job_id = f[cols["JobID"]].strip()
        if not job_id:
            raise SacctError(source, n, "JobID", "empty")
        if "." in job_id:
            steps += 1
            continue
        records.append(_record(f, cols, n, job_id, source))
    return SacctText(records=tuple(records), steps=steps, lines=len(lines), missing=absent)


def _record(f: list[str], cols: dict[str, int], n: int, job_id: str, source: str) -> SacctRecord:
    def get(name: str) -> str:  # an optional field the header lacks reads as empty
        return f[cols[name]].strip() if name in cols else ""

    def bad(name: str, why: str) -> SacctError:
        return SacctError(source, n, name, why)

    def time_of(name: str, required: bool = False) -> float | None:
        v = get(name)
        try:
            t = parse_time(v)
        except ValueError:
            raise bad(name, f"cannot parse time {v!r} (expected YYYY-MM-DDTHH:MM:SS; "
                      "record with SLURM_TIME_FORMAT=standard)") from None
        if t is None and required:
            raise bad(name, f"no time ({v!r})")
        return t

    submit = time_of("Submit", required=True)
    eligible, start, end = time_of("Eligible"), time_of("Start"), time_of("End")
    if "ElapsedRaw" in cols:
        v = get("ElapsedRaw")
        if not _INT.fullmatch(v):
            raise bad("ElapsedRaw", f"{v!r} is not a whole number of seconds")
        elapsed = float(v)
    else:
        v = get("Elapsed")
        try:
            elapsed = parse_duration(v)
        except ParseError:
            elapsed = math.nan
        if not math.isfinite(elapsed):
            raise bad("Elapsed", f"cannot parse duration {v!r} (expected [D-]HH:MM:SS)")
    words = get("State").split()
    if not words or not _STATE.fullmatch(words[0]):
        raise bad("State", f"not a Slurm job state: {get('State')!r}")
    v = get("NNodes")
    if not _INT.fullmatch(v):
        raise bad("NNodes", f"{v!r} is not a whole number")
    try:
        alloc, kind = parse_gpus(get("AllocTRES"))
    except ValueError as e:
        raise bad("AllocTRES", str(e)) from None
    try:
        req, rkind = parse_gpus(get("ReqTRES"))
    except ValueError as e:
        raise bad("ReqTRES", str(e)) from None
    tl = get("Timelimit")
    try:
        limit = parse_duration(tl)
    except ParseError:
        raise bad("Timelimit", f"cannot parse duration {tl!r}") from None
    unrecorded = set()
    if eligible is None:
        unrecorded.add("Eligible")
    if get("NodeList") in ("", "None assigned", "(null)"):
        unrecorded.add("NodeList")
    if not tl:
        unrecorded.add("Timelimit")
    if start is not None and end is not None and end < start:
        raise bad("End", f"{get('End')} is before Start {get('Start')}")
    return SacctRecord(
        line=n,
        job_id=job_id,
        user=get("User"),
        account=get("Account"),
        partition=get("Partition"),
        submit=submit,  # type: ignore[arg-type]
        eligible=eligible,
        start=start,
        end=end,
        elapsed=elapsed,
        state=words[0],
        nnodes=int(v),
        nodelist=get("NodeList"),
        alloc_gpus=alloc,
        req_gpus=req,
        has_alloc=bool(get("AllocTRES")),
        gpu_type=kind or rkind,
        time_limit=limit if math.isfinite(limit) else None,
        unrecorded=frozenset(unrecorded),
        name=get("JobName"),
        req_gpu_type=rkind,
    )
