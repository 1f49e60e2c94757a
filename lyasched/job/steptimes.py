"""In-job step-time reporting: two calls in a training loop, one small file per job.

    from lyasched.job.steptimes import StepTimes
    steps = StepTimes()              # once, as early as possible in the script
    for batch in data:
        steps.begin()                # call 1: a training step starts
        ...forward, backward, optimizer step...
        steps.end()                  # call 2: it ended (after torch.cuda.synchronize on GPUs)
    steps.close()                    # optional: flushes (also done at exit)

Every rank appends to ``$LYASCHED_STEPS_FILE`` (set by lyasched's launch script to a file in
the job's submit directory); without that variable (a run outside lyasched) nothing is
written and the calls cost two ``perf_counter`` reads. Lines are buffered and written with one
``O_APPEND`` write per flush (every ``flush_every`` steps or seconds): ranks' batches land
whole after one another, and the reader skips any line it cannot parse. Format (tab separated):

    M <rank> <json: world, local_rank, local_bsz, nnodes, gpus_per_node, host, launcher, t_created>
    S <rank> <step> <begin, unix seconds> <duration, seconds>
    A <rank> <step> <json: batch, local, accum, m0, phi, eff, base, lr>   (adaptive jobs, rank 0)

An ``A`` line (`StepTimes.adaptive`, written by a job that opted in to the adaptive batch,
lyasched.job.goodput) says the shape of the steps from ``<step>`` on: the global batch, the
per-GPU micro-batch and accumulation steps, the base batch M0, the smoothed noise scale phi
(null before an estimate), the statistical efficiency (phi + M0)/(phi + M), the base steps done
and the learning-rate factor. Readers that predate it skip it (an unknown line type). The
latest one is also written whole to ``<report>.adaptive.json`` (replaced atomically): the small
file the service reads each slot while the job runs. `lyasched.costmodel.learn` reads the report
when the job ends. No torch import here.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import time
from pathlib import Path

ENV = "LYASCHED_STEPS_FILE"


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


class StepTimes:
    """Records each training step's wall time of this rank (see the module doc)."""

    def __init__(self, path: str | os.PathLike | None = None, local_bsz: int | None = None,
                 flush_every: int = 50, flush_seconds: float = 10.0) -> None:
        self.created = time.time()
        p = path if path is not None else os.environ.get(ENV)
        self.path = Path(p) if p else None
        self.rank = _env_int("RANK", 0)
        self.flush_every, self.flush_seconds = max(1, flush_every), flush_seconds
        self._buf: list[str] = []
        self._t0: float | None = None
        self._wall0 = 0.0
        self._step = 0
        self._last_flush = time.monotonic()
        self._fd: int | None = None
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            self._fd = None  # reporting is best effort: never fail the training job
            return
        meta = {
            "world": _env_int("WORLD_SIZE", 1), "local_rank": _env_int("LOCAL_RANK", 0),
            "local_bsz": local_bsz if local_bsz is not None else _env_int("LYASCHED_BATCH_PER_GPU", 0),
            "nnodes": _env_int("LYASCHED_NNODES", 1), "gpus_per_node": _env_int("LYASCHED_GPUS_PER_NODE", 1),
            "host": socket.gethostname(), "launcher": os.environ.get("LYASCHED_LAUNCHER", ""),
            "cluster": os.environ.get("SLURM_CLUSTER_NAME", ""), "model": os.environ.get("LYASCHED_MODEL", ""),
            "job_id": os.environ.get("SLURM_JOB_ID", ""), "t_created": self.created,
        }
        self._buf.append(f"M\t{self.rank}\t{json.dumps(meta, separators=(',', ':'))}\n")
        self.flush()
        atexit.register(self.close)

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def begin(self) -> None:
        self._wall0 = time.time()
        self._t0 = time.perf_counter()

    def end(self) -> None:
        if self._t0 is None:
            return
        dur = time.perf_counter() - self._t0
        self._t0 = None
        if self._fd is None:
            return
        self._buf.append(f"S\t{self.rank}\t{self._step}\t{self._wall0:.6f}\t{dur:.6f}\n")
        self._step += 1
        if len(self._buf) >= self.flush_every or time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def adaptive(self, info: dict) -> None:
        """Report the adaptive batch's state (an ``A`` line, see the module doc) before the next
        step; rank 0 only (every rank holds the same). Best effort, like the rest."""
        if self._fd is None or self.rank != 0 or self.path is None:
            return
        text = json.dumps(info, separators=(",", ":"), allow_nan=False)
        self._buf.append(f"A\t{self.rank}\t{self._step}\t{text}\n")
        self.flush()
        side = sidecar(self.path)
        tmp = side.with_name("." + side.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"step": self._step, "time": time.time(), **info}) + "\n")
            os.replace(tmp, side)
        except (OSError, ValueError):
            pass

    def flush(self) -> None:
        if self._fd is None or not self._buf:
            return
        data = "".join(self._buf).encode()
        self._buf.clear()
        self._last_flush = time.monotonic()
        try:
            os.write(self._fd, data)
        except OSError:
            pass

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


def sidecar(report: str | os.PathLike) -> Path:
    """The latest ``A`` line's file next to a step report (``steps-<job>.tsv`` -> ``steps-<job>.adaptive.json``)."""
    p = Path(report)
    return p.with_name(p.stem + ".adaptive.json")
