"""Render the batch script every lyasched job runs (lyasched/templates/launch.sbatch).

The template reads its allocation from Slurm's environment at run time (the scheduler picks
the GPU count after submission) and starts one torchrun per node. Rendering only fills in
a few values; every user-supplied string is quoted so that it reaches the training script
as exactly one argument, whatever it contains (no shell injection).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from importlib import resources
from pathlib import Path
from dataclasses import dataclass
from typing import Mapping, Sequence

TEMPLATE = "launch.sbatch"
TORCHRUN_ENV = "LYASCHED_TORCHRUN"

_PLACEHOLDER_RE = re.compile(r"\{\{([a-z_]+)\}\}")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def template_text() -> str:
    return resources.files("lyasched").joinpath("templates").joinpath(TEMPLATE).read_text(encoding="utf-8")


def quote(arg: str) -> str:
    """One shell word that bash reads back as exactly ``arg``.

    shlex.quote, except that control characters (newline, carriage return, ...) are written
    as ANSI-C escapes so the script stays one command per line and sbatch, which refuses
    scripts with DOS line breaks, accepts it. NUL cannot be passed in argv at all.
    """
    if "\x00" in arg:
        raise ValueError("an argument cannot contain a NUL character")
    if not _CONTROL_RE.search(arg):
        return shlex.quote(arg)
    out = []
    for ch in arg:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif _CONTROL_RE.match(ch):
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def quote_all(args: Sequence[str]) -> str:
    return " ".join(quote(a) for a in args)


def default_torchrun() -> list[str]:
    """How the job starts torchrun: ``$LYASCHED_TORCHRUN`` (shell words), else the torchrun
    installed next to this Python, else ``python -m torch.distributed.run`` with this Python."""
    env = os.environ.get(TORCHRUN_ENV, "").strip()
    if env:
        return shlex.split(env)
    beside = Path(sys.executable).parent / "torchrun"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-m", "torch.distributed.run"]


def render_template(template: str, values: Mapping[str, str]) -> str:
    """Replace every ``{{name}}`` in one pass (substituted text is never re-scanned)."""
    names = set(_PLACEHOLDER_RE.findall(template))
    missing = names - set(values)
    if missing:
        raise KeyError(f"template needs values for {', '.join(sorted(missing))}")
    unused = set(values) - names
    if unused:
        raise KeyError(f"template has no placeholder for {', '.join(sorted(unused))}")
    return _PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], template)


@dataclass(frozen=True)
class AdaptiveLaunch:
    """What an adaptive-batch job's launch exports (lyasched.job.goodput reads it): the largest
    global batch, the learning-rate rule, the prior step time a + bt*max(0, b - kn) per micro-step
    (the cost summary's) and the largest per-GPU micro-batch that fits (0: no limit)."""

    max_batch: int
    lr_rule: str
    alpha: float = 0.0
    beta: float = 0.0
    max_local: int = 0
    knee: float = 0.0  # the prior is flat up to this per-GPU batch (the summary's kn)

    def exports(self) -> str:
        return (f"LYASCHED_MAX_BATCH={int(self.max_batch)} LYASCHED_LR_RULE={quote(self.lr_rule)} "
                f"LYASCHED_STEP_ALPHA={float(self.alpha)!r} LYASCHED_STEP_BETA={float(self.beta)!r} "
                f"LYASCHED_STEP_KNEE={float(self.knee)!r} LYASCHED_MAX_LOCAL_BATCH={int(self.max_local)}")


def render(
    command: Sequence[str],
    *,
    global_batch: int,
    uid: str,
    model: str = "",
    iterations: int | None = None,
    torchrun: Sequence[str] | None = None,
    template: str | None = None,
    checkpointable: bool = False,
    signal_lead_s: int = 120,
    adaptive: AdaptiveLaunch | None = None,
) -> str:
    """The batch script that runs ``command`` (training script and its arguments) under torchrun.

    ``model`` and ``iterations`` are exported for scripts that read them (LYASCHED_MODEL,
    LYASCHED_ITERATIONS, as jobscripts/train_example.py does). ``checkpointable``: the job gets a
    checkpoint directory and ``#SBATCH --signal=USR1@signal_lead_s`` (a checkpoint before its time
    limit too); the scheduler may move it (docs/elastic.md). ``adaptive``: the scheduler chooses the
    global batch at every (re)start (``global_batch`` is the base batch M0, exported as
    LYASCHED_BASE_BATCH; the chosen one, read from key ``cb=N`` of the cost summary in the job's
    Comment, which the service sets before the release, is LYASCHED_GLOBAL_BATCH; docs/lyasub.md)."""
    if not command:
        raise ValueError("no training script given")
    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise ValueError(f"global batch must be a positive integer, got {global_batch!r}")
    values = {
        "uid": quote(uid),
        "global_batch": str(global_batch),
        "model": quote(model),
        "iterations": str(int(iterations)) if iterations is not None else "''",
        "torchrun": quote_all(list(torchrun) if torchrun is not None else default_torchrun()),
        "command": quote_all(command),
        "checkpointable": "1" if checkpointable else "0",
        "adaptive": "1" if adaptive is not None else "0",
        "adaptive_exports": adaptive.exports() if adaptive is not None else "LYASCHED_MAX_BATCH=",
        "sbatch_signal": f"#SBATCH --signal=USR1@{int(signal_lead_s)}" if checkpointable else "# (not checkpointable: no --signal)",
    }
    return render_template(template if template is not None else template_text(), values)


def write_script(text: str, path: str | os.PathLike) -> None:
    """Write a rendered script; surrogate escapes turn back into the original argv bytes."""
    with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        f.write(text)
