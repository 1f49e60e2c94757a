"""Submit a training job to lyasched: the library behind `lyasub`.

``submit(request)`` validates the request (nothing touches Slurm before that), finds the
model's cost (cached profile, a one-GPU profiling job, or a FLOP estimate), renders the
launch script, and submits it as a normal Slurm job of the calling user, carrying its cost
summary in ``--comment`` and held until `lyasched serve` sizes and releases it.

Submission is idempotent per lyasched uid (a job already carrying the uid is returned, not
duplicated) and all-or-nothing: if anything fails after sbatch succeeded, the job is cancelled.
"""

from __future__ import annotations

import math
import os
import pwd
import shlex
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from lyasched.clusterview import DEVICE_ENV, GENERIC_DEVICE, ClusterView, gpu_nodes, open_links_db  # noqa: F401
from lyasched.clusterview import cluster_view as make_view
from lyasched.costmodel.cost import ClusterSpec, CostModel, Profile
from lyasched.costmodel.roofline import lookup
from lyasched.job.launcher import AdaptiveLaunch, render, write_script
from lyasched.slurm import Slurm, SlurmError, as_backend
from lyasched.slurm import submit as cmd
from lyasched.slurm.types import ACTIVE_STATES, TERMINAL_STATES, NodeInfo, is_gpu_type
from lyasched.summary import LR_RULES, MAX_GPU_TYPES, CostSummary, is_valid_uid, new_uid

PROFILE_TIME_LIMIT = "00:30:00"  # Slurm limit of the profiling job
PROFILE_MAX_BATCH = 1024  # largest per-GPU batch the profiling job measures
PROFILE_TIME_BUDGET = 300  # s: the profiler starts no new batch size after this
POLL_SECONDS = 2.0

Say = Callable[[str], None]


class RequestError(ValueError):
    """The request is invalid; nothing was submitted (lyasub exits 2)."""


class SubmitError(RuntimeError):
    """Submission failed; nothing is left behind (lyasub exits 1)."""


@dataclass
class SubmitRequest:
    """Everything `lyasub` was asked to do."""

    command: Sequence[str]  # training script and its arguments
    model: str  # example name or package.module:factory (lyasched.profile.spec)
    global_batch: int
    iterations: int | None = None
    epochs: float | None = None
    dataset_size: int | None = None
    min_gpus: int = 1
    max_gpus: int | None = None  # default: min(B, GPUs in the cluster, 1024)
    profile: bool = True  # False: FLOP estimate, no profiling job
    model_args: Mapping[str, Any] = field(default_factory=dict)
    options: cmd.SbatchOptions = field(default_factory=cmd.SbatchOptions)
    db: Path | None = None  # cost table; default lyasched.store.default_path()
    config: Path | None = None  # service config ([cluster]); default $LYASCHED_CONFIG or /etc/lyasched
    uid: str | None = None  # lyasched job uid; give the same one to make a retry idempotent
    dry_run: bool = False  # everything except sbatch of the training job
    checkpointable: bool = False  # the scheduler may move it (summary key ck; launch.sbatch checkpoint dir + --signal)
    adaptive_batch: bool = False  # the scheduler chooses the global batch in [B, max_batch] (summary keys mb, lr)
    max_batch: int | None = None
    lr_rule: str | None = None  # linear, sqrt, adascale (default with --adaptive-batch: adascale)
    gpu_types: Sequence[str] = ()  # --gpu-type a100,h100: the job runs on these GPU types only (summary key gt)
    cluster_shape: tuple[int, int] | None = None  # dry run only: (nodes, GPUs per node) instead of asking Slurm


@dataclass
class SubmitResult:
    job_id: str | None  # None on a dry run
    summary: CostSummary
    predictions: dict[int, float]  # predicted run time (s) per allowed GPU count
    profile_source: str  # "cache", "profiled" or "estimate"
    device_type: str
    cluster: ClusterSpec
    script: str
    sbatch_argv: list[str]
    reused: bool = False  # an active job with this uid already existed

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            **self.summary.as_dict(),
            "comment": self.summary.encode(),
            "profile_source": self.profile_source,
            "device_type": self.device_type,
            "predicted_run_time_s": {str(g): t for g, t in sorted(self.predictions.items())},
            "reused": self.reused,
        }


# ---------------------------------------------------------------- validation (no Slurm, no torch)


