"""One job's own throughput model, fitted from the step times it reports (pure, no torch).

The cluster's `CommShape` (fitted on other applications) says how an all-reduce grows with GPUs
and nodes, overlaps the backward pass and slows co-located replicas; one number, v, says how long
this model's all-reduce takes. That is all a new job has. Once the job has run, its own step
times on the placements it met say more: Pollux (OSDI'21) refits every job's throughput model
from the job's own measurements. `fit_job` does the same here as a maximum a posteriori fit:

    minimise  sum over the job's rows of (predicted/measured - 1)^2 / NOISE^2
            + sum over parameters of ((p - p_cluster) / PRIOR_SD[p])^2

over the job's own v, inter-node ratio, growth with GPUs, nodes and GPUs per node
(`CommShape.d_node_gpus`: learned once the job has run on placements with different fullest
nodes, e.g. one GPU per node), overlap and multi-GPU compute slowdown, with the cluster's values
as the prior. A job seen on one placement moves
little beyond v (the prior holds what one placement cannot identify); seen on a second, with
another GPU or node count, the growth terms follow its own data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from lyasched.costmodel.commshape import CommShape, Rows, _BOUNDS, _vec_step, fit_v
from lyasched.costmodel.cost import Profile

NOISE = 0.05  # relative scatter of one measured step time (run to run: docs/calibration.md)
# Prior widths around the cluster's values (log parameters: factors; d_*: per GPU / per doubling).
# The growth terms are held tight: two or three placements of 3-4 nodes said little about 16 nodes
# (looser priors extrapolated the growth and missed the 12-16-node rows by 30-80%: docs/calibration.md)
PRIOR_SD = {"log_v": 3.0, "log_inter": 0.7, "d_intra": 0.1, "d_inter": 0.03, "d_nodes": 0.1,
            "log_compute": 0.15, "gamma": 1.0, "d_node_gpus": 0.1}
PARAMS = tuple(PRIOR_SD)
PER_PLACEMENT = True  # rows of one placement count as one observation (see fit_job)
# What fit_job may move: "job" every parameter above; "comm" v and the inter-node ratio (what a
# `Profile` can carry: lyasched.costmodel.learn); "v" only v (the offline protocol's one number per
# application, refitted on every placement seen: the baseline)
FITS = ("job", "comm", "v")
_FREE = {"job": PARAMS, "comm": ("log_v", "log_inter"), "v": ("log_v",)}


@dataclass(frozen=True)
class JobModel:
    """One job's fitted step-time model: its compute t(b), its own shape and v."""

    profile: Profile
    shape: CommShape
    v: float
    compute_scale: float  # multi-GPU compute relative to the cluster's contention model
    grad_bytes: float | None
    rows: int  # measured rows it was fitted on

    def step_time(self, placement: Sequence[int], local_bsz: float) -> float:
        """Predicted step time (s) of ``placement`` (GPUs per node) at per-GPU batch ``local_bsz``."""
        c = self.profile.step_time(local_bsz)
        if sum(placement) <= 1:
            return c
        return self.shape.step_time(c * self.compute_scale, self.v, placement, self.grad_bytes)


def _unpack(x: np.ndarray, base: CommShape) -> tuple[float, CommShape, float]:
    p = dict(zip(PARAMS, x))
    shape = replace(base, inter_ratio=float(math.exp(p["log_inter"])), d_intra=float(p["d_intra"]),
                    d_inter=float(p["d_inter"]), d_nodes=float(p["d_nodes"]), gamma=float(p["gamma"]),
                    d_node_gpus=float(p["d_node_gpus"]))
    return float(math.exp(p["log_v"])), shape, float(math.exp(p["log_compute"]))


def _predict(shape: CommShape, v: float, cscale: float, data: Rows) -> np.ndarray:
    """Vectorised JobModel.step_time over ``data``'s multi-GPU rows."""
    x = np.array([getattr(shape, f) for f in _BOUNDS])
    f = shape.bw_share(data.grad_bytes)
    lat = shape.lat_s if f > 0 else 0.0
    bytes_s = lat * (data.grad_bytes or 0.0) / shape.lat_bytes if lat > 0 else 0.0
    return _vec_step(x, data.compute * cscale, np.full_like(data.t, v), data.g, data.n, data.k,
                     shape.parallel, f, lat, bytes_s)


