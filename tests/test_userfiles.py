"""What a hostile user's job can leave where the service reads (lyasched.userfiles), and what
one user's step reports can do to other users' predictions (lyasched.costmodel.learn.refit_shared).
The real-cluster versions, with the service's slot cadence measured, are in
tests/test_hostile_slurm.py."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from lyasched import userfiles
from lyasched.costmodel.cost import ClusterSpec, Link, Profile
from lyasched.costmodel.learn import LEARN_BOUND, Run, parse_steps, predict_step, refit_shared
from lyasched.userfiles import UserFileError, read_user_file

ME = os.getuid()
PARTS = [".lyasched", "steps-7.tsv"]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / ".lyasched").mkdir()
    return tmp_path


def test_a_regular_file_of_the_user_is_read(workdir: Path) -> None:
    (workdir / ".lyasched" / "steps-7.tsv").write_text("S\t0\t0\t1.0\t0.5\n")
    got = read_user_file(workdir, PARTS, ME, 1 << 20)
    assert got.data == b"S\t0\t0\t1.0\t0.5\n" and not got.truncated


@pytest.mark.parametrize("make, reason", [
    (lambda p: os.mkfifo(p), "FIFO"),
    (lambda p: os.symlink("/etc/shadow", p), "symbolic link"),
    (lambda p: os.symlink("/dev/zero", p), "symbolic link"),
    (lambda p: os.mkdir(p), "directory"),
])
def test_fifos_links_and_directories_are_refused_at_once(workdir: Path, make, reason: str) -> None:
    make(workdir / ".lyasched" / "steps-7.tsv")
    t0 = time.monotonic()
    with pytest.raises(UserFileError, match=reason):
        read_user_file(workdir, PARTS, ME, 1 << 20)
    assert time.monotonic() - t0 < 1.0  # refused before any open could wait for a writer


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can make a device node")
def test_a_device_node_is_refused(workdir: Path) -> None:
    os.mknod(workdir / ".lyasched" / "steps-7.tsv", 0o600 | 0o020000, os.makedev(1, 5))  # /dev/zero's numbers
    with pytest.raises(UserFileError, match="character device"):
        read_user_file(workdir, PARTS, ME, 1 << 20)


def test_a_linked_directory_on_the_way_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / "steps-7.tsv").write_text("S\t0\t0\t1.0\t0.5\n")
    os.symlink(real, tmp_path / ".lyasched")
    with pytest.raises(UserFileError, match="directory .lyasched is a symbolic link"):
        read_user_file(tmp_path, PARTS, ME, 1 << 20)


def test_a_file_of_another_owner_is_refused(workdir: Path) -> None:
    (workdir / ".lyasched" / "steps-7.tsv").write_text("S\t0\t0\t1.0\t0.5\n")
    with pytest.raises(UserFileError, match=f"belongs to uid {ME}, not to the job's user"):
        read_user_file(workdir, PARTS, ME + 4242, 1 << 20)


def test_a_huge_sparse_file_costs_one_bounded_read(workdir: Path) -> None:
    p = workdir / ".lyasched" / "steps-7.tsv"
    with open(p, "wb") as f:
        f.write(b"S\t0\t0\t1.0\t0.5\n")
        f.truncate(64 << 30)  # 64 GiB, sparse
    t0 = time.monotonic()
    got = read_user_file(workdir, PARTS, ME, 1 << 20)
    assert got.truncated and len(got.data) == 1 << 20 and time.monotonic() - t0 < 2.0


def test_a_stalled_file_system_times_out_and_then_fails_fast(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that never returns (a hung NFS server) costs its caller the timeout, and once
    MAX_STALLED reads hang, further reads fail at once; they recover when the reads return."""
    release = threading.Event()
    real_open = os.open

    def hanging_open(path, flags, *a, **kw):  # type: ignore[no-untyped-def]
        if str(path) == "steps-7.tsv":
            release.wait(30)
        return real_open(path, flags, *a, **kw)

    (workdir / ".lyasched" / "steps-7.tsv").write_text("S\t0\t0\t1.0\t0.5\n")
    monkeypatch.setattr(userfiles.os, "open", hanging_open)
    monkeypatch.setattr(userfiles, "MAX_STALLED", 2)
    t0 = time.monotonic()
    for _ in range(2):
        with pytest.raises(UserFileError, match="no answer within 0.2 s"):
            read_user_file(workdir, PARTS, ME, 1 << 20, timeout=0.2)
    assert userfiles.stalled() == 2
    with pytest.raises(UserFileError, match="still blocked"):
        read_user_file(workdir, PARTS, ME, 1 << 20, timeout=5)
    assert time.monotonic() - t0 < 2.0
    release.set()
    deadline = time.monotonic() + 5
    while userfiles.stalled() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert userfiles.stalled() == 0
    assert read_user_file(workdir, PARTS, ME, 1 << 20).data.startswith(b"S\t")


def test_parse_steps_keeps_only_plain_names_and_bounded_numbers() -> None:
    text = ('M\t0\t{"world": 1e300, "model": "x\\u001b[31m; rm -rf /", "launcher": "torchrun", "local_bsz": "nan"}\n'
            + "".join(f"S\t0\t{i}\t{1000 + i}\t0.5\n" for i in range(5))
            + "S\t0\t9\t1e309\t0.5\nS\t-1\t3\t1\t0.5\nS\t0\t4\t1\t1e12\ngarbage\n")
    rep = parse_steps(text.encode())
    assert rep is not None and rep.model == "" and rep.launcher == "torchrun"
    assert rep.placement == (1,) and rep.local_bsz == 0 and rep.step_time == 0.5


CLUSTER = ClusterSpec(nodes=2, gpus_per_node=4, intra=Link(1e-5, 1e-10), inter=Link(5e-5, 1e-9))
BASE = Profile("mlp", 0.01, 0.001, 2_000_000)


def _runs(user: str, scale: float, n: int = 3) -> list[Run]:
    return [Run(p, 16, predict_step(BASE, CLUSTER, p, 16) * scale, f"{user}-{i}", user)
            for i, p in enumerate([(1,), (2,), (4,), (4, 4)][:n + 1])]


def _ratio(prof: Profile, p: tuple[int, ...]) -> float:
    return predict_step(prof, CLUSTER, p, 16) / predict_step(BASE, CLUSTER, p, 16)


@pytest.mark.parametrize("lie", [0.01, 100.0])
def test_one_users_reports_move_the_shared_profile_by_at_most_the_bound(lie: float) -> None:
    prof, why = refit_shared(BASE, CLUSTER, _runs("mallory", lie) * 50)  # however many jobs
    for p in [(1,), (2,), (4,), (4, 4)]:
        assert 1 / LEARN_BOUND - 1e-9 <= _ratio(prof, p) <= LEARN_BOUND + 1e-9
    assert "kept within" in why[-1]


def test_outvoted_by_three_honest_users_a_liar_has_no_effect() -> None:
    honest = _runs("ann", 1.2) + _runs("ben", 1.2) + _runs("cat", 1.2)
    clean, _ = refit_shared(BASE, CLUSTER, honest)
    for lie in (0.01, 100.0):
        prof, _ = refit_shared(BASE, CLUSTER, honest + _runs("mallory", lie) * 50)
        for p in [(1,), (2,), (4,), (4, 4)]:
            assert _ratio(prof, p) == pytest.approx(_ratio(clean, p), rel=1e-6)
            assert _ratio(prof, p) == pytest.approx(1.2, rel=1e-6)  # what the honest runs justify