def gpu_counts_for_batch(global_batch: int, lo: int, hi: int) -> list[int]:
    """GPU counts g in [lo, hi] that split the global batch evenly with at least one sample each."""
    return [g for g in range(max(1, lo), hi + 1) if global_batch % g == 0 and global_batch // g >= 1]


def max_local_batch(profile: Profile, gpu_mem: float) -> int:
    """The largest per-GPU micro-batch that fits in ``gpu_mem`` (0: no memory model, no limit):
    what an adaptive job accumulates gradients past."""
    if profile.mem_per_sample <= 0:
        return 0
    return max(1, int((gpu_mem - profile.mem_base) // profile.mem_per_sample))


def adaptive_counts(b: int, mb: int, lo: int, hi: int) -> list[int]:
    """GPU counts g in [lo, hi] with a multiple of g between b and mb (an adaptive job's batches:
    lyasched.costmodel.goodput.batch_candidates)."""
    return [g for g in range(max(1, lo), hi + 1) if g * -(-b // g) <= mb]


def check_adaptive(req: SubmitRequest) -> int:
    """The adaptive-batch options (0: not asked for); RequestError naming the first problem."""
    if not req.adaptive_batch:
        if req.max_batch is not None or req.lr_rule is not None:
            raise RequestError("--max-batch and --lr-rule need --adaptive-batch")
        return 0
    if req.max_batch is None:
        raise RequestError("--adaptive-batch needs --max-batch N (the largest global batch the job accepts)")
    if not req.global_batch <= req.max_batch <= 1_048_576:
        raise RequestError(f"--max-batch must be in --global-batch ({req.global_batch})..1048576, got {req.max_batch}")
    if (req.lr_rule or "adascale") not in LR_RULES:
        raise RequestError(f"--lr-rule must be one of {', '.join(LR_RULES)}, got {req.lr_rule!r}")
    return req.max_batch


def check_gpu_types(types: Sequence[str]) -> tuple[str, ...]:
    """``--gpu-type`` as the summary's ``gt``: names Slurm and the summary accept, distinct, at most
    `MAX_GPU_TYPES`; RequestError naming the first problem."""
    out = tuple(types)
    for t in out:
        if not is_gpu_type(t):
            raise RequestError(f"--gpu-type: {t!r} is not a GPU type name (1-32 of A-Z a-z 0-9 _ . -, as in "
                               "Slurm's Gres=gpu:TYPE:N)")
    if len(set(out)) != len(out):
        raise RequestError(f"--gpu-type: a type is given twice in {','.join(out)}")
    if len(out) > MAX_GPU_TYPES:
        raise RequestError(f"--gpu-type: at most {MAX_GPU_TYPES} types, got {len(out)}")
    return out


def featured_nodes(nodes: Sequence[NodeInfo], constraint: str | None, partition: str | None) -> list[NodeInfo]:
    """The nodes whose Features satisfy ``constraint`` (all when none; lyasched.policy.placement);
    RequestError when none does: Slurm would never start the job."""
    from lyasched.policy.placement import parse_constraint, satisfies

    c = parse_constraint(constraint)  # checked already (check_request)
    if not c:
        return list(nodes)
    out = [n for n in nodes if satisfies(frozenset(n.features), c)]
    if not out:
        have = sorted({f for n in nodes for f in n.features})
        where = f"partition {partition!r}" if partition else "the cluster"
        raise RequestError(f"--constraint {constraint}: no GPU node of {where} has these features "
                           f"({'features there: ' + ', '.join(have) if have else 'its nodes name no features'})")
    return out


def typed_nodes(nodes: Sequence[NodeInfo], types: Sequence[str], partition: str | None) -> list[NodeInfo]:
    """The GPU nodes of the ``types`` asked for (all when none); RequestError when a type is on no node."""
    if not types:
        return list(nodes)
    present = sorted({n.gpu_type for n in nodes if n.gpu_type})
    for t in types:
        if t not in present:
            where = f"partition {partition!r}" if partition else "the cluster"
            have = f"GPU types there: {', '.join(present)}" if present else "its GPUs are untyped in Slurm"
            raise RequestError(f"--gpu-type: no node of {where} has GPU type {t!r} ({have})")
    return [n for n in nodes if n.gpu_type in types]


def check_type_memory(profile: Profile, req: SubmitRequest, view: ClusterView, max_gpus: int,
                      table: Any) -> None:
    """RequestError when a GPU type the job asked for cannot hold its smallest per-GPU batch (its
    global batch over the most GPUs it may get on that type's nodes): it would never run there."""
    from lyasched.live.typecost import node_groups, too_small

    groups = node_groups(view.nodes)
    for t in req.gpu_types:
        most = max(1, min(max_gpus, sum(groups.get(t, [])) or max_gpus))
        local = req.global_batch / most
        bad = too_small(profile, (t,), local, table)
        if bad:
            need = profile.memory(local) / 2**30
            raise RequestError(f"--gpu-type: a {t} GPU ({lookup(t, table).memory_gib:g} GiB) cannot hold the job's smallest "
                               f"batch per GPU ({local:g} samples need {need:.1f} GiB; it holds at most {int(bad[0][1])})")


def check_request(req: SubmitRequest) -> int:
    """Validate everything that needs neither Slurm nor torch; returns the iteration count."""
    check_gpu_types(req.gpu_types)
    from lyasched.policy.placement import parse_constraint

    try:
        parse_constraint(req.options.constraint)
    except ValueError as e:
        raise RequestError(str(e)) from None
    if not req.command:
        raise RequestError("no training script given (lyasub [OPTIONS] -- train.py [ARGS...])")
    script = Path(req.command[0])
    if not script.exists():
        raise RequestError(f"training script {req.command[0]!r} does not exist")
    if not script.is_file():
        raise RequestError(f"training script {req.command[0]!r} is not a file")
    if not os.access(script, os.R_OK):
        raise RequestError(f"training script {req.command[0]!r} is not readable")
    for a in req.command:
        if "\x00" in a:
            raise RequestError("arguments cannot contain NUL characters")
    b = req.global_batch
    if b < 1 or b > 1_048_576:
        raise RequestError(f"--global-batch must be in 1..1048576, got {b}")
    if req.min_gpus < 1:
        raise RequestError(f"--min-gpus must be >= 1, got {req.min_gpus}")
    if req.max_gpus is not None:
        if req.max_gpus < 1:
            raise RequestError(f"--max-gpus must be >= 1, got {req.max_gpus}")
        if req.max_gpus < req.min_gpus:
            raise RequestError(f"--max-gpus {req.max_gpus} is below --min-gpus {req.min_gpus}")
    if req.min_gpus > 1024 or (req.max_gpus or 0) > 1024:
        raise RequestError("GPU counts above 1024 are not supported")
    mb = check_adaptive(req)
    hi = req.max_gpus if req.max_gpus is not None else max(req.min_gpus, min(mb or b, 1024))
    if mb:
        if not adaptive_counts(b, mb, req.min_gpus, hi):
            raise RequestError(f"no GPU count in {req.min_gpus}..{hi} has a global batch between --global-batch {b} "
                               f"and --max-batch {mb} that it divides")
    elif not gpu_counts_for_batch(b, req.min_gpus, hi):
        raise RequestError(
            f"global batch {b} cannot be split evenly over any GPU count in {req.min_gpus}..{hi} "
            "(need B % g == 0 and B/g >= 1)"
        )
    if req.iterations is not None:
        if req.epochs is not None or req.dataset_size is not None:
            raise RequestError("give either --iterations or --epochs with --dataset-size, not both")
        if req.iterations < 1 or req.iterations > 1_000_000_000:
            raise RequestError(f"--iterations must be in 1..1000000000, got {req.iterations}")
        return req.iterations
    if req.epochs is None or req.dataset_size is None:
        raise RequestError("give --iterations N, or --epochs E with --dataset-size S")
    if not (math.isfinite(req.epochs) and req.epochs > 0):
        raise RequestError(f"--epochs must be > 0, got {req.epochs}")
    if req.dataset_size < 1:
        raise RequestError(f"--dataset-size must be > 0, got {req.dataset_size}")
    total = req.epochs * req.dataset_size / b
    if not math.isfinite(total) or total > 1_000_000_000:
        its = math.ceil(total) if math.isfinite(total) else math.inf
        raise RequestError(f"{req.epochs} epochs of {req.dataset_size} samples at batch {b} is {its} iterations "
                           "(max 1000000000)")
    return math.ceil(total)


def model_signature_of(model: str, model_args: Mapping[str, Any]) -> tuple[Any, str]:
    """Load the model spec (RequestError if unknown) and return (spec, signature). Imports torch."""
    from lyasched.profile.signature import model_signature
    from lyasched.profile.spec import SpecError, load_spec

    try:
        spec = load_spec(model, dict(model_args))
    except SpecError as e:
        raise RequestError(str(e)) from None
    return spec, model_signature(spec.model, spec.sample_shape())


def signature_key(model: str, model_args: Mapping[str, Any]) -> str | None:
    """Cache key of a built-in example's signature: name, arguments, the code that builds and
    hashes it, and torch's version (read without importing torch). None for
    ``package.module:factory`` models, whose code may change at any time: never cached."""
    import hashlib
    import importlib.metadata

    if ":" in model:
        return None
    here = Path(__file__).resolve().parent / "profile"
    h = hashlib.sha256()
    for name in ("models.py", "spec.py", "signature.py"):
        try:
            h.update((here / name).read_bytes())
        except OSError:
            return None
    try:
        h.update(importlib.metadata.version("torch").encode())
    except importlib.metadata.PackageNotFoundError:
        return None
    return f"{model}|{sorted((k, repr(v)) for k, v in model_args.items())!r}|{h.hexdigest()[:16]}"


def check_cost_table(db_path: Path) -> None:
    """The cost table opens (checked, migrated: lyasched.store.schema), or `SubmitError` with its
    one line. Before the first Slurm call: a damaged file must not send lyasub on to profile (or
    submit) as if no profile were cached. No file yet is fine (created when first written)."""
    from lyasched.store import open_db
    from lyasched.store.schema import DatabaseUnusable

    if not os.path.lexists(db_path):
        return
    try:
        open_db(db_path, what="cost table").conn.close()
    except DatabaseUnusable as e:
        raise SubmitError(str(e)) from None
    except (sqlite3.Error, OSError) as e:  # e.g. locked past the busy timeout
        raise SubmitError(f"{db_path}: cannot open the cost table: {e}") from None


def remembered_signature(db_path: Path, key: str | None) -> str | None:
    """The signature stored under ``key`` in the cost table (None if absent or unreadable)."""
    if key is None or not db_path.exists():
        return None
    from lyasched.store import open_db
    from lyasched.store.costtable import get_signature

    try:
        return get_signature(open_db(db_path), key)
    except (sqlite3.Error, OSError):
        return None


def remember_signature(db_path: Path, key: str | None, sig: str) -> None:
    """Best effort: a cost table we cannot write only costs the next lyasub its torch import."""
    if key is None:
        return
    from lyasched.store import open_db
    from lyasched.store.costtable import put_signature

    try:
        put_signature(open_db(db_path), key, sig)
    except (sqlite3.Error, OSError):
        pass


# ---------------------------------------------------------------- the cluster as lyasub sees it


def _config(config_path: Path | None, say: Say):  # -> lyasched.config.Config
    from lyasched.config import Config, ConfigError, load_config

    try:
        return load_config(config_path)
    except ConfigError as e:
        say(f"warning: {e}; using default cluster parameters")
        return Config()


def cluster_view(slurm: Slurm, partition: str | None, config_path: Path | None, say: Say,
                 gpu_types: Sequence[str] = (), constraint: str | None = None) -> ClusterView:
    """The cluster as `lyasched serve` sees it (lyasched.clusterview: the same nodes, device key and
    calibrated links, read from the service database the config names); with ``gpu_types``, the
    nodes of those types only, with ``constraint`` those with its features (the job never runs
    elsewhere)."""
    conf = _config(config_path, say)
    nodes = gpu_nodes(slurm.nodes(), partition)
    if partition and not nodes:
        raise RequestError(f"partition {partition!r} has no GPU nodes")
    if not nodes:
        raise SubmitError("Slurm reports no nodes with GPUs (Gres=gpu:N)")
    return _view(typed_nodes(featured_nodes(nodes, constraint, partition), gpu_types, partition), conf)


def _view(nodes: list, conf) -> ClusterView:
    """`make_view` with the service database's calibrated links, the database closed after."""
    links_db = open_links_db(conf.db)
    try:
        return make_view(nodes, conf, links_db)
    finally:
        if links_db is not None:
            links_db.conn.close()


def shape_view(shape: tuple[int, int], config_path: Path | None, say: Say,
               gpu_types: Sequence[str] = ()) -> ClusterView:
    """A dry run's cluster without Slurm: ``shape`` = (nodes, GPUs per node), the rest as `cluster_view`
    (the config's GPU memory and links, the service database's calibrated links). With ``gpu_types``
    the shape is taken as the nodes of those types (all of the fastest, which then keys the cost
    table as a typed Slurm node would): no Slurm to check that the types exist, so say so."""
    from lyasched.live.typecost import fastest

    conf = _config(config_path, say)
    gt = fastest(gpu_types, conf.gpu_types)
    if gpu_types:
        say(f"dry run: --cluster-shape taken as the nodes of GPU type {' or '.join(gpu_types)} "
            "(not checked against Slurm)")
    return _view([NodeInfo(f"node{i + 1}", "IDLE", shape[1], 0, gpu_type=gt) for i in range(shape[0])], conf)


def placeable(g: int, node_gpus: Sequence[int]) -> bool:
    """Whether g GPUs can ever be placed on these nodes (all free): on one node, or as equal
    shares over several (lyasched.policy.placement: Slurm gives every node of a job one count)."""
    from lyasched.policy.placement import equal_placement, one_node_placement

    free = list(node_gpus)
    return one_node_placement(free, g) is not None or equal_placement(free, g) is not None


def _counts(counts: Sequence[int]) -> str:
    c = sorted(counts)
    return f"{c[0]}-{c[-1]}" if len(c) > 3 and c == list(range(c[0], c[-1] + 1)) else ", ".join(map(str, c))


def check_one_type(counts: Sequence[int], nodes: Sequence[NodeInfo]) -> None:
    """RequestError when the job's GPU counts fit the cluster only by mixing GPU types: a job runs
    on the nodes of one type (lyasched.live.gputypes), so on typed nodes some count must be
    `placeable` on one type's nodes alone, or the job would wait forever."""
    from lyasched.live.typecost import node_groups

    groups = node_groups(nodes)
    if len(groups) < 2 or any(placeable(g, gpus) for g in counts for gpus in groups.values()):
        return
    have = ", ".join(f"{t or 'untyped'} {len(g)} node{'s' if len(g) > 1 else ''} x {max(g)} GPUs"
                     for t, g in groups.items())
    raise RequestError(
        f"the job can never be placed: a job runs on one GPU type, and its GPU counts ({_counts(counts)}) "
        f"fit on no one type's nodes ({have}); choose --global-batch, --min-gpus and --max-gpus that allow one that "
        "does, or --gpu-type"
    )


# ---------------------------------------------------------------- the job's cost


def cached_profile(db_path: Path, sig: str, device: str) -> Profile | None:
    """A measured (not estimated) profile for (signature, device) from the cost table."""
    from lyasched.store import open_db
    from lyasched.store.costtable import get

    if not db_path.exists():
        return None
    entry = get(open_db(db_path), sig, device)
    if entry is None or entry.source != "measured":
        return None
    return entry.profile(corrected=True)


def estimate(spec: Any, device: str) -> Profile:
    """FLOP-count estimate for ``device`` (or for this machine when the device is not in the table)."""
    from lyasched.profile.flops import estimate_profile
    from lyasched.profile.profiler import ProfileError

    try:
        return estimate_profile(spec, target=device).to_profile()
    except ProfileError:
        return estimate_profile(spec).to_profile()


def profile_job_options(
    req: SubmitRequest, out_file: Path, log_file: Path, db_path: Path, python: str = sys.executable,
    gpu_type: str | None = None,
) -> cmd.SbatchOptions:
    """Options of the one-GPU profiling job (a plain Slurm job: no summary, not held), on one GPU of
    ``gpu_type`` (the type the profile is for: `lyasched.live.typecost.profile_type`; None: the
    first type the job asked for, or any)."""
    # the job never runs more than B/gmin samples per GPU: measuring beyond that is wasted time
    max_batch = max(1, min(req.global_batch // max(1, req.min_gpus), PROFILE_MAX_BATCH))
    prof = [python, "-m", "lyasched.profile", req.model, "--out", str(out_file), "--db", str(db_path),
            "--max-batch", str(max_batch), "--time-budget", str(PROFILE_TIME_BUDGET), "--quiet"]
    for k, v in req.model_args.items():
        prof += ["--arg", f"{k}={v!r}" if not isinstance(v, str) else f"{k}={v}"]
    o = req.options
    opts = cmd.SbatchOptions(
        partition=o.partition, account=o.account, qos=o.qos, constraint=o.constraint, mem=o.mem,
        cpus_per_gpu=o.cpus_per_gpu, time=PROFILE_TIME_LIMIT, job_name="lyasched-profile",
        output=str(log_file), gpus_per_node=1, nodes=1, ntasks=1,
        gpu_type=gpu_type if gpu_type is not None else (req.gpu_types[0] if req.gpu_types else None),
        wrap="exec " + shlex.join(prof),
    )
    return opts


def profile_job_argv(
    req: SubmitRequest, out_file: Path, log_file: Path, db_path: Path, python: str = sys.executable
) -> list[str]:
    """sbatch argv of the profiling job (what the CLI backend runs)."""
    return cmd.sbatch_command(profile_job_options(req, out_file, log_file, db_path, python))


def wait_for_job(slurm: Slurm, job_id: str, say: Say, timeout: float, poll: float = POLL_SECONDS) -> str:
    """Poll until the job leaves the queue's active states; returns its final state. Reports
    on every state change and every 30 s."""
    t0 = time.monotonic()
    last, next_report = "", 0.0
    while True:
        job = slurm.job(job_id)  # None once purged (finished jobs stay MinJobAge seconds)
        state, reason = (job.state, job.reason) if job is not None else ("UNKNOWN", "")
        if state in TERMINAL_STATES or state == "UNKNOWN":
            return state
        waited = time.monotonic() - t0
        status = f"profiling job {job_id}: {state}"
        if state == "PENDING" and reason not in ("", "None"):
            status += f" ({reason})"
        if status != last or waited >= next_report:
            say(f"{status}, {waited:.0f}s")
            last, next_report = status, waited + 30
        if waited > timeout:
            raise TimeoutError(f"profiling job {job_id} did not finish within {timeout:.0f}s")
        time.sleep(poll)


def run_profiling_job(
    req: SubmitRequest, slurm: Slurm, db_path: Path, device: str, uid: str, say: Say, timeout: float,
    gpu_type: str | None = None,
) -> Profile:
    """Submit the one-GPU profiling job (on ``gpu_type`` when given), wait for it, read its result,
    cache it under ``device``."""
    from lyasched.profile.result import ProfileResult
    from lyasched.store import open_db
    from lyasched.store.costtable import put

    work = db_path.parent / "profile-jobs"
    work.mkdir(parents=True, exist_ok=True)
    out_file, log_file = work / f"{uid}.json", work / f"{uid}.out"
    job_id = slurm.submit(profile_job_options(req, out_file, log_file, db_path, gpu_type=gpu_type))
    on = f"one {gpu_type} GPU" if gpu_type else "one GPU"
    say(f"profiling {req.model} on {on}: Slurm job {job_id} (log {log_file})")
    try:
        state = wait_for_job(slurm, job_id, say, timeout)
    except BaseException:
        _cancel(slurm, job_id)
        raise
    if state != "COMPLETED" or not out_file.exists():
        tail = ""
        if log_file.exists():
            lines = [ln for ln in log_file.read_text(errors="replace").splitlines() if ln.strip()]
            tail = f": {lines[-1][:200]}" if lines else ""
        raise SubmitError(f"profiling job {job_id} ended {state}{tail} (log {log_file})")
    result = ProfileResult.from_json(out_file.read_text())
    if result.device_type != device:  # cache it under the cluster's key too, so the next lyasub finds it
        d = result.to_dict()
        d["device_type"] = device
        put(open_db(db_path), d)
    say(f"profiled {req.model} on {result.device_name}: alpha={result.alpha * 1e3:.3f} ms, "
        f"beta={result.beta * 1e3:.4f} ms/sample")
    return result.to_profile()


# ---------------------------------------------------------------- submission


def _cancel(slurm: Slurm, job_id: str) -> None:
    try:
        slurm.cancel(job_id)
    except SlurmError:
        pass


def find_active_job(slurm: Slurm, uid: str, user: str) -> str | None:
    """The active lyasched job of ``user`` whose summary carries ``id=<uid>`` (None if there is none)."""
    needle = f"id={uid}"
    for job in slurm.jobs(user=user):
        if job.state in ACTIVE_STATES and needle in job.comment.split(";"):
            return job.job_id
    return None


def submit_held(slurm: Slurm, opts: cmd.SbatchOptions, script: str, uid: str, user: str) -> tuple[str, bool]:
    """sbatch the script unless an active job already carries ``uid``; (job id, reused)."""
    existing = find_active_job(slurm, uid, user)
    if existing:
        return existing, True
    with tempfile.TemporaryDirectory(prefix="lyasub-") as tmp:
        path = Path(tmp) / "launch.sbatch"
        write_script(script, path)
        try:
            job_id = slurm.submit(opts, str(path))
        except SlurmError:
            # sbatch may have reached slurmctld before failing (e.g. a timeout): never submit twice
            found = find_active_job(slurm, uid, user)
            if found:
                return found, False
            raise
        except ValueError as e:  # it answered, but not with a job id
            found = find_active_job(slurm, uid, user)
            if found:
                return found, False
            raise SubmitError(str(e)) from None
    return job_id, False


def verify_submitted(slurm: Slurm, job_id: str, summary: CostSummary) -> None:
    """The job Slurm stored carries our summary intact (the plugin may not alter it)."""
    job = slurm.job(job_id)
    comment = job.comment if job is not None else ""
    try:
        stored = CostSummary.decode(comment)
    except ValueError as e:
        raise SubmitError(f"job {job_id} was stored without a valid cost summary ({e})") from None
    if stored != summary:
        raise SubmitError(f"job {job_id} carries a different cost summary than submitted")


def submit(
    req: SubmitRequest,
    *,
    slurm: Slurm | Any | None = None,
    say: Say | None = None,
    profile_timeout: float = 3600.0,
) -> SubmitResult:
    """Validate, cost, render and submit ``req``; see the module docstring."""
    say = say or (lambda _m: None)
    iterations = check_request(req)
    from lyasched.store import default_path

    db_path = Path(req.db) if req.db is not None else default_path()
    check_cost_table(db_path)  # a damaged or newer cost table: one line, before anything reaches Slurm
    # a built-in model's remembered signature spares torch when the profile is cached too
    sig_key = signature_key(req.model, req.model_args)
    spec, signature = None, remembered_signature(db_path, sig_key) if req.profile else None
    if signature is None:
        spec, signature = model_signature_of(req.model, req.model_args)  # RequestError on unknown model
        if not req.dry_run:
            remember_signature(db_path, sig_key, signature)

    uid = req.uid or new_uid()
    if not is_valid_uid(uid):
        raise RequestError(f"--uid {uid!r} must be 8-64 characters of A-Z a-z 0-9 -") from None
    types_table = _config(req.config, lambda _m: None).gpu_types  # a bad config is said once, by the view
    for t in req.gpu_types:  # a type the roofline cannot rank or predict: before anything reaches Slurm
        try:
            lookup(t, types_table)
        except ValueError as e:
            raise RequestError(f"--gpu-type: {e}") from None
    backend: Slurm | None = None  # None only on a dry run with --cluster-shape
    if req.cluster_shape is not None:  # a dry run without Slurm
        if not req.dry_run:
            raise RequestError("--cluster-shape is for --dry-run only (a submission reads the cluster from Slurm)")
        view = shape_view(req.cluster_shape, req.config, say, req.gpu_types)
    else:
        backend = as_backend(slurm) if slurm is not None else backend_for(req.config, say)
        try:
            view = cluster_view(backend, req.options.partition, req.config, say, req.gpu_types, req.options.constraint)
        except SlurmError as e:
            hint = "; --cluster-shape NODESxGPUS gives a dry run the cluster's shape instead" if req.dry_run else ""
            raise SubmitError(f"cannot read the cluster from Slurm: {e}{hint}") from None
    cluster = view.spec
    # the type the profile is of: the view's device key when it is a type of the job's nodes (the
    # fastest the job allows, lyasched.clusterview.device_key); '' for untyped nodes
    ptype = view.device_type if view.device_type in {n.gpu_type for n in view.nodes} else ""
    if req.min_gpus > cluster.total_gpus:
        raise RequestError(f"--min-gpus {req.min_gpus} exceeds the {cluster.total_gpus} GPUs of the cluster")
    max_gpus = req.max_gpus
    mb = req.max_batch if req.adaptive_batch and req.max_batch else 0
    if max_gpus is None:
        max_gpus = max(req.min_gpus, min(mb or req.global_batch, cluster.total_gpus))

    check_one_type(range(req.min_gpus, max_gpus + 1), view.nodes)  # before a profiling job runs
    # the job's cost: cached measurement > profiling job > FLOP estimate
    profile = None
    source = "estimate"
    if req.profile:
        try:
            profile = cached_profile(db_path, signature, view.device_type)
        except (sqlite3.Error, OSError) as e:
            say(f"warning: cannot read the cost table {db_path} ({e}); profiling instead")
            profile = None
        source = "cache"
        if profile is None:
            if req.dry_run:
                say("dry run: no cached profile, using the FLOP estimate instead of a profiling job")
            else:
                assert backend is not None  # --cluster-shape is refused without --dry-run
                try:
                    profile = run_profiling_job(req, backend, db_path, view.device_type, uid, say, profile_timeout,
                                                gpu_type=ptype or None)
                except SlurmError as e:
                    raise SubmitError(f"profiling job failed: {e}") from None
                except TimeoutError as e:
                    raise SubmitError(str(e)) from None
                except (OSError, sqlite3.Error, ValueError) as e:
                    raise SubmitError(f"profiling: {e}") from None
                source = "profiled"
    if profile is None:
        say(f"estimating {req.model} from FLOP counts (no profiling)")
        if spec is None:
            spec, _ = model_signature_of(req.model, req.model_args)
        profile = estimate(spec, view.device_type)
        source = "estimate"

    check_type_memory(profile, req, view, max_gpus, types_table)  # before the config's GPU memory check
    model = CostModel(cluster)
    if mb:
        from lyasched.costmodel.goodput import Adaptive, NoiseScale, allowed_counts
        from lyasched.costmodel.jobspec import Job

        counts = allowed_counts(model, Job(job_id="", profile=profile, global_batch=req.global_batch, iterations=iterations,
                                           min_gpus=req.min_gpus, max_gpus=max_gpus,
                                           adaptive=Adaptive(mb, NoiseScale.constant(1.0))))
    else:
        counts = model.allowed_counts(profile, req.global_batch, req.min_gpus, max_gpus)
    if not counts:
        local = req.global_batch / max(1, min(max_gpus, cluster.total_gpus))
        raise RequestError(
            f"no GPU count in {req.min_gpus}..{max_gpus} fits: B must split evenly and B/g samples must fit in "
            f"{cluster.gpu_mem / 2**30:.1f} GiB (needs {profile.memory(local) / 2**30:.1f} GiB at {local:g} per GPU)"
        )
    node_gpus = [n.gpus_total for n in view.nodes] or [cluster.gpus_per_node] * cluster.nodes
    if not any(placeable(g, node_gpus) for g in counts):  # accepted, it would wait forever
        raise RequestError(
            f"the job can never be placed: its GPU counts ({', '.join(map(str, counts))}) fit neither on one node "
            f"(at most {max(node_gpus)} GPUs) nor as equal shares over {len(node_gpus)} nodes (Slurm gives every node "
            "of a job the same GPU count); choose --global-batch, --min-gpus and --max-gpus that allow one that does"
        )
    check_one_type(counts, view.nodes)
    gpn = cluster.gpus_per_node
    try:
        summary = CostSummary.from_profile(
            profile, uid=uid, sig=signature, global_batch=req.global_batch,
            iterations=iterations, min_gpus=req.min_gpus, max_gpus=min(max_gpus, 1024),
            checkpointable=req.checkpointable, max_batch=mb, lr_rule=(req.lr_rule or "adascale") if mb else "",
            gpu_types=tuple(req.gpu_types), profile_type=ptype, constraint=req.options.constraint or "",
        )
    except ValueError as e:
        raise SubmitError(f"the job's cost is outside what lyasched accepts: {e}") from None
    from lyasched.live import learning  # what serve decides with: learned profile + start-up term (one lookup)

    import getpass

    predictions = learning.submit_predictions(db_path, summary, view.device_type, model, counts, getpass.getuser())

    script = render(list(req.command), global_batch=req.global_batch, uid=uid, model=req.model, iterations=iterations,
                    checkpointable=req.checkpointable,
                    adaptive=AdaptiveLaunch(summary.max_batch, summary.lr_rule, profile.alpha, profile.beta,
                                            max_local_batch(profile, cluster.gpu_mem), profile.knee) if mb else None)
    hold = False
    if not req.dry_run:
        try:
            assert backend is not None
            hold = not backend.config().has_lua_submit_plugin
        except SlurmError as e:
            raise SubmitError(f"cannot read the Slurm configuration: {e}") from None
        if hold:
            say("warning: the lyasched job_submit plugin is not configured; submitting with --hold "
                "(a user hold: you could release the job yourself, bypassing the scheduler)")
    opts = replace(
        req.options,
        comment=summary.encode(),
        gpus_per_node=req.min_gpus if req.min_gpus <= gpn else gpn,
        # the first type asked for; the service names the type of the nodes it chooses at release
        gpu_type=req.gpu_types[0] if req.gpu_types else None,
        nodes=1 if req.min_gpus <= gpn else math.ceil(req.min_gpus / gpn),
        hold=hold,
        job_name=req.options.job_name or Path(req.command[0]).name,
    )
    argv = cmd.sbatch_command(opts, "launch.sbatch")
    result = SubmitResult(None, summary, predictions, source, view.device_type, cluster, script, argv)
    if req.dry_run:
        return result
    assert backend is not None

    user = pwd.getpwuid(os.getuid()).pw_name  # the uid sbatch submits as, whatever $USER says
    try:
        job_id, reused = submit_held(backend, opts, script, uid, user)
    except SlurmError as e:
        raise SubmitError(f"sbatch failed: {e}") from None
    try:
        if not reused:
            verify_submitted(backend, job_id, summary)
    except BaseException as e:
        _cancel(backend, job_id)
        if isinstance(e, SlurmError):
            raise SubmitError(f"job {job_id} cancelled: cannot verify it ({e})") from None
        if isinstance(e, SubmitError):
            raise SubmitError(f"{e}; job {job_id} cancelled") from None
        raise
    result.job_id, result.reused = job_id, reused
    return result


def cancel(job_id: str, slurm: Slurm | Any | None = None) -> None:
    """Cancel a job lyasub submitted (used when reporting it fails)."""
    _cancel(as_backend(slurm) if slurm is not None else backend_for(None, lambda _m: None), job_id)


def backend_for(config_path: Path | None, say: Say) -> Slurm:
    """The Slurm backend the config's ``[slurm] backend`` (or $LYASCHED_SLURM_BACKEND) names; "auto"
    falls back to the CLI silently, a configured pyslurm that cannot be used is a SubmitError."""
    from lyasched.slurm.backend import BackendChoiceError, backend_choice, env_prefix, make_backend

    conf = _config(config_path, say)
    try:
        backend, _why = make_backend(backend_choice(conf.slurm_backend), prefix=env_prefix())
    except BackendChoiceError as e:
        raise SubmitError(str(e)) from None
    return backend
