"""State that survives upgrades and damage (lyasched.store.schema): every lyasched database carries
its schema version in PRAGMA user_version; an unversioned or older file is migrated in place in one
transaction keeping its rows, a newer one is refused, and a truncated, corrupt or unopenable one
gets ONE line naming the file and what to do, from `lyasched serve` (exit non-zero before any
Slurm call) and from `lyasub` (exit 1, no sbatch: no profiling or training job left behind).

tests/data/unversioned.sqlite3 was written by the last lyasched before versioning
(tests/data/make_unversioned_db.py): the service's records and the cost table in one file.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from lyasched.store import open_db, schema
from lyasched.store.schema import SCHEMA_VERSION, DatabaseUnusable, NewerSchema

from test_lyasub import BASE, Fake, fake, lyasub  # noqa: F401  (fake: the fixture, fake Slurm tools on PATH)

RECORDED = Path(__file__).parent / "data" / "unversioned.sqlite3"


def _rows(path: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("select name from sqlite_master where type = 'table' order by name")]
        return {t: sorted(conn.execute(f"select * from {t}").fetchall(), key=repr) for t in tables}
    finally:
        conn.close()


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _copy_recorded(dst: Path) -> Path:
    shutil.copyfile(RECORDED, dst)
    return dst


# ---------------------------------------------------------------- migrations


def test_recorded_unversioned_file_is_stamped_in_place_and_keeps_its_rows(tmp_path: Path) -> None:
    from lyasched.store import costtable, records

    p = _copy_recorded(tmp_path / "lyasched.db")
    before = _rows(p)
    assert _version(p) == 0 and len(before["jobs"]) == 40
    db = records.open_records(p)  # the service's open
    db.conn.close()
    assert _version(p) == SCHEMA_VERSION == 1
    after = _rows(p)
    assert after == before  # today's layout: stamped, nothing else changed
    db = open_db(p)  # lyasub's open of the same file: still usable by today's code
    assert records.get_job(db, "uid-0007-abcdefgh")["name"] == "job7"
    assert costtable.get(db, "sig-mlp", "gpu").alpha == 0.002
    assert costtable.get_signature(db, "mlp|key") == "sig-mlp"
    assert [m["uid"] for m in db.query("select uid from moves")] == ["uid-0005-abcdefgh"]
    db.conn.close()


OLD_LAYOUT = [  # tables as lyasched wrote them before the columns unversioned versions added on open
    "CREATE TABLE profiles (signature TEXT, device_type TEXT, model TEXT NOT NULL, device_name TEXT, "
    "source TEXT NOT NULL, alpha FLOAT NOT NULL, beta FLOAT NOT NULL, r2 FLOAT, m0 FLOAT, m1 FLOAT, mem_r2 FLOAT, "
    "step_points TEXT, mem_points TEXT, params INTEGER NOT NULL, bytes_per_param INTEGER, grad_bytes INTEGER, "
    "torch_version TEXT, cuda_version TEXT, created TEXT, updated TEXT, correction FLOAT NOT NULL DEFAULT 1.0, "
    "observations INTEGER NOT NULL DEFAULT 0, last_ratio FLOAT, result_json TEXT, "
    "PRIMARY KEY (signature, device_type))",
    "CREATE TABLE profile_runs (signature TEXT, device_type TEXT, job_id TEXT, placement TEXT, local_bsz REAL, "
    "step_time REAL, time TEXT)",
    "CREATE TABLE startup (cluster TEXT, launcher TEXT, job_id TEXT, seconds REAL, time REAL)",
    "CREATE TABLE moves (id INTEGER PRIMARY KEY, uid TEXT, slurm_id TEXT, kind TEXT, reason TEXT, created FLOAT, "
    "from_gpus INTEGER, from_placement TEXT, to_gpus INTEGER, to_placement TEXT, per_node INTEGER, "
    "predicted FLOAT, ckpt_dir TEXT, ckpt_before INTEGER, ckpt_step INTEGER, step TEXT, state TEXT, "
    "signalled_at FLOAT, checkpointed_at FLOAT, requeued_at FLOAT, released_at FLOAT, restarted_at FLOAT, "
    "cost_s FLOAT, resolved FLOAT, resolution TEXT)",
    "INSERT INTO profiles (signature, device_type, model, source, alpha, beta, params) "
    "VALUES ('s', 'gpu', 'mlp', 'measured', 0.002, 1e-5, 10)",
    "INSERT INTO profile_runs VALUES ('s', 'gpu', '7', '[]', 8, 0.01, 't')",
    "INSERT INTO startup VALUES ('c', 'srun+torchrun', '7', 3.5, 1.0)",
    "INSERT INTO moves (id, uid, kind, state, restarted_at) VALUES (1, 'u', 'shrink', 'done', 500.0)",
    "INSERT INTO moves (id, uid, kind, state, restarted_at) VALUES (2, 'u', 'grow', 'done', 900.0)",
    "INSERT INTO moves (id, uid, kind, state) VALUES (3, 'u', 'shrink', 'open')",
]


def _old_layout(p: Path) -> None:
    conn = sqlite3.connect(p)
    for sql in OLD_LAYOUT:
        conn.execute(sql)
    conn.commit()
    conn.close()


def _cols(p: Path, table: str) -> list[str]:
    conn = sqlite3.connect(p)
    try:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def test_older_layout_gets_its_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    p = tmp_path / "old.db"
    _old_layout(p)
    open_db(p).conn.close()
    assert _version(p) == SCHEMA_VERSION
    assert _cols(p, "profiles")[-2:] == ["learned_json", "learned_runs"]
    assert _cols(p, "profile_runs")[-1] == "user" and _cols(p, "startup")[-1] == "user"
    assert "run_started" in _cols(p, "moves")
    conn = sqlite3.connect(p)
    assert conn.execute("select alpha, learned_runs from profiles").fetchall() == [(0.002, 0)]
    assert conn.execute("select job_id, user from profile_runs").fetchall() == [("7", "")]
    assert conn.execute("select seconds, user from startup").fetchall() == [(3.5, "")]
    # run_started from the history: move 2's run began with move 1's relaunch, move 3's with move 2's
    assert conn.execute("select id, run_started from moves order by id").fetchall() == [(1, None), (2, 500.0),
                                                                                      (3, 900.0)]
    conn.close()


def test_migrations_run_in_order_in_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two later versions: a version-1 file gets both, in order; one failing leaves the file as it was."""
    p = tmp_path / "v1.db"
    open_db(p).conn.close()
    assert _version(p) == 1
    done: list[int] = []

    def step(v: int, fail: bool = False):
        def apply(conn: sqlite3.Connection) -> None:
            done.append(v)
            conn.execute(f"CREATE TABLE t{v} (x)")
            if fail:
                raise sqlite3.OperationalError("boom")
        return apply

    monkeypatch.setattr(schema, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, schema.Migration(3, "t3", step(3, fail=True)),
                                               schema.Migration(2, "t2", step(2))])
    monkeypatch.setattr(schema, "_checked", set())
    with pytest.raises(DatabaseUnusable, match="boom"):
        open_db(p)
    assert done == [2, 3] and _version(p) == 1 and "t2" not in _rows(p)  # rolled back whole
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS[:1], schema.Migration(2, "t2", step(2)),
                                               schema.Migration(3, "t3", step(3))])
    done.clear()
    open_db(p).conn.close()
    assert done == [2, 3] and _version(p) == 3 and {"t2", "t3"} <= set(_rows(p))
    done.clear()
    open_db(p).conn.close()
    assert done == []  # nothing left to do


