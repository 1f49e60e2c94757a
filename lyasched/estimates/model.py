"""What the estimator reads (a plain job's request, a finished job) and what it answers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    """What a plain job tells at submission: no profile, only Slurm's own fields."""

    user: str
    account: str = ""
    gpus: int = 1
    name: str = ""  # the job name (sbatch -J); "" unknown
    script: str = ""  # a key of the batch script or command (e.g. a hash); "" unknown
    time_limit: float | None = None  # seconds; None: unlimited / unknown
    partition: str = ""


@dataclass(frozen=True)
class Finished:
    """A job that ran to an end: its request, when it was submitted and started, how long it ran."""

    request: Request
    submit: float  # epoch seconds
    start: float
    elapsed: float  # seconds the allocation ran
    state: str = "COMPLETED"  # Slurm's final state (first word)

    @property
    def end(self) -> float:
        return self.start + self.elapsed


@dataclass(frozen=True)
class Estimate:
    """An expected run time and how far off such estimates have been.

    ``spread`` is the root mean square of log(actual / predicted) of the past predictions this
    source (the same history key) made for jobs that had finished by the time asked: 0 means
    always exact, 0.69 means typically off by a factor of 2. ``source`` names the history key that
    gave ``mean_s`` ("user+name+gpus", ..., "account", "limit" or "default"); ``n`` the number of
    past jobs averaged (0 for "limit"/"default").
    """

    mean_s: float
    spread: float
    source: str
    n: int
