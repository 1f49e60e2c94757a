"""Calibrating the cost model's communication terms from measured per-iteration times.

Pure functions, no torch. The inputs are rows of measured (placement, local batch,
step time, sync time); the outputs are a compute Profile (from single-GPU rows), a
``CommFit`` (links + overlap + multi-GPU slowdown, from ONE multi-GPU placement), and
predictions / errors for every other row. docs/calibration.md explains the model.

Why the fit is in "gradient volumes": the measured data carry no parameter count, so
the gradient size V and the link bandwidth bw cannot be told apart -- only V/bw
enters the ring all-reduce time. We therefore fit profiles with ``params=1,
bytes_per_param=1`` (grad_bytes = 1 "volume") and links whose bandwidth is in volumes
per second. With a known V, multiply the bandwidth by V to get bytes/s.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from lyasched.costmodel.cost import ClusterSpec, CostModel, Link, Profile
from lyasched.costmodel.fit import fit_linear, fit_link

if TYPE_CHECKING:
    from lyasched.costmodel.commshape import CommShape

# Prior for the intra/inter bandwidth ratio when only one kind of link was measured:
# the ratio of ClusterSpec's defaults (NVLink-class vs 100 Gb/s-class).
_DEFAULT = ClusterSpec(nodes=1, gpus_per_node=1)
INTRA_INTER_RATIO = _DEFAULT.intra.bandwidth / _DEFAULT.inter.bandwidth


@dataclass(frozen=True)
class PlacementRow:
    """One measured configuration: GPUs per node, per-GPU batch, iteration time (s)."""

    placement: tuple[int, ...]
    local_bsz: float
    step_time: float
    sync_time: float = 0.0

    @property
    def gpus(self) -> int:
        return sum(self.placement)

    @property
    def nodes(self) -> int:
        return len(self.placement)

    @property
    def label(self) -> str:
        return "".join(str(k) for k in self.placement) if max(self.placement) < 10 else "-".join(
            str(k) for k in self.placement
        )


@dataclass(frozen=True)
class CommFit:
    """Fitted communication model of one application on one cluster.

    ``intra``/``inter`` are links in gradient volumes per second (see module doc);
    ``overlap`` is gamma in (compute^g + comm^g)^(1/g); ``slowdown`` multiplies compute
    when more than one GPU runs. ``fitted_on`` names the placement used; ``derived``
    says which link was not measured but set from the other by INTRA_INTER_RATIO.
    """

    intra: Link
    inter: Link
    overlap: float
    slowdown: float
    fitted_on: str
    derived: str
    residual_median: float = 0.0

    def cost_model(self, nodes: int = 1, gpus_per_node: int = 1) -> CostModel:
        return CostModel(ClusterSpec(nodes=nodes, gpus_per_node=gpus_per_node, intra=self.intra, inter=self.inter))


@dataclass(frozen=True)
class Accuracy:
    rows: int
    median_abs_rel_err: float
    p90_abs_rel_err: float

    def as_dict(self) -> dict:
        return {"median_abs_rel_err": self.median_abs_rel_err, "p90_abs_rel_err": self.p90_abs_rel_err, "rows": self.rows}


@dataclass
class AppReport:
    """Everything `benchmarks/cost_accuracy.py` prints for one application."""

    app: str
    profile: Profile
    comm: CommFit
    placements: Accuracy
    errors: list[float] = field(default_factory=list)
    scalability: Accuracy | None = None
    scal_errors: list[float] = field(default_factory=list)
    by_nodes: dict[int, Accuracy] = field(default_factory=dict)


# ---------------------------------------------------------------- parsing


def parse_placement(text: str) -> tuple[int, ...]:
    """'1234' -> (1, 2, 3, 4): one digit per node, each the GPUs used there (1-9)."""
    s = text.strip()
    if not s or not s.isdigit() or "0" in s:
        raise ValueError(f"bad placement {text!r}: expected digits 1-9, one per node")
    return tuple(int(c) for c in s)


def balanced_placement(nodes: int, replicas: int) -> tuple[int, ...]:
    """Spread ``replicas`` GPUs over ``nodes`` nodes as evenly as possible (scalability.csv
    gives only the two counts)."""
    if nodes < 1 or replicas < nodes:
        raise ValueError(f"cannot place {replicas} replicas on {nodes} nodes with >= 1 each")
    q, r = divmod(replicas, nodes)
    return tuple(q + 1 if i < r else q for i in range(nodes))


def _data_lines(fh) -> Iterable[str]:
    """Skip '#' comment lines (test fixtures name their source that way)."""
    return (line for line in fh if not line.startswith("#"))


def _floats(rec: dict, path: Path, line: int, *names: str) -> list[float]:
    try:
        vals = [float(rec[n]) for n in names]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path}:{line}: expected numeric columns {', '.join(names)}") from None
    if any(not math.isfinite(v) or v < 0 for v in vals):
        raise ValueError(f"{path}:{line}: negative or non-finite value")
    return vals


def read_placements_csv(path: str | Path) -> list[PlacementRow]:
    """Rows of a `placements.csv` (placement,local_bsz,step_time,sync_time)."""
    p = Path(path)
    out: list[PlacementRow] = []
    with p.open(newline="") as fh:
        for i, rec in enumerate(csv.DictReader(_data_lines(fh)), start=2):
            try:
                placement = parse_placement(rec.get("placement") or "")
            except ValueError as e:
                raise ValueError(f"{p}:{i}: {e}") from None
            b, t, s = _floats(rec, p, i, "local_bsz", "step_time", "sync_time")
            out.append(PlacementRow(placement, b, t, s))
    if not out:
        raise ValueError(f"{p}: no rows")
    return out


def read_header_number(path: str | Path, key: str) -> float | None:
    """``KEY=N`` in a placements.csv's leading '#' comment lines, or None; N must be > 0."""
    p = Path(path)
    with p.open() as fh:
        for line in fh:
            if not line.startswith("#"):
                break
            for word in line.replace(";", " ").replace(",", " ").split():
                if word.startswith(f"{key}="):
                    try:
                        v = float(word.split("=", 1)[1])
                    except ValueError:
                        raise ValueError(f"{p}: {key}= needs a number") from None
                    if not math.isfinite(v) or v <= 0:
                        raise ValueError(f"{p}: {key}= must be > 0")
                    return v
    return None


