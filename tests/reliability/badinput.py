"""Bad input (issue 5): one table of malformed inputs to every lyasched entry point.

Each case must end with a non-zero exit and ONE clear error line, submit nothing and write
nothing. The table is shared: tests/test_bad_input.py runs it as parametrized tests and
benchmarks/reliability.py imports ``run_bad_inputs()`` for the tried/refused figure.

Tools (column ``tool``):
  lyasub   `lyasub ARGS` in-process (click CliRunner), fake Slurm tools on PATH recording calls
  lyastat  `lyastat ARGS` in-process; a real service database, a garbage file, an empty one
  config   `lyasched serve --config FILE --once` with FILE = the case's bytes
  trace    `lyasched replay --workload FILE --policies fifo --out DIR` with FILE = the case's bytes
  plugin   real `sbatch --comment SUMMARY` as the test user against the job_submit.lua plugin
           (needs the Slurm test cluster and root: runs only when asked)

Checks per case: exit status != 0; stderr has exactly one non-empty line (plugin: exactly one
`lyasched:` line; sbatch adds its own "Batch job submission failed" line) that contains the
expected fragment; no Python traceback; no Slurm call that submits or changes a job (fake
tools' call log; plugin: squeue of the test user shows no job of the case's unique name,
before and after); the sandbox directory is byte-for-byte unchanged (no partial database rows,
no partial --out files, no file created by a shell metacharacter).

    python -m tests.reliability.badinput [--json] [--plugin]
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .users import TEST_USER, as_user

FAKE_SLURM = Path(__file__).resolve().parents[1] / "fake_slurm.py"  # tests/fake_slurm.py, run as the Slurm tools
NONUTF8 = b"\xff\xfe".decode("utf-8", "surrogateescape")  # how Python sees non-UTF-8 argv bytes


@dataclass(frozen=True)
class Case:
    """One malformed input. ``args`` may use {work} (the sandbox) and {file} (``data`` written to a file)."""

    name: str
    tool: str
    args: tuple[str, ...]
    expect: str  # fragment of the one error line
    data: bytes | None = None


def _csv(text: str) -> bytes:
    return text.encode()


TRAIN = "{work}/train.py"
LB = ("--db", "{work}/costs.db", "--no-profile")  # lyasub: cost table in the sandbox, no profiling job
OK = ("--model", "mlp", "--global-batch", "8", "--iterations", "5")
GOOD_SUMMARY = (
    ("id", "badinput-0001"), ("sig", "mlp:cpu"), ("b", "8"), ("it", "5"), ("gmin", "1"), ("gmax", "4"),
    ("a", "0.01"), ("bt", "1e-05"), ("p", "1000"), ("bpp", "4"), ("m0", "1e6"), ("m1", "10.0"), ("src", "m"),
)


def summary(**over: str | None) -> str:
    """A valid cost summary with some fields replaced (None drops the field)."""
    d = dict(GOOD_SUMMARY)
    d.update(over)
    return "lyasched:v1;" + ";".join(f"{k}={v}" for k, v in d.items() if v is not None)


def _lyasub(name: str, expect: str, *args: str) -> Case:
    return Case(name, "lyasub", (*LB, *args), expect)


CASES: tuple[Case, ...] = (
    # ---------------------------------------------------------------- lyasub
    _lyasub("lyasub-batch-zero", "--global-batch must be in 1..1048576", "--model", "mlp", "--global-batch", "0",
            "--iterations", "5", "--", TRAIN),
    _lyasub("lyasub-batch-negative", "--global-batch must be in", "--model", "mlp", "--global-batch", "-64",
            "--iterations", "5", "--", TRAIN),
    _lyasub("lyasub-batch-huge", "--global-batch must be in", "--model", "mlp", "--global-batch",
            "99999999999999999999999999", "--iterations", "5", "--", TRAIN),
    _lyasub("lyasub-batch-float", "not a valid integer", "--model", "mlp", "--global-batch", "6.4e1",
            "--iterations", "5", "--", TRAIN),
    _lyasub("lyasub-iterations-zero", "--iterations must be", "--model", "mlp", "--global-batch", "8",
            "--iterations", "0", "--", TRAIN),
    _lyasub("lyasub-iterations-huge", "--iterations must be", "--model", "mlp", "--global-batch", "8",
            "--iterations", str(10**30), "--", TRAIN),
    _lyasub("lyasub-epochs-nan", "--epochs must be > 0", "--model", "mlp", "--global-batch", "8", "--epochs", "nan",
            "--dataset-size", "100", "--", TRAIN),
    _lyasub("lyasub-epochs-inf", "--epochs must be > 0", "--model", "mlp", "--global-batch", "8", "--epochs", "inf",
            "--dataset-size", "100", "--", TRAIN),
    _lyasub("lyasub-epochs-negative", "--epochs must be > 0", "--model", "mlp", "--global-batch", "8",
            "--epochs", "-2", "--dataset-size", "100", "--", TRAIN),
    _lyasub("lyasub-epochs-overflow", "iterations", "--model", "mlp", "--global-batch", "1", "--epochs", "1e308",
            "--dataset-size", "1000000000", "--", TRAIN),
    _lyasub("lyasub-dataset-zero", "--dataset-size must be > 0", "--model", "mlp", "--global-batch", "8",
            "--epochs", "1", "--dataset-size", "0", "--", TRAIN),
    _lyasub("lyasub-min-gpus-negative", "--min-gpus must be >= 1", *OK, "--min-gpus", "-1", "--", TRAIN),
    _lyasub("lyasub-max-gpus-zero", "--max-gpus must be >= 1", *OK, "--max-gpus", "0", "--", TRAIN),
    _lyasub("lyasub-max-gpus-huge", "above 1024", *OK, "--max-gpus", "100000", "--", TRAIN),
    _lyasub("lyasub-cpus-per-gpu-zero", "--cpus-per-gpu", *OK, "--cpus-per-gpu", "0", "--", TRAIN),
    _lyasub("lyasub-unknown-model", "unknown model", "--model", "nosuchnet", "--global-batch", "8",
            "--iterations", "5", "--", TRAIN),
    _lyasub("lyasub-model-shell", "model", "--model", "$(touch {work}/pwned)", "--global-batch", "8",
            "--iterations", "5", "--", TRAIN),
    _lyasub("lyasub-model-nonutf8", "model", "--model", "res" + NONUTF8, "--global-batch", "8",
            "--iterations", "5", "--", TRAIN),
    _lyasub("lyasub-model-arg-code", "bad model argument", *OK, "--model-arg", "width=__import__('os').system('touch pwned')",
            "--", TRAIN),
    _lyasub("lyasub-missing-script", "does not exist", *OK, "--", "{work}/nope.py"),
    _lyasub("lyasub-script-shell", "does not exist", *OK, "--", "train.py; touch {work}/pwned"),
    _lyasub("lyasub-script-nonutf8", "does not exist", *OK, "--", "{work}/tr" + NONUTF8 + ".py"),
    _lyasub("lyasub-script-directory", "is not a file", *OK, "--", "{work}"),
    _lyasub("lyasub-arg-nul", "NUL", *OK, "--", TRAIN, "a\x00b"),
    _lyasub("lyasub-uid-shell", "--uid", *OK, "--uid", "$(id)`id`;x", "--", TRAIN),
    _lyasub("lyasub-uid-long", "--uid", *OK, "--uid", "a" * 200, "--", TRAIN),
    _lyasub("lyasub-time-garbage", "--time", *OK, "--time", "1:00:00; rm -rf ~", "--", TRAIN),
    _lyasub("lyasub-time-negative", "--time", *OK, "--time", "-5", "--", TRAIN),
    _lyasub("lyasub-job-name-newline", "--job-name", *OK, "--job-name", "a\nb", "--", TRAIN),
    _lyasub("lyasub-partition-control", "--partition", *OK, "--partition", "gpu\rx", "--", TRAIN),
    _lyasub("lyasub-config-missing", "no such config file", *OK, "--config", "{work}/nope.toml", "--", TRAIN),
    Case("lyasub-config-garbage", "lyasub", (*LB, *OK, "--config", "{file}", "--", TRAIN), "invalid TOML",
         b"[cluster\ngpu_mem = \n"),
    _lyasub("lyasub-epochs-too-long", "iterations (max 1000000000)", "--model", "mlp", "--global-batch", "8",
            "--epochs", "1e30", "--dataset-size", "10", "--", TRAIN),
    _lyasub("lyasub-model-arg-key", "expected KEY=VALUE", *OK, "--model-arg", "$(id)=3", "--", TRAIN),
    # ---------------------------------------------------------------- lyastat
    Case("lyastat-db-missing", "lyastat", ("--db", "{work}/none.db", "--no-slurm"), "no lyasched database"),
    Case("lyastat-db-garbage", "lyastat", ("--db", "{file}", "--no-slurm"), "cannot read", b"\x00garbage" * 100),
    Case("lyastat-db-empty-sqlite", "lyastat", ("--db", "{work}/empty.db", "--no-slurm"), "not a lyasched"),
    Case("lyastat-db-directory", "lyastat", ("--db", "{work}", "--no-slurm"), "{work}"),
    Case("lyastat-jobid-sql", "lyastat", ("--db", "{work}/service.db", "--no-slurm", "1; DROP TABLE jobs"),
         "not a lyasched job"),
    Case("lyastat-jobid-nonutf8", "lyastat", ("--db", "{work}/service.db", "--no-slurm", "12" + NONUTF8),
         "not a lyasched job"),
    Case("lyastat-jobid-huge", "lyastat", ("--db", "{work}/service.db", "--no-slurm", "9" * 40),
         "not a lyasched job"),
    Case("lyastat-config-missing", "lyastat", ("--config", "{work}/nope.toml", "--no-slurm"), "no such config file"),
    Case("lyastat-config-nonutf8", "lyastat", ("--config", "{file}", "--no-slurm"), "UTF-8",
         b"[service]\ndb = \"\xff\xfe.db\"\n"),
    Case("lyastat-unknown-option", "lyastat", ("--frobnicate",), "No such option"),
    # ---------------------------------------------------------------- lyasched serve --config
    Case("config-missing", "config", ("{work}/nope.toml",), "no such config file"),
    Case("config-directory", "config", ("{work}",), "{work}"),
    Case("config-bad-toml", "config", ("{file}",), "invalid TOML", b"[service\nslot_seconds = 30\n"),
    Case("config-truncated", "config", ("{file}",), "invalid TOML", b"[service]\nslot_seconds = "),
    Case("config-nonutf8", "config", ("{file}",), "UTF-8", b"[service]\npartition = \"gpu\xff\"\n"),
    Case("config-binary", "config", ("{file}",), "{file}", b"\x00\x01\x02\x89PNG\r\n\x1a\n" * 8),
    Case("config-slot-negative", "config", ("{file}",), "slot_seconds must be > 0", b"[service]\nslot_seconds = -30\n"),
    Case("config-slot-zero", "config", ("{file}",), "slot_seconds must be > 0", b"[service]\nslot_seconds = 0\n"),
    Case("config-slot-string", "config", ("{file}",), "slot_seconds must be a number",
         b"[service]\nslot_seconds = \"30; rm -rf /\"\n"),
    Case("config-slot-nan", "config", ("{file}",), "must be finite", b"[service]\nslot_seconds = nan\n"),
    Case("config-slot-huge", "config", ("{file}",), "slot_seconds must be <=", b"[service]\nslot_seconds = 1e300\n"),
    Case("config-timeout-inf", "config", ("{file}",), "must be finite", b"[service]\nslurm_timeout = inf\n"),
    Case("config-grace-negative", "config", ("{file}",), "release_grace must be >= 0",
         b"[service]\nrelease_grace = -1\n"),
    Case("config-users-string", "config", ("{file}",), "service.users must be a list",
         b"[service]\nusers = \"lyatest\"\n"),
    Case("config-users-number", "config", ("{file}",), "service.users must be a list", b"[service]\nusers = [1]\n"),
    Case("config-unknown-key", "config", ("{file}",), "unknown key service.slots", b"[service]\nslots = 3\n"),
    Case("config-unknown-table", "config", ("{file}",), "unknown table [sched]", b"[sched]\nV = 1\n"),
    Case("config-db-empty", "config", ("{file}",), "service.db must not be empty", b"[service]\ndb = \"\"\n"),
    Case("config-db-number", "config", ("{file}",), "service.db must be a string", b"[service]\ndb = 5\n"),
    Case("config-db-directory", "config", ("{file}",), "cannot open the service database",
         b"[service]\ndb = \".\"\n"),
    Case("config-unknown-policy", "config", ("{file}",), "policy.name must be one of",
         b"[policy]\nname = \"$(reboot)\"\n"),
    Case("config-policy-param", "config", ("{file}",), "policy", b"[policy]\nname = \"lyapunov\"\n"
         b"[policy.params]\nfrobnicate = 1\n"),
    Case("config-gpu-mem-negative", "config", ("{file}",), "cluster.gpu_mem must be > 0",
         b"[cluster]\ngpu_mem = -32e9\n"),
    Case("config-link-zero", "config", ("{file}",), "cluster.inter.bandwidth must be > 0",
         b"[cluster]\ninter = { bandwidth = 0, latency = 1e-5 }\n"),
    Case("config-log-level", "config", ("{file}",), "service.log_level must be one of",
         b"[service]\nlog_level = \"LOUD\"\n"),
    # ---------------------------------------------------------------- lyasched replay trace files
    Case("trace-missing", "trace", ("{work}/nope.csv",), "no such file"),
    Case("trace-directory", "trace", ("{work}/",), "no such file"),
    Case("trace-empty", "trace", ("{file}",), "missing column", b""),
    Case("trace-header-only", "trace", ("{file}",), "no jobs", _csv("submit_time,duration,num_gpus\n")),
    Case("trace-missing-column", "trace", ("{file}",), "missing column(s) num_gpus",
         _csv("submit_time,duration\n0,100\n")),
    Case("trace-truncated-row", "trace", ("{file}",), "truncated row", _csv("submit_time,duration,num_gpus\n0,100,1\n5,10")),
    Case("trace-truncated-mid-field", "trace", ("{file}",), "truncated row",
         _csv("submit_time,duration,num_gpus\n0,100,1\n5,")),
    Case("trace-duration-text", "trace", ("{file}",), "bad duration", _csv("submit_time,duration,num_gpus\n0,abc,1\n")),
    Case("trace-gpus-text", "trace", ("{file}",), "bad num_gpus", _csv("submit_time,duration,num_gpus\n0,10,two\n")),
    Case("trace-gpus-fraction", "trace", ("{file}",), "num_gpus must be a positive integer",
         _csv("submit_time,duration,num_gpus\n0,10,1.5\n")),
    Case("trace-gpus-zero", "trace", ("{file}",), "num_gpus must be a positive integer",
         _csv("submit_time,duration,num_gpus\n0,10,0\n")),
    Case("trace-gpus-negative", "trace", ("{file}",), "num_gpus must be a positive integer",
         _csv("submit_time,duration,num_gpus\n0,10,-4\n")),
    Case("trace-gpus-huge", "trace", ("{file}",), "out of range", _csv("submit_time,duration,num_gpus\n0,10,1e30\n")),
    Case("trace-duration-negative", "trace", ("{file}",), "negative duration",
         _csv("submit_time,duration,num_gpus\n0,-10,1\n")),
    Case("trace-duration-nan", "trace", ("{file}",), "non-finite", _csv("submit_time,duration,num_gpus\n0,nan,1\n")),
    Case("trace-duration-huge", "trace", ("{file}",), "out of range", _csv("submit_time,duration,num_gpus\n0,1e308,1\n")),
    Case("trace-time-text", "trace", ("{file}",), "bad submit_time", _csv("submit_time,duration,num_gpus\nyesterday,10,1\n")),
    Case("trace-nonutf8", "trace", ("{file}",), "not a text CSV", b"submit_time,duration,num_gpus\n0,10,1\n\xff\xfe,1,1\n"),
    Case("trace-nul", "trace", ("{file}",), "bad duration", b"submit_time,duration,num_gpus\n0,10\x00,1\n"),
    Case("trace-name-shell", "trace", ("$(touch {work}/pwned)",), "no such file"),
    Case("trace-name-unknown", "trace", ("seed-huge;reboot",), "unknown workload"),
)

# cost summaries that reach the job_submit plugin (real sbatch --comment as the test user)
PLUGIN_CASES: tuple[Case, ...] = tuple(
    Case(f"plugin-{name}", "plugin", (comment,), expect)
    for name, comment, expect in (
        ("batch-zero", summary(b="0"), "b=0: must be in 1..1048576"),
        ("batch-negative", summary(b="-256"), "b=-256: must be in"),
        ("batch-huge", summary(b="9" * 21), "must be an integer"),
        ("iterations-zero", summary(it="0"), "it=0: must be in"),
        ("gmax-below-gmin", summary(gmin="4", gmax="2"), "gmax=2 is below gmin=4"),
        ("gpus-huge", summary(gmax="4096"), "gmax=4096: must be in"),
        ("alpha-nan", summary(a="nan"), "a=nan: must be a decimal number"),
        ("alpha-inf", summary(a="inf"), "must be a decimal number"),
        ("alpha-overflow", summary(a="1e400"), "must be in"),
        ("beta-hex", summary(bt="0x10"), "must be a decimal number"),
        ("bpp-nine", summary(bpp="9"), "bpp=9: must be in 1..8"),
        ("missing-src", summary(src=None), "missing key 'src'"),
        ("unknown-key", summary() + ";x=1", "unknown key 'x'"),
        ("duplicate-key", summary() + ";b=8", "key 'b' given twice"),
        ("sig-shell", summary(sig="$(id)`id`"), "sig="),
        ("sig-nonutf8", summary(sig="mlp" + NONUTF8), "sig="),
        ("sig-space", summary(sig="a b"), "sig="),
        ("id-short", summary(id="abc"), "id=abc: must be 8..64"),
        ("too-long", summary(sig="s" * 128) + ";" + ";".join(f"k{i}=1" for i in range(200)), "longer than 1024"),
        ("empty-body", "lyasched:v1;", "no fields"),
        ("leading-space", " " + summary(), "leading or trailing whitespace"),
        ("stray-semicolon", summary() + ";", "empty field"),
    )
)


# ---------------------------------------------------------------- running a case


@dataclass
class Outcome:
    name: str
    tool: str
    exit_code: int | None
    error_lines: list[str]
    submitted: bool  # a job was submitted or changed (fake call log / squeue)
    changed: list[str]  # sandbox files created, changed or removed
    traceback: str | None
    expect: str

    @property
    def refused(self) -> bool:
        return not self.problems()

    def problems(self) -> list[str]:
        out = []
        if self.exit_code in (0, None):
            out.append(f"exit status {self.exit_code}")
        if len(self.error_lines) != 1:
            out.append(f"{len(self.error_lines)} error lines: {self.error_lines[:4]!r}")
        elif self.expect not in self.error_lines[0]:
            out.append(f"error line {self.error_lines[0]!r} lacks {self.expect!r}")
        if self.traceback:
            out.append(f"exception escaped: {self.traceback}")
        if self.submitted:
            out.append("a job was submitted or changed")
        if self.changed:
            out.append(f"files written: {self.changed[:5]}")
        return out


def _sqlite_dump(p: Path) -> str | None:
    """A SQLite file's logical content (its -wal included), or None if it is not one."""
    import sqlite3

    with open(p, "rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            return None
    try:
        conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            return "\n".join(conn.iterdump())
        finally:
            conn.close()
    except sqlite3.Error as e:
        return f"unreadable: {e}"


def _snapshot(root: Path, skip: Path) -> dict[str, str]:
    """Every file's content; SQLite databases by their rows (a reader may create -wal/-shm files:
    those hold no rows of their own, so they are compared through the database)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p == skip or skip in p.parents or p.name.endswith(("-wal", "-shm")):
            continue
        rel = str(p.relative_to(root))
        if p.is_dir():
            out[rel] = "dir"
        else:
            dump = _sqlite_dump(p)
            data = dump.encode() if dump is not None else p.read_bytes()
            out[rel] = hashlib.sha256(data).hexdigest()
    return out


def _diff(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


class Sandbox:
    """A scratch directory: fake Slurm tools, a training script, a service database."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="lyasched-badinput-"))
        self.bin = self.root / "bin"
        self.slurm = self.root / "slurm"
        self.work = self.root / "work"
        for d in (self.bin, self.slurm, self.work):
            d.mkdir()
        for tool in ("sbatch", "squeue", "scontrol", "scancel", "srun", "sacct"):
            (self.bin / tool).symlink_to(FAKE_SLURM)
        (self.work / "train.py").write_text("print('training')\n")
        (self.work / "config.toml").write_text("[cluster]\ngpu_mem = 16e9\n")
        from lyasched.store.records import open_records

        db = open_records(self.work / "service.db")
        db.conn.close()
        import sqlite3

        sqlite3.connect(self.work / "empty.db").execute("create table other (x)").connection.close()

    def env(self) -> dict[str, str | None]:
        return {
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "FAKE_SLURM_DIR": str(self.slurm),
            "LYASCHED_CONFIG": str(self.work / "config.toml"),
            "LYASCHED_DB": None,
            "LYASCHED_DEVICE_TYPE": None,
            "FAKE_NO_PLUGIN": None, "FAKE_SBATCH_FAIL": None, "FAKE_SBATCH_LOST": None,
            "FAKE_ALTER_COMMENT": None, "FAKE_PROFILE_JSON": None, "FAKE_PROFILE_STATE": None,
            # the fakes are Slurm's tools: the CLI backend even where pyslurm is installed and a cluster runs
            "LYASCHED_SLURM_BACKEND": "cli", "LYASCHED_SLURM_PREFIX": None,
        }

    def fake_calls(self) -> list[list[str]]:
        f = self.slurm / "calls.jsonl"
        return [json.loads(x) for x in f.read_text().splitlines()] if f.exists() else []

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def sandbox() -> Iterator[Sandbox]:
    s = Sandbox()
    try:
        yield s
    finally:
        s.close()


def _expand(text: str, work: Path, file: Path) -> str:
    return text.replace("{work}", str(work)).replace("{file}", str(file))


def _changes_slurm(call: list[str]) -> bool:
    tool, args = call[0], call[1:]
    return tool == "sbatch" or (tool == "scontrol" and bool(set(args) & {"update", "release", "hold", "requeue"}))


def run_case(case: Case, box: Sandbox) -> Outcome:
    """Run one non-cluster case in the sandbox (in-process, click's CliRunner)."""
    from click.testing import CliRunner

    file = box.work / f"input-{case.name}"
    if case.data is not None:
        file.write_bytes(case.data)
    args = [_expand(a, box.work, file) for a in case.args]
    if case.tool == "lyasub":
        from lyasched.cli.lyasub import main as cmd
    elif case.tool == "lyastat":
        from lyasched.cli.lyastat import main as cmd
    elif case.tool == "config":
        from lyasched.cli import main as cmd

        args = ["serve", "--config", *args, "--once"]
    elif case.tool == "trace":
        from lyasched.cli import main as cmd

        args = ["replay", "--workload", *args, "--policies", "fifo", "--out", str(box.work / "out")]
    else:
        raise ValueError(f"not an in-process case: {case.tool}")
    calls_before = len(box.fake_calls())
    before = _snapshot(box.root, box.slurm)
    cwd = os.getcwd()
    os.chdir(box.work)
    try:
        r = CliRunner().invoke(cmd, args, env=box.env(), catch_exceptions=True)
    finally:
        os.chdir(cwd)
    after = _snapshot(box.root, box.slurm)
    tb = None
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        tb = f"{type(r.exception).__name__}: {r.exception}"
    calls = box.fake_calls()[calls_before:]
    if file.exists():
        file.unlink()
    return Outcome(
        name=case.name, tool=case.tool, exit_code=r.exit_code,
        error_lines=[x for x in r.stderr.splitlines() if x.strip()],
        submitted=any(_changes_slurm(c) for c in calls), changed=_diff(before, after), traceback=tb,
        expect=_expand(case.expect, box.work, file),
    )


# ---------------------------------------------------------------- plugin cases (real cluster)


def _squeue_named(user: str, name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-u", user, "-n", name, "-o", "%i"], capture_output=True,
                         text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"squeue failed: {out.stderr.strip()}")
    return out.stdout.split()


def run_plugin_case(case: Case, user: str = TEST_USER) -> Outcome:
    """``sbatch --comment SUMMARY`` as ``user`` on the real cluster; the plugin must refuse it."""
    from lyasched.summary import CostSummary

    name = f"badinput-{uuid.uuid4().hex[:12]}"
    before = _squeue_named(user, name)
    comment = case.args[0]
    p = as_user(user, "sbatch", "--parsable", "-o", "/dev/null", f"--job-name={name}", "--gres=gpu:1",
                f"--comment={comment}", "--wrap", "true", timeout=60, text=False)  # the comment may not be UTF-8
    stderr = p.stderr.decode("utf-8", "replace")
    after = _squeue_named(user, name)
    if after:
        subprocess.run(["scancel", *after], capture_output=True, timeout=30)
    tb = None
    if comment == comment.strip():  # decode strips surrounding whitespace (docs/cost-summary.md); sbatch refuses it
        try:
            CostSummary.decode(comment)
            tb = "CostSummary.decode accepted what the plugin must refuse"
        except ValueError:
            pass
    return Outcome(
        name=case.name, tool="plugin", exit_code=p.returncode,
        error_lines=[x for x in stderr.splitlines() if "lyasched:" in x],
        submitted=bool(before or after), changed=[], traceback=tb, expect=case.expect,
    )


def cluster_available() -> bool:
    """The test cluster answers and we may act as the test user (root)."""
    if os.geteuid() != 0 or shutil.which("sbatch") is None:
        return False
    try:
        pwd.getpwnam(TEST_USER)
        return subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, timeout=15).returncode == 0
    except (KeyError, OSError, subprocess.TimeoutExpired):
        return False


