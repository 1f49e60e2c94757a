"""The two calls a training script needs to be movable by lyasched: resume on start, save on signal.

    ck = Checkpointer()                       # dir from $LYASCHED_CHECKPOINT_DIR (launch.sbatch sets it)
    start = ck.resume(model, opt)             # step to start from: 0, or the saved step + 1
    for step in range(start, iterations):
        ...train one step...
        if ck.should_stop(step):              # a move was asked (SIGUSR1): checkpoint saved
            return ck.exit_code               # leave; lyasched relaunches the job on its new GPU count

A move (docs/elastic.md) signals the job (SIGUSR1 by default), waits until the checkpoint is
complete, requeues the job held, resizes and releases it. The handler only sets a flag; the
script checks it between steps, where the model and optimizer are consistent. Under
torch.distributed every rank must stop at the same step, so ``should_stop`` all-reduces the flag
(a one-element MAX per step; ranks signalled a step apart agree on the later step). Rank 0 writes
the checkpoint with ``torch.save`` to a temporary file, renamed into place only when complete,
then a ``latest`` file naming it: a checkpoint is either whole or absent, so a move or a crash
during the save loses nothing already saved. Last, rank 0 replaces ``complete.json``
(``{"step", "n", "stop", "time"}``: the saved step, a count of saves in this directory, whether
the save was asked by a move's signal): the service's sign that the move's checkpoint is
complete (`read_marker`).

Saved state: the step, the model's and optimizer's ``state_dict`` and the RNG states, so a job
resumed with the same global batch follows the same trajectory as an uninterrupted one (the
model's state is the unwrapped module's, so a DDP job resumed on another world size loads it).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

ENV_DIR = "LYASCHED_CHECKPOINT_DIR"
ENV_SIGNAL = "LYASCHED_CHECKPOINT_SIGNAL"
LATEST = "latest"
MARKER = "complete.json"  # what the service checks: the last complete save (step, count, whether for a move)
MARKER_MAX_BYTES = 4096
EXIT_CHECKPOINTED = 0  # what the script returns after a move's checkpoint: the job ended normally


def _unwrap(model: Any) -> Any:
    return getattr(model, "module", model)  # DDP / DataParallel keep the real model in .module


class Checkpointer:
    """Save on signal, resume on start (see the module docstring). ``directory=None``: $LYASCHED_CHECKPOINT_DIR;
    with neither, checkpointing is off (``resume`` returns 0, ``should_stop`` only ever says False)."""

    def __init__(self, directory: str | os.PathLike | None = None, *, signum: int | None = None,
                 every: int = 0, install: bool = True) -> None:
        d = directory if directory is not None else os.environ.get(ENV_DIR) or None
        self.dir = Path(d) if d else None
        if signum is None:
            name = os.environ.get(ENV_SIGNAL, "USR1")
            signum = getattr(signal, name if name.startswith("SIG") else "SIG" + name, None)
            if not isinstance(signum, int):
                raise ValueError(f"${ENV_SIGNAL}={name!r} is not a signal name")
        self.signum = int(signum)
        self.every = int(every)  # also save every N steps (0: only on signal)
        self.requested = False
        self.exit_code = EXIT_CHECKPOINTED
        if install and self.dir is not None:
            signal.signal(self.signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:  # noqa: ARG002
        self.requested = True  # only a flag: saving happens between steps

    # ------------------------------------------------------------------ resume
    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        if self.dir is None:
            return None
        try:
            name = (self.dir / LATEST).read_text().strip()
        except FileNotFoundError:
            return None
        path = self.dir / name
        if not name or "/" in name or not path.is_file():
            raise RuntimeError(f"checkpoint {self.dir / LATEST} names {name!r}, which is missing")
        return path

    def resume(self, model: Any, optimizer: Any = None, *, map_location: Any = "cpu") -> int:
        """Load the newest checkpoint into ``model`` (and ``optimizer``); the step to start from."""
        import torch

        path = self.latest()
        if path is None:
            return 0
        state = torch.load(path, map_location=map_location, weights_only=False)
        _unwrap(model).load_state_dict(state["model"])
        if optimizer is not None and state.get("optimizer") is not None:
            optimizer.load_state_dict(state["optimizer"])
        rng = state.get("rng") or {}
        # RNG states must be CPU byte tensors; a map_location onto a GPU moves them there too
        if "torch" in rng:
            torch.set_rng_state(rng["torch"].cpu())
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])
        return int(state["step"]) + 1

    # ------------------------------------------------------------------ save
    def save(self, step: int, model: Any, optimizer: Any = None, extra: dict | None = None,
             *, stop: bool = False) -> Path | None:
        """Write a complete checkpoint of ``step`` (rank 0 only; other ranks return None), then its
        completion marker (``stop``: saved because a move asked, the job exits next)."""
        import torch

        if self.dir is None or _rank() != 0:
            return None
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"step-{int(step)}.pt"
        tmp = self.dir / f".{name}.tmp"
        rng: dict[str, Any] = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        state = {"step": int(step), "model": _unwrap(model).state_dict(),
                 "optimizer": optimizer.state_dict() if optimizer is not None else None, "rng": rng, **(extra or {})}
        torch.save(state, tmp)
        _fsync(tmp)
        os.replace(tmp, self.dir / name)
        ltmp = self.dir / f".{LATEST}.tmp"
        ltmp.write_text(name + "\n")
        _fsync(ltmp)
        os.replace(ltmp, self.dir / LATEST)
        for old in self.dir.glob("step-*.pt"):  # keep only the newest
            if old.name != name:
                old.unlink(missing_ok=True)
        prev = read_marker(self.dir) or {}
        marker = {"step": int(step), "n": int(prev.get("n", 0)) + 1, "stop": bool(stop), "time": time.time(),
                  "file": name}
        mtmp = self.dir / f".{MARKER}.tmp"
        mtmp.write_text(json.dumps(marker) + "\n")
        _fsync(mtmp)
        os.replace(mtmp, self.dir / MARKER)
        return self.dir / name

    def should_stop(self, step: int, model: Any = None, optimizer: Any = None) -> bool:
        """After step ``step``: save if a move was asked (every rank agrees) or ``every`` is due; True
        when the script should now exit with ``exit_code``. Pass the model/optimizer to save."""
        if self.dir is None:
            return False
        stop = _agree(self.requested)
        if stop or (self.every and (step + 1) % self.every == 0):
            if model is not None:
                self.save(step, model, optimizer, stop=stop)
            _barrier()
        return stop


def _rank() -> int:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except ImportError:
        pass
    return int(os.environ.get("RANK", "0"))


def _agree(flag: bool) -> bool:
    """Whether any rank has the flag (a MAX all-reduce under torch.distributed)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    t = torch.tensor([1.0 if flag else 0.0])
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def read_marker(directory: str | os.PathLike) -> dict | None:
    """The completion marker of the newest save in ``directory`` (None: none yet, or unreadable),
    as the job itself reads it. The service reads users' markers through
    `lyasched.userfiles` (owner checked, no links, bounded in size and time) and `parse_marker`."""
    path = Path(directory) / MARKER
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, MARKER_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return parse_marker(raw) if len(raw) <= MARKER_MAX_BYTES else None


def parse_marker(raw: bytes) -> dict | None:
    """A marker's known keys, typed; None for anything else (the move then times out and the
    job is left running)."""
    try:
        m = json.loads(raw.decode())
        return {"step": int(m["step"]), "n": int(m["n"]), "stop": m.get("stop") is True,
                "time": float(m.get("time", 0.0))}
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError, RecursionError):
        return None


def checkpoint_dir(submit_dir: str, uid: str) -> Path:
    """Where launch.sbatch has a checkpointable job save (``<submit dir>/.lyasched/ckpt-<uid>``)."""
    return Path(submit_dir) / ".lyasched" / f"ckpt-{uid}"