def read_grad_bytes(path: str | Path) -> float | None:
    """``grad_bytes=N`` in a placements.csv's leading '#' comment lines (the model's gradient
    size: known from the model, not fitted), or None."""
    return read_header_number(path, "grad_bytes")


def read_parallel(path: str | Path) -> float | None:
    """Replicas one node of the measuring host ran side by side at full speed: its ``cores=``
    over ``threads_per_rank=`` (default 1) in the profile's header (a CPU host; what
    `CommShape.parallel` declares), or None (not recorded: a GPU profile)."""
    cores = read_header_number(path, "cores")
    if cores is None:
        return None
    return cores / (read_header_number(path, "threads_per_rank") or 1.0)


def read_scalability_csv(path: str | Path) -> list[PlacementRow]:
    """Rows of a `scalability.csv` (num_nodes,num_replicas,local_bsz,step_time,sync_time),
    as balanced placements."""
    p = Path(path)
    out: list[PlacementRow] = []
    with p.open(newline="") as fh:
        for i, rec in enumerate(csv.DictReader(_data_lines(fh)), start=2):
            n, g, b, t, s = _floats(rec, p, i, "num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
            try:
                placement = balanced_placement(int(n), int(g))
            except ValueError as e:
                raise ValueError(f"{p}:{i}: {e}") from None
            out.append(PlacementRow(placement, b, t, s))
    if not out:
        raise ValueError(f"{p}: no rows")
    return out


# ---------------------------------------------------------------- fitting


# How t(b) is fitted to the single-GPU rows: "shape" (flat-then-linear in relative error,
# lyasched.costmodel.batchshape) or "line" (the least-squares line used before; a baseline).
BATCH_FITS = ("shape", "line")


def fit_compute(model: str, rows: Iterable[PlacementRow], batch_fit: str = "shape") -> Profile:
    """t(b) from the single-GPU rows (sync_time there is ~0: nothing to all-reduce, so the whole
    step is compute): flat-then-linear (`fit_batch_shape`), or the straight line (``line``)."""
    from lyasched.costmodel.batchshape import fit_batch_shape

    single = [r for r in rows if r.gpus == 1]
    if len(single) < 2:
        raise ValueError(f"{model}: need at least 2 single-GPU rows to fit t(b), found {len(single)}")
    if batch_fit not in BATCH_FITS:
        raise ValueError(f"batch_fit must be one of {BATCH_FITS}, not {batch_fit!r}")
    if batch_fit == "line":
        f = fit_linear([r.local_bsz for r in single], [r.step_time for r in single])
        return Profile(model=model, alpha=f.intercept, beta=f.slope, params=1, bytes_per_param=1, source="measured")
    bf = fit_batch_shape([r.local_bsz for r in single], [r.step_time for r in single])
    return Profile(model=model, alpha=bf.alpha, beta=bf.beta, knee=bf.knee, params=1, bytes_per_param=1,
                   source="measured")


def _predict(profile: Profile, comm_volume_time: float, overlap: float, slowdown: float, b: np.ndarray, g: int) -> np.ndarray:
    """Vectorised iter_time_placement for one placement: comm = 2(g-1)/g * V/bw."""
    compute = profile.alpha + profile.beta * np.maximum(0.0, b - profile.knee)
    if g == 1:
        return compute
    comm = 2.0 * (g - 1) / g * comm_volume_time
    return ((slowdown * compute) ** overlap + comm**overlap) ** (1.0 / overlap)


def fit_comm(
    profile: Profile,
    rows: Sequence[PlacementRow],
    intra_inter_ratio: float = INTRA_INTER_RATIO,
    max_overlap: float = 20.0,
    plain: bool = False,
) -> CommFit:
    """Fit the link of ONE multi-GPU placement, the overlap gamma and the slowdown.

    All ``rows`` must share one placement; their local batches vary, which is what
    separates the constant all-reduce from the batch-proportional compute and lets the
    overlap exponent be identified. Latency is not identifiable from one placement (one
    g), so it is set to 0 and the whole all-reduce time is carried by V/bw; the other
    link is derived with ``intra_inter_ratio``. ``plain`` fits V/bw alone, with no
    overlap (gamma = 1) and no slowdown: the cost model's ring term as it is.
    """
    from scipy.optimize import least_squares

    labels = {r.placement for r in rows}
    if len(labels) != 1:
        raise ValueError(f"fit_comm needs the rows of exactly one placement, got {len(labels)}")
    placement = next(iter(labels))
    g = sum(placement)
    if g < 2:
        raise ValueError("fit_comm needs a multi-GPU placement")
    if len(rows) < 3:
        raise ValueError(f"fit_comm needs at least 3 batch sizes of placement {rows[0].label}, got {len(rows)}")
    b = np.array([r.local_bsz for r in rows], dtype=float)
    t = np.array([r.step_time for r in rows], dtype=float)

    def resid(x: np.ndarray) -> np.ndarray:
        v, s, gam = (x[0], 1.0, 1.0) if plain else x
        return _predict(profile, v, gam, s, b, g) / t - 1.0

    best: Any = None
    v0 = max(float(np.median(t)) * 0.3, 1e-9)
    # a few starts: the overlap exponent makes the problem mildly non-convex
    for gam0 in ((1.0,) if plain else (1.5, 3.0, 8.0)):
        if plain:
            res = least_squares(resid, [v0], bounds=([0.0], [np.inf]))
        else:
            res = least_squares(resid, [v0, 1.0, gam0], bounds=([0.0, 0.5, 1.0], [np.inf, 3.0, max_overlap]))
        if best is None or res.cost < best.cost:
            best = res
    v, s, gam = (float(best.x[0]), 1.0, 1.0) if plain else (float(x) for x in best.x)
    bw = 1.0 / v if v > 0 else float("inf")  # volumes per second
    measured = Link(bandwidth=bw, latency=0.0)
    if len(placement) > 1:
        inter, intra, derived = measured, Link(bandwidth=bw * intra_inter_ratio, latency=0.0), "intra"
    else:
        intra, inter, derived = measured, Link(bandwidth=bw / intra_inter_ratio, latency=0.0), "inter"
    label = PlacementRow(placement, 0, 0).label
    return CommFit(intra, inter, gam, s, label, derived, float(np.median(np.abs(best.fun))))


def predict(profile: Profile, comm: CommFit, row: PlacementRow) -> float:
    """Predicted step time of ``row`` through CostModel.iter_time_placement."""
    return comm.cost_model().iter_time_placement(profile, row.local_bsz, row.placement, comm.overlap, comm.slowdown)


def abs_rel_errors(profile: Profile, comm: CommFit, rows: Iterable[PlacementRow]) -> list[float]:
    return [abs(predict(profile, comm, r) / r.step_time - 1.0) for r in rows if r.step_time > 0]


def summarize(errors: Sequence[float]) -> Accuracy:
    if not errors:
        return Accuracy(0, float("nan"), float("nan"))
    e = np.asarray(errors, dtype=float)
    return Accuracy(int(e.size), float(np.median(e)), float(np.percentile(e, 90)))


def default_fit_placement(rows: Sequence[PlacementRow]) -> tuple[int, ...]:
    """The placement we fit on when none is named: a homogeneous multi-node one with 2 GPUs
    per node and the most nodes available (it crosses both kinds of link and sits in the
    middle of the GPU counts), else the multi-node placement with the most rows."""
    present = {r.placement for r in rows}
    two_per_node = sorted((p for p in present if len(p) > 1 and set(p) == {2}), key=len)
    if two_per_node:
        return two_per_node[-1]
    multi = [p for p in present if len(p) > 1] or [p for p in present if sum(p) > 1]
    if not multi:
        raise ValueError("no multi-GPU placement to fit the communication model on")
    counts = {p: sum(1 for r in rows if r.placement == p) for p in multi}
    return max(multi, key=lambda p: (counts[p], sum(p)))


def calibrate_app(
    app: str,
    rows: Sequence[PlacementRow],
    fit_placement: tuple[int, ...] | None = None,
    scalability: Sequence[PlacementRow] = (),
    plain: bool = False,
) -> AppReport:
    """Fit compute on the single-GPU rows and comm on one placement; score every other
    multi-GPU row (and the scalability rows, if given)."""
    profile = fit_compute(app, rows)
    fp = fit_placement if fit_placement is not None else default_fit_placement(rows)
    fit_rows = [r for r in rows if r.placement == fp]
    if not fit_rows:
        raise ValueError(f"{app}: placement {''.join(map(str, fp))} not in the data")
    comm = fit_comm(profile, fit_rows, plain=plain)
    held_out = [r for r in rows if r.gpus > 1 and r.placement != fp]
    errors = abs_rel_errors(profile, comm, held_out)
    report = AppReport(app, profile, comm, summarize(errors), errors)
    for n in sorted({r.nodes for r in held_out}):
        report.by_nodes[n] = summarize(abs_rel_errors(profile, comm, [r for r in held_out if r.nodes == n]))
    if scalability:
        report.scal_errors = abs_rel_errors(profile, comm, scalability)
        report.scalability = summarize(report.scal_errors)
    return report


# ---------------------------------------------------------------- all-reduce benchmark results


@dataclass(frozen=True)
class LinkFit:
    """A Link fitted from one `lyasched.job.allreduce_bench` result."""

    kind: str  # "intra" (one node) or "inter" (ranks span nodes)
    link: Link
    r2: float
    world_size: int
    backend: str
    hosts: tuple[str, ...]
    source: str


def load_bench_result(path: str | Path) -> dict:
    """Read and validate an all-reduce benchmark JSON (one-line ValueError when malformed)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise ValueError(f"{p}: cannot read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{p}: expected a JSON object from lyasched.job.allreduce_bench")
    sizes, secs = doc.get("sizes"), doc.get("seconds")
    if not isinstance(sizes, list) or not isinstance(secs, list) or len(sizes) != len(secs) or len(sizes) < 2:
        raise ValueError(f"{p}: needs equally long 'sizes' and 'seconds' lists with at least 2 entries")
    try:
        if any(float(s) <= 0 for s in sizes) or any(not math.isfinite(float(t)) or float(t) <= 0 for t in secs):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"{p}: sizes and seconds must be positive numbers") from None
    ws = doc.get("world_size")
    if not isinstance(ws, int) or ws < 2:
        raise ValueError(f"{p}: world_size must be an integer >= 2 (a link needs 2 or more ranks), got {ws!r}")
    if not isinstance(doc.get("spans_nodes"), bool):
        raise ValueError(f"{p}: missing boolean 'spans_nodes'")
    return doc


def fit_bench_result(doc: dict, source: str = "") -> LinkFit:
    """Ring model t = 2(g-1)/g * bytes/bw + 2(g-1)*lat fitted with lyasched.costmodel.fit.fit_link."""
    link, r2 = fit_link([float(s) for s in doc["sizes"]], [float(t) for t in doc["seconds"]], int(doc["world_size"]))
    kind = "inter" if doc["spans_nodes"] else "intra"
    return LinkFit(kind, link, r2, int(doc["world_size"]), str(doc.get("backend", "")),
                   tuple(doc.get("hosts") or ()), source)


# ---------------------------------------------------------------- leave one application out


@dataclass
class AppData:
    """One application's measured rows: ``cluster`` names where it was measured (the shared
    Pollux artifact, this machine...): cluster-level parameters are learned per cluster."""

    app: str
    cluster: str
    rows: list[PlacementRow]
    scalability: list[PlacementRow] = field(default_factory=list)
    parallel: float = math.inf  # replicas a node of this cluster computes side by side (CommShape.parallel)
    grad_bytes: float | None = None  # the model's gradient bytes, when known (read_grad_bytes)
    # predicted like every app but never part of another app's training set: a workload added
    # after the model's form was chosen, held out entirely
    held_out: bool = False

    @property
    def key(self) -> str:
        return f"{self.cluster}/{self.app}"


@dataclass
class HeldOutReport:
    """What `leave_one_app_out` predicts for one held-out application."""

    app: str
    cluster: str
    profile: Profile
    shape: "CommShape"
    shape_from: list[str]
    v: float
    fitted_on: str
    placements: Accuracy
    errors: list[float]
    scalability: Accuracy | None = None
    scal_errors: list[float] = field(default_factory=list)
    by_nodes: dict[int, Accuracy] = field(default_factory=dict)
    by_gpus: dict[int, Accuracy] = field(default_factory=dict)
    grad_bytes: float | None = None
    held_out: bool = False
    # every predicted row's placement and signed error (pred/measured - 1): `by_placement`
    residuals: list[tuple[tuple[int, ...], float]] = field(default_factory=list)


def by_placement(residuals: Iterable[tuple[tuple[int, ...], float]], group: str = "placement") -> dict[str, dict]:
    """Signed residuals grouped by placement label (``placement``) or by nodes x the most GPUs on
    one node (``shape``, e.g. "2x4"): rows, median signed error (> 0: predicted too slow), median
    and p90 of the absolute error. Where the model is wrong in a pattern, not at random."""
    groups: dict[str, list[float]] = {}
    for p, e in residuals:
        key = PlacementRow(p, 0, 0).label if group == "placement" else f"{len(p)}x{max(p)}"
        groups.setdefault(key, []).append(e)
    out = {}
    for key in sorted(groups, key=lambda k: (len(k) if group == "placement" else int(k.split("x")[0]), k)):
        errs = np.asarray(groups[key])
        out[key] = {"rows": int(errs.size), "median_rel_err": float(np.median(errs)),
                    "median_abs_rel_err": float(np.median(np.abs(errs))),
                    "p90_abs_rel_err": float(np.percentile(np.abs(errs), 90))}
    return out


def placement_scatter(rows: Iterable[PlacementRow]) -> list[float]:
    """|relative residual| of every multi-GPU row about its OWN placement's least-squares quadratic
    in the batch (3 parameters per placement, fitted in relative error, in-sample): how far the
    measurements scatter about any smooth curve. No model predicting a placement it has not seen
    can expect to beat it."""
    by: dict[tuple[int, ...], list[PlacementRow]] = {}
    for r in rows:
        if r.gpus > 1 and r.step_time > 0:
            by.setdefault(r.placement, []).append(r)
    out: list[float] = []
    for rs in by.values():
        if len({r.local_bsz for r in rs}) < 5:  # 3 parameters: keep 2 degrees of freedom
            continue
        b = np.array([r.local_bsz for r in rs])
        t = np.array([r.step_time for r in rs])
        a = np.vstack([np.ones_like(b), b, b * b]).T / t[:, None]
        x = np.linalg.lstsq(a, np.ones_like(t), rcond=None)[0]
        out += [float(e) for e in np.abs(a @ x - 1.0)]
    return out


def protocol_fit_placement(rows: Sequence[PlacementRow]) -> tuple[int, ...]:
    """The ONE multi-GPU placement of a held-out application the protocol may see: 2 GPUs on
    each of as many nodes as measured (`default_fit_placement`) when it has multi-node rows,
    else 2 GPUs on one node (the smallest distributed run: what a user tries first)."""
    if any(r.nodes > 1 for r in rows):
        return default_fit_placement(rows)
    present = sorted({r.placement for r in rows if r.gpus > 1}, key=sum)
    if not present:
        raise ValueError("no multi-GPU placement to fit the communication model on")
    return (2,) if (2,) in present else present[0]


def shape_without(a: AppData, apps: Sequence[AppData], compute: dict[str, Profile],
                  protocol: str) -> tuple[CommShape, list[AppData]]:
    """The communication shape fitted on every application but `a` (and the held-out ones):
    those of a's cluster when it has others, else all; with the applications it was fitted on.
    Both held-out protocols start here, so neither can see the application it predicts."""
    from lyasched.costmodel.commshape import CommShape, Rows, fit_shape

    others = [o for o in apps if o.key != a.key and not o.held_out]
    train = [o for o in others if o.cluster == a.cluster] or others
    if not train:
        raise ValueError(f"{protocol} needs at least two applications")
    return fit_shape([Rows.of(o.key, compute[o.key].alpha, compute[o.key].beta, o.rows + o.scalability,
                              o.grad_bytes, compute[o.key].knee) for o in train], CommShape(parallel=a.parallel)), train


def leave_one_app_out(apps: Sequence[AppData], fit_placement: tuple[int, ...] | None = None,
                      batch_fit: str = "shape") -> list[HeldOutReport]:
    """For every application A: fit the cluster's `CommShape` on the OTHER applications of A's
    cluster (all of them when A is its cluster's only one), A's compute t(b) on A's single-GPU
    rows and A's all-reduce time v on ONE of A's multi-GPU placements; predict every other
    multi-GPU row of A (and its scalability rows). Nothing of A but those rows is seen.
    Applications marked ``held_out`` are in no training set at all."""
    from lyasched.costmodel.commshape import Rows, fit_v

    keys = [a.key for a in apps]
    if len(set(keys)) != len(keys):
        raise ValueError("two applications with the same cluster/app name")
    compute = {a.key: fit_compute(a.app, a.rows, batch_fit) for a in apps}
    reports: list[HeldOutReport] = []
    for a in apps:
        shape, train = shape_without(a, apps, compute, "leave-one-app-out")
        prof = compute[a.key]
        fp = fit_placement if fit_placement is not None else protocol_fit_placement(a.rows)
        seen = [r for r in a.rows if r.placement == fp]
        if not seen:
            raise ValueError(f"{a.key}: placement {PlacementRow(fp, 0, 0).label} not in the data")
        v = fit_v(shape, Rows.of(a.key, prof.alpha, prof.beta, seen, a.grad_bytes, prof.knee))

        def signed(r: PlacementRow) -> float:
            return shape.step_time(prof.step_time(r.local_bsz), v, r.placement, a.grad_bytes) / r.step_time - 1.0

        def errs(rows: Iterable[PlacementRow]) -> list[float]:
            return [abs(signed(r)) for r in rows if r.step_time > 0]

        held = [r for r in a.rows if r.gpus > 1 and r.placement != fp]
        e = errs(held)
        rep = HeldOutReport(a.app, a.cluster, prof, shape, [o.key for o in train], v, PlacementRow(fp, 0, 0).label,
                            summarize(e), e, grad_bytes=a.grad_bytes, held_out=a.held_out)
        for n in sorted({r.nodes for r in held}):
            rep.by_nodes[n] = summarize(errs([r for r in held if r.nodes == n]))
        for g in sorted({r.gpus for r in held if r.nodes == 1}):
            rep.by_gpus[g] = summarize(errs([r for r in held if r.nodes == 1 and r.gpus == g]))
        rep.residuals = [(r.placement, signed(r)) for r in held + list(a.scalability) if r.step_time > 0]
        if a.scalability:
            rep.scal_errors = errs(a.scalability)
            rep.scalability = summarize(rep.scal_errors)
        reports.append(rep)
    return reports
