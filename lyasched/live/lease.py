"""The service's lease: who acts on the cluster, kept in a small file the fail-safe can read.

Each slot the active service renews the lease (`LeaseKeeper.hold`): a JSON file
``{holder, role, epoch, renewed_at, slot_seconds, failsafe}`` at ``failsafe.lease`` (a path on a
file system the controller host shares; default: ``lease.json`` beside the service database),
written atomically (a temporary file in the same directory, fsync, rename). Every
read-check-write of it happens under an advisory lock (``flock`` on ``<lease>.lock``), so the
service's renewal and the fail-safe's takeover never interleave.

- **Epochs fence**: every new holder takes ``epoch + 1``. A service acts in a slot only while the
  lease still names its own epoch and holder (`hold` at the slot's start, `lost` again just before
  its Slurm actions). A service that finds a newer epoch held by another *live* service (renewed
  within ``takeover_slots`` of its slots) does not act: it waits as a standby.
- **Takeover**: a standby (``lyasched serve --standby``), or an active that lost the lease, takes it
  with a new epoch once it has not been renewed for ``takeover_slots`` slots, or at once when the
  fail-safe holds it (the fail-safe is not a live scheduler). ``take_now`` (a plain
  ``lyasched serve``) takes it at start-up whoever holds it: the one the admin starts is the active
  one, and the one it displaced stops acting at its next slot.
- **The fail-safe** (lyasched.failsafe) takes the lease with role ``failsafe`` when it releases jobs,
  and records in it (``failsafe``) and in a log beside it (`log_path`, one JSON line per released
  job) what it released; a service that takes the lease back reads that log (`read_log`) and
  records those jobs as started by the fail-safe (lyasched.service).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

log = logging.getLogger("lyasched.lease")

SERVICE, FAILSAFE = "service", "failsafe"
DEFAULT_NAME = "lease.json"


class LeaseError(RuntimeError):
    """The lease cannot be read (not JSON, wrong fields), written, or locked in time (one line)."""


@dataclass
class Lease:
    holder: str  # "host:pid" of a service, "failsafe@host:pid" of the fail-safe
    epoch: int
    renewed_at: float
    slot_seconds: float
    role: str = SERVICE
    failsafe: dict[str, Any] | None = None  # the fail-safe's last release: at, epoch, by, released (Slurm ids)

    def age(self, now: float) -> float:
        return now - self.renewed_at


def default_path(db: Path) -> Path:
    return Path(db).parent / DEFAULT_NAME


def log_path(lease: Path) -> Path:
    """The fail-safe's log beside the lease: one JSON line per job it released."""
    lease = Path(lease)
    return lease.with_name(lease.stem + ".failsafe.jsonl")


def me() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def read(path: Path) -> Lease | None:
    """The lease, or None when there is none yet."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise LeaseError(f"{path}: cannot read the lease: {e}") from None
    try:
        return Lease(holder=str(data["holder"]), epoch=int(data["epoch"]), renewed_at=float(data["renewed_at"]),
                     slot_seconds=float(data["slot_seconds"]), role=str(data.get("role", SERVICE)),
                     failsafe=data.get("failsafe"))
    except (KeyError, TypeError, ValueError) as e:
        raise LeaseError(f"{path}: not a lease ({type(e).__name__}: {e})") from None


def write(path: Path, lease: Lease) -> None:
    """Atomically: a temporary file in the same directory, fsync, rename over the lease, fsync the directory."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=".lease.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(lease), f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


@contextlib.contextmanager
def locked(path: Path, timeout: float = 30.0) -> Iterator[None]:
    """Hold ``<lease>.lock`` (flock, exclusive) for a read-check-write of the lease; LeaseError
    when another holder keeps it longer than ``timeout`` seconds (a fail-safe run in progress)."""
    lock = Path(path).with_name(Path(path).name + ".lock")
    # read-only is enough for flock: the service's account and root (the fail-safe) share one lock file,
    # whoever created it (0644)
    fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LeaseError(f"{lock}: still locked after {timeout:g}s (a fail-safe run in progress?)") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def read_log(path: Path) -> list[dict]:
    """The fail-safe's log (`log_path`): every job it released, oldest first (bad lines skipped)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("job_id"):
            out.append(entry)
    return out


def append_log(path: Path, entry: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


@dataclass
class LeaseKeeper:
    """One service's hold on the lease. ``take_now``: take it at the first `hold` whoever holds it
    (a plain ``lyasched serve``); else (``--standby``) only once it is free, stale, or the fail-safe's."""

    path: Path
    slot_seconds: float
    take_now: bool = True
    takeover_slots: float = 2.0  # + the standby's own slot: it acts within 3 slots of a stop
    clock: Callable[[], float] = time.time
    holder: str = field(default_factory=me)
    epoch: int | None = None  # the epoch this service holds (None: not holding)
    taken: int = 0  # how many times it took the lease (a new epoch each)

    def _ours(self, cur: Lease | None) -> bool:
        return cur is not None and self.epoch is not None and cur.epoch == self.epoch and cur.holder == self.holder

    def hold(self) -> tuple[str, Lease | None]:
        """At a slot's start: renew the lease if it is ours, else take it if we may. Returns
        (what happened: "renewed", "taken", or "" when this service must not act, with why in
        the log), and the lease as it was before (None if there was none)."""
        with locked(self.path, timeout=max(1.0, min(30.0, self.slot_seconds))):
            cur = read(self.path)
            now = self.clock()
            if self._ours(cur):
                assert cur is not None
                write(self.path, Lease(self.holder, cur.epoch, now, self.slot_seconds))
                return "renewed", cur
            lost = self.epoch is not None
            if cur is None or cur.role == FAILSAFE or (self.take_now and not self.taken) \
                    or cur.age(now) > self.takeover_slots * cur.slot_seconds:
                self.epoch = (cur.epoch if cur is not None else 0) + 1
                self.taken += 1
                write(self.path, Lease(self.holder, self.epoch, now, self.slot_seconds))
                why = ("no lease yet" if cur is None else "the fail-safe held it" if cur.role == FAILSAFE
                       else f"{cur.holder} (epoch {cur.epoch}) not renewed for {cur.age(now):.0f}s"
                       if cur.age(now) > self.takeover_slots * cur.slot_seconds else f"started as the active service")
                log.warning("lease %s: taken with epoch %d (%s)", self.path, self.epoch, why)
                return "taken", cur
            if lost:
                log.warning("lease %s: lost to %s (epoch %d > ours %d): not acting (standby until it goes stale)",
                            self.path, cur.holder, cur.epoch, self.epoch)
                self.epoch = None
            else:
                log.debug("lease %s: held by %s (epoch %d, renewed %.0fs ago): standby", self.path, cur.holder,
                          cur.epoch, cur.age(now))
            return "", cur

    def lost(self) -> str:
        """Just before acting: why this service no longer holds the lease ('' while it does)."""
        try:
            cur = read(self.path)
        except LeaseError as e:
            return str(e)
        if self._ours(cur):
            return ""
        if cur is None:
            return f"lease {self.path} is gone"
        return f"lease {self.path} now held by {cur.holder} ({cur.role}, epoch {cur.epoch}; ours {self.epoch})"
