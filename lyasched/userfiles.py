"""Reading files that a user's job wrote, as a privileged service may.

`lyasched serve` runs as a Slurm operator (or root) and reads two kinds of file from a job's
working directory: the step-time report and the checkpoint marker of a move. Their owner
controls them completely, so every read here:

* walks the path from the job's working directory one component at a time, never following a
  symbolic link (``O_NOFOLLOW`` on each component, opened relative to its parent);
* opens only regular files: a FIFO, socket or device is refused before it is opened (``lstat``)
  and again after (``fstat``), and FIFOs are opened non-blocking in case one is swapped in
  between, so no open waits for a writer;
* requires the file and the directories below the working directory to belong to the job's
  user (so a job cannot point the service at another user's or root's file by hard link or by
  a directory it does not own);
* reads at most ``max_bytes`` (a huge or sparse file costs one bounded read);
* runs in a worker thread and gives up after ``timeout`` seconds (a stalled NFS mount blocks
  that thread, never the slot). While `MAX_STALLED` reads are still blocked, further reads fail
  at once, so a stalled file system costs the service at most that many timeouts in all.

Errors are `UserFileError` with a one-line reason that never contains the file's content.
`warn_once` logs such a reason once per key (a job, a directory), not once per slot.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

log = logging.getLogger("lyasched.userfiles")

READ_TIMEOUT = 2.0  # seconds a read may take before the service gives up on it
MAX_STALLED = 4  # reads still blocked (after their timeout) before further reads fail at once

_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) \
    | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = _FLAGS | getattr(os, "O_DIRECTORY", 0)

_lock = threading.Lock()
_stalled = 0  # reads whose caller gave up while their thread is still blocked
_warned: set[tuple[str, str]] = set()


class UserFileError(Exception):
    """A user's file the service will not use; the message is one line and holds no content."""


@dataclass(frozen=True)
class UserFile:
    """What was read: at most ``max_bytes`` bytes (``truncated`` when the file held more)."""

    data: bytes
    truncated: bool


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _check_owner(st: os.stat_result, owner: int | None, what: str) -> None:
    if owner is not None and st.st_uid != owner:
        raise UserFileError(f"{what} belongs to uid {st.st_uid}, not to the job's user (uid {owner})")


def _read(base: str, parts: Sequence[str], owner: int | None, max_bytes: int) -> UserFile:
    """The walk and the read (see the module doc); runs in the worker thread."""
    if not parts or any(p in ("", ".", "..") or "/" in p for p in parts):
        raise UserFileError("bad relative path")
    fds: list[int] = []
    try:
        try:
            fds.append(os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)))
        except OSError as e:
            raise UserFileError(f"working directory: {e.strerror}") from None
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            what = "file" if last else f"directory {name}"
            try:
                st = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
            except OSError as e:
                raise UserFileError(f"{what}: {e.strerror}") from None
            if not (stat.S_ISREG(st.st_mode) if last else stat.S_ISDIR(st.st_mode)):
                raise UserFileError(f"{what} is {_kind(st.st_mode)}")
            _check_owner(st, owner, what)
            try:
                fd = os.open(name, _FLAGS if last else _DIR_FLAGS, dir_fd=fds[-1])
            except OSError as e:
                reason = "a symbolic link" if e.errno in (errno.ELOOP, errno.EMLINK) else e.strerror
                raise UserFileError(f"{what}: {reason}") from None
            fds.append(fd)
            st = os.fstat(fd)  # what was opened, not what lstat saw (the name may have been swapped)
            if not (stat.S_ISREG(st.st_mode) if last else stat.S_ISDIR(st.st_mode)):
                raise UserFileError(f"{what} is {_kind(st.st_mode)}")
            _check_owner(st, owner, what)
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            b = os.read(fds[-1], min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        return UserFile(data[:max_bytes], len(data) > max_bytes)
    except OSError as e:
        raise UserFileError(f"read: {e.strerror}") from None
    finally:
        for fd in reversed(fds):
            os.close(fd)


def read_user_file(base: str | os.PathLike, parts: Sequence[str], owner: int | None, max_bytes: int,
                   timeout: float = READ_TIMEOUT) -> UserFile:
    """Read ``base/parts[0]/.../parts[-1]`` as described in the module doc.

    ``base`` is the job's working directory as Slurm reports it; ``owner`` the uid the file and
    the directories in ``parts`` must belong to (None: not checked, for tests and tools run by
    the user themselves). Raises `UserFileError`."""
    global _stalled
    with _lock:
        if _stalled >= MAX_STALLED:
            raise UserFileError(f"{_stalled} earlier reads of users' files are still blocked: not reading")
    box: dict[str, object] = {}
    done = threading.Event()

    def work() -> None:
        global _stalled
        try:
            box["ok"] = _read(os.fspath(base), list(parts), owner, max_bytes)
        except UserFileError as e:
            box["err"] = e
        except Exception as e:  # noqa: BLE001 -- anything else is still the user's file's fault
            box["err"] = UserFileError(f"read failed ({type(e).__name__})")
        with _lock:
            if box.get("gave_up"):
                _stalled -= 1
            done.set()

    threading.Thread(target=work, name="lyasched-userfile", daemon=True).start()
    if not done.wait(timeout):
        with _lock:
            if not done.is_set():
                box["gave_up"] = True
                _stalled += 1
                raise UserFileError(f"no answer within {timeout:g} s (file system stalled?)")
    if "err" in box:
        raise box["err"]  # type: ignore[misc]  # a UserFileError set above
    return box["ok"]  # type: ignore[return-value]  # a UserFile set above


def stalled() -> int:
    """Reads still blocked after their caller gave up (metrics, tests)."""
    with _lock:
        return _stalled


def warn_once(key: str, what: str, reason: UserFileError | str) -> None:
    """Log ``what: reason`` at warning level the first time for ``key`` (a job id, a directory)."""
    k = (key, what)
    with _lock:
        if k in _warned:
            return
        if len(_warned) > 10000:
            _warned.clear()
        _warned.add(k)
    log.warning("%s: %s ignored: %s", key, what, reason)


def uid_of(user: str | None) -> int | None:
    """The uid of a Slurm user name (``name`` or ``name(uid)`` as scontrol prints it); None if unknown."""
    import pwd

    if not user:
        return None
    name = user.split("(", 1)[0]
    if "(" in user and user.endswith(")"):
        try:
            return int(user.split("(", 1)[1][:-1])
        except ValueError:
            pass
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return int(name) if name.isdigit() else None


def relative_parts(base: str | os.PathLike, path: str | os.PathLike) -> list[str]:
    """``path``'s components below ``base`` (raises `UserFileError` when it is not below it)."""
    try:
        rel = Path(os.path.normpath(path)).relative_to(os.path.normpath(base))
    except ValueError:
        raise UserFileError("path is not below the job's working directory") from None
    return list(rel.parts)