def run_bad_inputs(plugin: bool | None = None) -> dict[str, Any]:
    """Run the whole table: ``{"tried": N, "refused": M, "failures": [...]}``.

    Plugin cases run when ``plugin`` is True, or when it is None and the cluster is up and we are root.
    """
    outcomes: list[Outcome] = []
    with sandbox() as box:
        for case in CASES:
            outcomes.append(run_case(case, box))
    if plugin is None:
        plugin = cluster_available()
    if plugin:
        outcomes += [run_plugin_case(c) for c in PLUGIN_CASES]
    failures = [{"case": o.name, "tool": o.tool, "problems": o.problems()} for o in outcomes if not o.refused]
    by_tool: dict[str, list[int]] = {}
    for o in outcomes:
        t = by_tool.setdefault(o.tool, [0, 0])
        t[0] += 1
        t[1] += o.refused
    return {
        "tried": len(outcomes), "refused": sum(o.refused for o in outcomes), "failures": failures,
        "by_tool": {k: {"tried": v[0], "refused": v[1]} for k, v in by_tool.items()}, "plugin": bool(plugin),
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--plugin", action="store_true", default=None, help="also run the plugin cases (cluster, root)")
    g.add_argument("--no-plugin", dest="plugin", action="store_false", help="skip the plugin cases")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    res = run_bad_inputs(a.plugin)
    res["wall_s"] = round(time.monotonic() - t0, 2)
    if a.json:
        print(json.dumps(res))
    else:
        for tool, c in res["by_tool"].items():
            print(f"bad inputs {tool:8s} tried {c['tried']:3d}, refused cleanly {c['refused']:3d}")
        print(f"bad inputs tried / cleanly refused: {res['tried']} / {res['refused']}  ({res['wall_s']} s)")
        for f in res["failures"]:
            print(f"  FAILED {f['case']}: {'; '.join(f['problems'])}")
    return 0 if not res["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