def fit_job(profile: Profile, cluster: CommShape, rows: Sequence[Any], grad_bytes: float | None = None,
            fit: str = "job") -> JobModel:
    """The job's own model from its measured rows (`PlacementRow`-like: placement, local_bsz,
    step_time) with the cluster's shape as the prior; see the module doc."""
    from scipy.optimize import least_squares

    data = Rows.of(profile.model, profile.alpha, profile.beta, rows, grad_bytes, profile.knee)
    if data.t.size == 0:
        raise ValueError(f"{profile.model}: no multi-GPU rows to fit the job's own model on")
    v0 = fit_v(cluster, data)
    prior = np.array([math.log(v0), math.log(cluster.inter_ratio), cluster.d_intra, cluster.d_inter,
                      cluster.d_nodes, 0.0, cluster.gamma, cluster.d_node_gpus])
    if fit not in FITS:
        raise ValueError(f"fit must be one of {FITS}, not {fit!r}")
    sd = np.array([PRIOR_SD[p] if p in _FREE[fit] else 1e-6 for p in PARAMS])
    lo = np.array([math.log(1e-9), math.log(_BOUNDS["inter_ratio"][0]), 0.0, 0.0, 0.0, math.log(0.5),
                   _BOUNDS["gamma"][0], 0.0])
    hi = np.array([math.log(1e4), math.log(_BOUNDS["inter_ratio"][1]), _BOUNDS["d_intra"][1], _BOUNDS["d_inter"][1],
                   _BOUNDS["d_nodes"][1], math.log(2.0), _BOUNDS["gamma"][1], _BOUNDS["d_node_gpus"][1]])
    if cluster.shared_cores:  # a CPU node's overlap is not fitted (commshape.SHARED_CORES_FIXED)
        ig = PARAMS.index("gamma")
        lo[ig] = hi[ig] = cluster.gamma
        hi[ig] += 1e-9

    # rows of one placement share its all-reduce: they count as one observation, so a placement
    # measured at many batches does not outweigh the prior more than one measured at few
    labels = [tuple(r.placement) for r in rows if sum(r.placement) > 1 and r.step_time > 0]
    per = {p: labels.count(p) for p in set(labels)}
    w = np.array([1.0 / math.sqrt(per[p]) for p in labels]) if PER_PLACEMENT else np.ones(len(labels))

    def resid(x: np.ndarray) -> np.ndarray:
        v, shape, cs = _unpack(x, cluster)
        fit = w * (_predict(shape, v, cs, data) / data.t - 1.0) / NOISE
        return np.concatenate([fit, (x - prior) / sd])

    r = least_squares(resid, np.clip(prior, lo, hi), bounds=(lo, hi))
    v, shape, cs = _unpack(r.x, cluster)
    return JobModel(profile, shape, v, cs, grad_bytes, int(data.t.size))


def neighbour_order(request: tuple[int, ...], placements: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The placements a job asking for ``request`` meets, in order: the request, then the others
    nearest in GPUs and nodes (log2 of each ratio, summed: one step = doubling either). lyasched
    places the same GPUs on every node (`lyasched.policy.placement`), so such placements come
    first, and a new GPU or node count before another placement of a count already met (which
    tells the job nothing new about its growth); ties by fewer GPUs, then by label."""
    g0, n0 = sum(request), len(request)
    left = set(placements) - {request}
    order = [request] if request in placements else []
    met = {(g0, n0)}
    while left:
        def key(p: tuple[int, ...]) -> tuple[bool, bool, float, int, str]:
            return (len(set(p)) > 1, (sum(p), len(p)) in met,
                    abs(math.log2(sum(p) / g0)) + abs(math.log2(len(p) / n0)), sum(p), "".join(map(str, p)))
        nxt = min(left, key=key)
        order.append(nxt)
        met.add((sum(nxt), len(nxt)))
        left.discard(nxt)
    return order


@dataclass
class OnlineReport:
    """`online_protocol`'s result for one application: per k, the errors on what was not seen."""

    app: str
    cluster: str
    held_out: bool
    order: list[str]  # the placements in the order the job meets them (labels)
    errors: dict[int, list[float]]  # k -> |pred/measured - 1| on every row of an unseen placement
    residuals: dict[int, list[tuple[tuple[int, ...], float]]] = field(default_factory=dict)  # k -> signed
    scatter: list[float] = field(default_factory=list)  # `calibration.placement_scatter` of its rows


def online_protocol(apps: Sequence[Any], ks: Sequence[int] = (1, 2, 3), batch_fit: str = "shape",
                    fit: str = "job") -> list[OnlineReport]:
    """For every application A (`calibration.AppData`): the cluster's shape from the OTHER
    applications of A's cluster (as `leave_one_app_out`), A's compute from its 1-GPU rows; then,
    for each k, A's own model (`fit_job`) from the rows of the first k placements A meets
    (`neighbour_order` from its request, `calibration.protocol_fit_placement`), predicting every
    multi-GPU row of every other placement (scalability.csv included)."""
    from lyasched.costmodel.calibration import (PlacementRow, fit_compute, placement_scatter, protocol_fit_placement,
                                                shape_without)

    compute = {a.key: fit_compute(a.app, a.rows, batch_fit) for a in apps}
    out: list[OnlineReport] = []
    for a in apps:
        shape, _ = shape_without(a, apps, compute, "the online protocol")
        prof = compute[a.key]
        every = [r for r in list(a.rows) + list(a.scalability) if r.gpus > 1 and r.step_time > 0]
        order = neighbour_order(protocol_fit_placement(a.rows), [r.placement for r in a.rows if r.gpus > 1])
        rep = OnlineReport(a.app, a.cluster, a.held_out, [PlacementRow(p, 0, 0).label for p in order], {},
                           scatter=placement_scatter(list(a.rows) + list(a.scalability)))
        for k in ks:
            if k > len(order):
                continue
            seen_p = set(order[:k])
            job = fit_job(prof, shape, [r for r in every if r.placement in seen_p], a.grad_bytes, fit)
            rep.residuals[k] = [(r.placement, job.step_time(r.placement, r.local_bsz) / r.step_time - 1.0)
                                for r in every if r.placement not in seen_p]
            rep.errors[k] = [abs(e) for _, e in rep.residuals[k]]
        out.append(rep)
    return out