def test_fresh_file_is_stamped(tmp_path: Path) -> None:
    p = tmp_path / "sub" / "new.db"
    open_db(p).conn.close()
    assert _version(p) == SCHEMA_VERSION


# ---------------------------------------------------------------- refused files


def _newer(p: Path) -> Path:
    _copy_recorded(p)
    conn = sqlite3.connect(p)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    return p


def test_newer_file_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    p = _newer(tmp_path / "newer.db")
    before = p.read_bytes()
    with pytest.raises(NewerSchema) as e:
        open_db(p)
    assert str(e.value) == (f"{p}: written by a newer lyasched (schema {SCHEMA_VERSION + 1}, this one knows "
                            f"{SCHEMA_VERSION}): upgrade lyasched or point db at another file")
    assert p.read_bytes() == before and not Path(f"{p}-wal").exists()


def _truncated(p: Path) -> Path:
    _copy_recorded(p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    return p


def _random_bytes(p: Path) -> Path:
    p.write_bytes(os.urandom(8192))
    return p


def _short(p: Path) -> Path:  # cut inside the 100-byte header
    p.write_bytes(RECORDED.read_bytes()[:60])
    return p


def _directory(p: Path) -> Path:  # cannot be opened (tests run as root: chmod 000 would not stop us)
    p.mkdir()
    return p


def _corrupt_page(p: Path) -> Path:  # a page of the jobs table overwritten: malformed, quick_check finds it
    _copy_recorded(p)
    conn = sqlite3.connect(p)
    root = conn.execute("select rootpage from sqlite_master where name = 'jobs'").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(p, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\xff" * 64)
    return p


DAMAGED = {
    "truncated": (_truncated, "damaged {what} ("),
    "random-bytes": (_random_bytes, "damaged {what} (not an SQLite database)"),
    "short-header": (_short, "damaged {what} (truncated: 60 bytes)"),
    "corrupt-page": (_corrupt_page, "damaged {what} ("),
    "directory": (_directory, "cannot open the {what} (Is a directory)"),
    "newer": (_newer, f"written by a newer lyasched (schema {SCHEMA_VERSION + 1}"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_open_db_gives_one_line(case: str, tmp_path: Path) -> None:
    make, fragment = DAMAGED[case]
    p = make(tmp_path / "lyasched.db")
    with pytest.raises(DatabaseUnusable) as e:
        open_db(p)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{p}: ") and fragment.format(what="lyasched database") in line
    if case not in ("newer",):
        assert "move it aside" in line


def test_unreadable_file(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads a chmod 000 file (the directory case covers an unopenable file)")
    p = _copy_recorded(tmp_path / "lyasched.db")
    p.chmod(0)
    with pytest.raises(DatabaseUnusable, match="cannot open the lyasched database"):
        open_db(p)


def test_a_sound_copy_passes_the_same_checks(tmp_path: Path) -> None:
    """The checks can pass: the untouched recording opens (so the cases above fail for their damage)."""
    p = _copy_recorded(tmp_path / "lyasched.db")
    open_db(p).conn.close()
    conn = sqlite3.connect(p)
    assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    conn.close()


# ---------------------------------------------------------------- lyasched serve, lyasub


def _serve(tmp_path: Path, db: Path):
    from lyasched.cli.serve import serve

    cfg = tmp_path / "serve.toml"
    cfg.write_text(f'[service]\ndb = "{db}"\nslot_seconds = 2\n')
    cfg.chmod(0o644)
    return CliRunner().invoke(serve, ["--config", str(cfg), "--once"])


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_serve_refuses_to_start(case: str, tmp_path: Path, fake: Fake) -> None:  # noqa: F811
    make, fragment = DAMAGED[case]
    (tmp_path / "state").mkdir()
    p = make(tmp_path / "state" / "lyasched.db")
    r = _serve(tmp_path, p)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code != 0 and len(lines) == 1, r.output
    assert lines[0].startswith(f"Error: {p}: ") and fragment.format(what="service database") in lines[0]
    assert fake.calls() == []  # decided nothing: not one Slurm call


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_lyasub_exits_before_submitting(case: str, tmp_path: Path, fake: Fake,  # noqa: F811
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    make, fragment = DAMAGED[case]
    (tmp_path / "state").mkdir()
    p = make(tmp_path / "state" / "lyasched.db")
    monkeypatch.setenv("LYASCHED_DB", str(p))  # the default path (--db refuses a directory itself)
    r = CliRunner().invoke(__import__("lyasched.cli.lyasub", fromlist=["main"]).main, [*BASE, "--", "train.py"],
                           catch_exceptions=False)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"lyasub: error: {p}: ") and fragment.format(what="cost table") in lines[0]
    assert fake.calls("sbatch") == [] and fake.calls() == []  # no profiling job, no training job, no Slurm call


def test_lyasub_with_the_recorded_file_migrates_it_and_submits(tmp_path: Path, fake: Fake) -> None:  # noqa: F811
    """The harness above notices a submission: a sound unversioned file is migrated and lyasub submits."""
    p = _copy_recorded(tmp_path / "lyasched.db")
    r = lyasub(*BASE, "--no-profile", "--", "train.py", db=str(p))
    assert r.exit_code == 0, r.stderr
    assert len(fake.training_sbatches()) == 1 and _version(p) == SCHEMA_VERSION


@pytest.mark.parametrize("case, fragment", [("newer", DAMAGED["newer"][1]),
                                            ("random-bytes", "cannot read lyasched database")])
def test_readers_refuse_too(case: str, fragment: str, tmp_path: Path) -> None:
    """lyastat's read-only open (and lyasub's read of the calibrated links) reads nothing from a
    newer or damaged file, and leaves it as it is."""
    from lyasched.store.records import RecordsUnavailable, open_readonly

    p = DAMAGED[case][0](tmp_path / "lyasched.db")
    with pytest.raises(RecordsUnavailable) as e:
        open_readonly(p)
    line = str(e.value)
    assert line.startswith(f"{p}: ") and fragment in line and "\n" not in line
    if case == "newer":
        assert _version(p) == SCHEMA_VERSION + 1
        _copy_recorded(tmp_path / "ok.db")
        open_readonly(tmp_path / "ok.db").conn.close()  # a sound unversioned file still reads


def _open_and_count(path: str) -> int:
    from lyasched.store import open_db as od

    db = od(path)
    try:
        return int(db.execute("select count(*) from jobs").fetchone()[0])
    finally:
        db.conn.close()


def test_processes_opening_an_unversioned_file_at_once_migrate_it_once(tmp_path: Path) -> None:
    import multiprocessing

    p = _copy_recorded(tmp_path / "lyasched.db")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        counts = pool.map(_open_and_count, [str(p)] * 8)
    assert counts == [40] * 8 and _version(p) == SCHEMA_VERSION


OTHER_PROCESS = """
import sys
from lyasched.store import records
db = records.open_records(sys.argv[1])  # a standby or a one-off command: opens, reads, closes
db.conn.execute("select count(*) from slots").fetchone()
db.conn.close()
"""


def test_another_process_closing_its_connection_does_not_take_the_wal_from_under_us(tmp_path):
    """Two services on one database (active and standby, on shared storage): the active opens a
    connection per thread, so it opens the file more than once. The header check must not read the
    file with a plain open() then: closing that descriptor drops every POSIX lock this process holds
    on it, SQLite's too, and the other process's close then deletes the WAL our writes go to."""
    import subprocess
    import sys

    from lyasched.store import records

    p = tmp_path / "service.db"
    first = records.open_records(p)
    records.record_decision(first, time=1.0, uid="u1", slurm_id="1", action="start", gpus=1)
    second = records.open_records(p)  # the slot thread's own connection, same process
    subprocess.run([sys.executable, "-c", OTHER_PROCESS, str(p)], check=True, timeout=60)
    assert Path(f"{p}-wal").exists()  # still ours
    records.record_decision(second, time=2.0, uid="u2", slurm_id="2", action="start", gpus=1)
    got = subprocess.run([sys.executable, "-c", "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("
                          "'select count(*) from decisions').fetchone()[0])", str(p)],
                         capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    assert got == "2"  # another process sees both writes
    first.conn.close()
    second.conn.close()
