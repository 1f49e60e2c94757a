import json
import subprocess
import sys
from pathlib import Path

import pytest

from lyasched.costmodel.calibration import (
    PlacementRow,
    balanced_placement,
    calibrate_app,
    fit_comm,
    fit_compute,
    parse_placement,
    predict,
    read_grad_bytes,
    read_parallel,
    read_placements_csv,
    read_scalability_csv,
)
from lyasched.costmodel.cost import ClusterSpec, CostModel, Link, Profile

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent


def test_parse_placement():
    assert parse_placement("1234") == (1, 2, 3, 4)
    assert parse_placement("1") == (1,)
    for bad in ["", "12a", "102", " "]:
        with pytest.raises(ValueError):
            parse_placement(bad)


def test_balanced_placement():
    assert balanced_placement(4, 10) == (3, 3, 2, 2)
    assert balanced_placement(6, 6) == (1,) * 6
    with pytest.raises(ValueError):
        balanced_placement(4, 3)


def _synthetic(alpha, beta, v, slowdown, gamma, placements, batches):
    prof = Profile("syn", alpha, beta, params=1, bytes_per_param=1)
    cm = CostModel(ClusterSpec(1, 1, intra=Link(10.0 / v), inter=Link(1.0 / v)))
    rows = [PlacementRow((1,), b, alpha + beta * b) for b in batches]
    for p in placements:
        rows += [PlacementRow(p, b, cm.iter_time_placement(prof, b, p, gamma, slowdown)) for b in batches]
    return rows


def test_fit_recovers_synthetic_parameters():
    batches = [16, 32, 64, 128, 256, 512, 1024]
    rows = _synthetic(0.02, 0.0007, 0.08, 1.1, 3.0, [(2, 2, 2, 2), (1, 3), (4, 4, 4)], batches)
    prof = fit_compute("syn", rows)
    assert prof.alpha == pytest.approx(0.02) and prof.beta == pytest.approx(0.0007)
    comm = fit_comm(prof, [r for r in rows if r.placement == (2, 2, 2, 2)])
    assert 1.0 / comm.inter.bandwidth == pytest.approx(0.08, rel=1e-3)
    assert comm.slowdown == pytest.approx(1.1, rel=1e-3)
    assert comm.overlap == pytest.approx(3.0, rel=1e-2)
    assert comm.derived == "intra" and comm.intra.bandwidth == pytest.approx(10 * comm.inter.bandwidth)
    for r in rows:
        assert predict(prof, comm, r) == pytest.approx(r.step_time, rel=1e-3)


def test_no_overlap_model_is_plain_ring():
    # gamma = 1, slowdown = 1: iter_time_placement must equal CostModel.iter_time
    rows = _synthetic(0.01, 0.001, 0.05, 1.0, 1.0, [(2, 2)], [8, 32, 128, 512])
    prof = fit_compute("syn", rows)
    comm = fit_comm(prof, [r for r in rows if r.placement == (2, 2)])
    assert comm.overlap == pytest.approx(1.0, abs=1e-3)
    cm = comm.cost_model(nodes=2, gpus_per_node=2)
    assert predict(prof, comm, PlacementRow((2, 2), 64, 1.0)) == pytest.approx(
        cm.iter_time(prof, 64 * 4, 4, spans_nodes=True), rel=1e-3
    )


def test_fit_comm_rejects_mixed_or_single_gpu_rows():
    prof = Profile("x", 0.01, 0.001, 1, 1)
    with pytest.raises(ValueError):
        fit_comm(prof, [PlacementRow((2,), 1, 1), PlacementRow((1, 1), 1, 1), PlacementRow((2,), 2, 1)])
    with pytest.raises(ValueError):
        fit_comm(prof, [PlacementRow((1,), b, 1) for b in (1, 2, 3)])


@pytest.mark.parametrize("app", ["cifar10", "imagenet"])
def test_recorded_rows_predict_held_out_placements(app):
    rows = read_placements_csv(DATA / f"placements_{app}_subset.csv")
    rep = calibrate_app(app, rows)
    assert rep.comm.fitted_on == "2222"
    # held out: every multi-GPU placement except 2222
    held = {r.placement for r in rows if r.gpus > 1} - {(2, 2, 2, 2)}
    assert rep.placements.rows == sum(1 for r in rows if r.placement in held)
    assert rep.placements.median_abs_rel_err < 0.10
    assert rep.placements.p90_abs_rel_err < 0.30
    # overlap is real in this data: the no-overlap model (gamma=1) would be far off at small batch
    assert rep.comm.overlap > 1.5


def test_fitting_on_the_wrong_thing_is_worse():
    rows = read_placements_csv(DATA / "placements_cifar10_subset.csv")
    good = calibrate_app("cifar10", rows, (2, 2, 2, 2))
    worse = calibrate_app("cifar10", rows, (2,))  # single-node: inter link only guessed
    assert worse.placements.median_abs_rel_err > good.placements.median_abs_rel_err


def test_bad_csv_is_one_clear_error(tmp_path):
    p = tmp_path / "placements.csv"
    p.write_text("placement,local_bsz,step_time,sync_time\n1,32,0.1,0\n1x,32,0.1,0\n")
    with pytest.raises(ValueError, match="placements.csv:3"):
        read_placements_csv(p)
    s = tmp_path / "scalability.csv"
    s.write_text("num_nodes,num_replicas,local_bsz,step_time,sync_time\n4,2,32,0.1,0\n")
    with pytest.raises(ValueError, match="cannot place"):
        read_scalability_csv(s)


def test_benchmark_script_json(tmp_path):
    app = tmp_path / "cifar10"
    app.mkdir()
    (app / "placements.csv").write_text((DATA / "placements_cifar10_subset.csv").read_text())
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "cost_accuracy.py"), "--protocol", "per-app", "--profiles",
         str(tmp_path), "--json"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )
    doc = json.loads(out.stdout)
    assert set(doc["apps"]) == {"cifar10"}
    assert doc["overall"]["rows"] == doc["apps"]["cifar10"]["rows"] > 100
    assert 0 < doc["overall"]["median_abs_rel_err"] < 0.10
    bad = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "cost_accuracy.py"), "--profiles", str(tmp_path / "none")],
        capture_output=True, text=True,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error:")


def test_plain_ring_baseline_is_worse_on_recorded_rows():
    rows = read_placements_csv(DATA / "placements_imagenet_subset.csv")
    plain = calibrate_app("imagenet", rows, plain=True)
    full = calibrate_app("imagenet", rows)
    assert plain.comm.overlap == 1.0 and plain.comm.slowdown == 1.0
    assert full.placements.p90_abs_rel_err < plain.placements.p90_abs_rel_err


def test_iter_time_placement_links_overlap_and_slowdown():
    prof = Profile("m", alpha=0.01, beta=0.001, params=1_000_000, bytes_per_param=4)
    cm = CostModel(ClusterSpec(2, 4, intra=Link(40e9), inter=Link(4e9)))
    assert cm.iter_time_placement(prof, 32, (1,)) == pytest.approx(prof.step_time(32))
    intra = 2 * 3 / 4 * 4e6 / 40e9
    inter = 2 * 3 / 4 * 4e6 / 4e9
    assert cm.iter_time_placement(prof, 32, (4,)) == pytest.approx(prof.step_time(32) + intra)
    assert cm.iter_time_placement(prof, 32, (2, 2)) == pytest.approx(prof.step_time(32) + inter)
    # near-perfect overlap: the larger of the two; slowdown scales compute only
    assert cm.iter_time_placement(prof, 32, (2, 2), overlap=50.0) == pytest.approx(prof.step_time(32), rel=1e-3)
    assert cm.iter_time_placement(prof, 32, (2, 2), slowdown=1.5) == pytest.approx(1.5 * prof.step_time(32) + inter)
    with pytest.raises(ValueError):
        cm.iter_time_placement(prof, 32, ())


def test_benchmark_leave_one_app_out_json(tmp_path):
    """Two clusters: the Pollux subsets (2 apps) and a one-app cluster, which borrows the shape of
    the others. Every app is scored; the protocol and the fitted placement are reported."""
    pollux, other = tmp_path / "pollux", tmp_path / "other"
    for app, src in (("cifar10", "placements_cifar10_subset.csv"), ("imagenet", "placements_imagenet_subset.csv")):
        (pollux / app).mkdir(parents=True)
        (pollux / app / "placements.csv").write_text((DATA / src).read_text())
    (other / "solo").mkdir(parents=True)
    (other / "solo" / "placements.csv").write_text((DATA / "placements_cifar10_subset.csv").read_text())
    (other / "CLUSTER").write_text("elsewhere\n")
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "cost_accuracy.py"), "--profiles", str(pollux), "--profiles",
         str(other), "--json"], capture_output=True, text=True, check=True,
    )
    doc = json.loads(out.stdout)
    assert doc["protocol"] == "leave-one-app-out"
    assert set(doc["apps"]) == {"pollux/cifar10", "pollux/imagenet", "elsewhere/solo"}
    assert doc["apps"]["pollux/cifar10"]["fit"]["shape_fitted_on"] == ["pollux/imagenet"]
    assert doc["apps"]["elsewhere/solo"]["fit"]["shape_fitted_on"] == ["pollux/cifar10", "pollux/imagenet"]
    assert doc["apps"]["pollux/cifar10"]["fit"]["fitted_on"] == "2222"
    assert doc["overall"]["rows"] == sum(a["all"]["rows"] for a in doc["apps"].values()) > 300
    assert 0 < doc["overall"]["median_abs_rel_err"] < 0.15
    one = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cost_accuracy.py"), "--profiles", str(other)],
                         capture_output=True, text=True)
    assert one.returncode == 2 and "at least two applications" in one.stderr


def test_latency_bandwidth_split_recovers_growth_and_is_used_for_unseen_apps(tmp_path):
    """Synthetic cluster: all-reduce = latency (growing like the ring's 2(g-1) hops) + bytes over
    bandwidth (growing slower). Fitted on three apps of known gradient size, the split predicts a
    held-out bandwidth-bound app that one shared growth rate cannot."""
    from lyasched.costmodel.calibration import read_grad_bytes
    from lyasched.costmodel.commshape import CommShape, Rows, fit_shape, fit_v

    lat, bw, d_bw = 4e-3, 1e9, 0.4
    truth = CommShape(gamma=1.0, s_multi=0.1, sigma=0.05, d_intra=1.0, d_intra_bw=d_bw, lat_bytes=lat * bw)

    def rows(name: str, gb: float) -> Rows:
        recs = [PlacementRow((g,), b, truth.step_time(0.002 + 1e-4 * b, lat + gb / bw, (g,), gb))
                for g in (2, 3, 4) for b in (8, 32, 128)]
        return Rows.of(name, 0.002, 1e-4, recs, gb)

    train = [rows("small", 3e5), rows("mid", 3e6), rows("large", 1e7)]
    fitted = fit_shape(train)
    assert fitted.d_intra_bw == pytest.approx(d_bw, abs=0.05)
    assert fitted.lat_bytes == pytest.approx(lat * bw, rel=0.2)
    held = rows("huge", 5e7)
    two = Rows(held.app, held.alpha, held.beta, held.b[:3], held.g[:3], held.n[:3], held.k[:3], held.t[:3], 5e7)
    v = fit_v(fitted, two)
    pred = [fitted.step_time(held.alpha + held.beta * b, v, (int(g),), 5e7) for b, g in zip(held.b, held.g)]
    assert max(abs(p / t - 1) for p, t in zip(pred, held.t)) < 0.02
    # without the gradient sizes: one growth rate, and the bandwidth-bound app is mispredicted
    single = fit_shape([Rows(r.app, r.alpha, r.beta, r.b, r.g, r.n, r.k, r.t) for r in train])
    v1 = fit_v(single, Rows(two.app, two.alpha, two.beta, two.b, two.g, two.n, two.k, two.t))
    pred1 = [single.step_time(held.alpha + held.beta * b, v1, (int(g),)) for b, g in zip(held.b, held.g)]
    assert max(abs(p / t - 1) for p, t in zip(pred1, held.t)) > 0.1
    # the size is read from the profile's comment line
    f = tmp_path / "placements.csv"
    f.write_text("# measured somewhere; grad_bytes=2678824 (float32)\nplacement,local_bsz,step_time,sync_time\n1,8,0.1,0\n")
    assert read_grad_bytes(f) == 2678824
    f.write_text("# grad_bytes=x\nplacement,local_bsz,step_time,sync_time\n1,8,0.1,0\n")
    with pytest.raises(ValueError, match="grad_bytes"):
        read_grad_bytes(f)


@pytest.mark.parametrize("shape, message", [
    ({"gamma": 0.5}, "cluster.shape.gamma must be >= 1"),
    ({"d_intra": "fast"}, "cluster.shape.d_intra must be a number"),
    ({"d_intra": 9.0}, "cluster.shape.d_intra must be <= 4"),
    ({"slope": 1.0}, "unknown key cluster.shape.slope"),
    ({"lat_bytes": -1.0}, "cluster.shape.lat_bytes must be >= 0"),
])
def test_config_shape_errors_are_one_line(shape, message):
    from lyasched.config import ConfigError, from_mapping

    with pytest.raises(ConfigError) as e:
        from_mapping({"cluster": {"shape": shape}}, source="x.toml")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_config_shape_reaches_the_cost_model():
    """[cluster] shape is what serve's (and lyasub's) ClusterSpec.shape is built from."""
    from lyasched.costmodel.commshape import CommShape
    from lyasched.config import from_mapping

    conf = from_mapping({"cluster": {"shape": {"gamma": 2.0, "d_intra": 0.5, "d_intra_bw": 0.1, "lat_bytes": 1e6}}})
    assert conf.shape == CommShape(gamma=2.0, d_intra=0.5, d_intra_bw=0.1, lat_bytes=1e6)
    assert from_mapping({}).shape is None
    prof = Profile(model="m", alpha=0.01, beta=0.001, params=10_000_000)
    plain = CostModel(ClusterSpec(nodes=1, gpus_per_node=4))
    shaped = CostModel(ClusterSpec(nodes=1, gpus_per_node=4, shape=conf.shape))
    assert shaped.iter_time(prof, 64, 4) != plain.iter_time(prof, 64, 4)
    # 4 GPUs: v*(1 + d*(g-2)) with d the bytes-weighted mix of 0.5 and 0.1
    f = conf.shape.bw_share(prof.grad_bytes)
    v = plain.comm_time(prof, 2, False)
    c = prof.step_time(16)
    assert shaped.iter_time(prof, 64, 4) == pytest.approx((c**2 + (v * (1 + ((1 - f) * 0.5 + f * 0.1) * 2))**2) ** 0.5)
    # d_node_gpus (0 by default): the policy's 8-GPU two-node placement (4, 4) pays x(1 + d*log2 4)
    across = {"gamma": 1.0, "inter_ratio": 4.0}
    base = CostModel(ClusterSpec(nodes=2, gpus_per_node=4, shape=from_mapping({"cluster": {"shape": across}}).shape))
    grown = CostModel(ClusterSpec(nodes=2, gpus_per_node=4, shape=from_mapping(
        {"cluster": {"shape": {**across, "d_node_gpus": 0.25}}}).shape))
    c8 = prof.step_time(8)
    assert grown.iter_time(prof, 64, 8, True) - c8 == pytest.approx((base.iter_time(prof, 64, 8, True) - c8) * 1.5)


def test_lyasub_bad_shape_config_exits_2(tmp_path):
    from click.testing import CliRunner

    from lyasched.cli.lyasub import main as lyasub

    p = tmp_path / "c.toml"
    p.write_text("[cluster]\nshape = { gamma = 0 }\n")
    (tmp_path / "train.py").write_text("")
    r = CliRunner().invoke(lyasub, ["--config", str(p), "--model", "mlp", "--global-batch", "64", "--iterations",
                                    "10", "--", str(tmp_path / "train.py")])
    assert r.exit_code == 2 and "cluster.shape.gamma must be >= 1" in r.output


def test_shared_cores_time_share_compute_and_the_bandwidth_part_only():
    """A node of 2 cores (parallel=2): 4 replicas run their CPU work (compute, the all-reduce's
    bandwidth part) twice slower; the latency part grows with the ring's hops only. On GPUs
    (parallel unlimited) the same shape gives the formula it gave before."""
    from lyasched.costmodel.commshape import CommShape

    gpu = CommShape(gamma=1.0, d_intra=1.0, d_intra_bw=0.3, lat_bytes=1e6)
    cpu = CommShape(gamma=1.0, d_intra=1.0, d_intra_bw=0.0, lat_bytes=1e6, parallel=2.0)
    c, v, gb = 0.02, 0.01, 3e6
    f = gpu.bw_share(gb)
    for g in (2, 3, 4):
        assert gpu.step_time(c, v, (g,), gb) == pytest.approx(c + v * (1 + ((1 - f) * 1.0 + f * 0.3) * (g - 2)))
        o = max(1.0, g / 2)
        assert cpu.step_time(c, v, (g,), gb) == pytest.approx(c * o + v * ((1 - f) * (g - 1) + f * o))
    # a latency-bound all-reduce (no gradient size known) is not slowed by the sharing
    assert cpu.comm_factor(4, 1) == pytest.approx(3.0)
    assert cpu.comm_factor(4, 1, 1e12) == pytest.approx(2.0, rel=1e-4)
    assert cpu.step_time(c, v, (1,)) == c


def test_fit_shape_on_shared_cores_fits_only_the_split_and_recovers_it():
    """Rows made by the shared-cores model: fit_shape leaves overlap and the bandwidth growth at
    their declared values and recovers latency x bandwidth and the co-location slowdown beyond
    the sharing (s_multi, sigma)."""
    from lyasched.costmodel.commshape import SHARED_CORES_FIXED, CommShape, Rows, fit_shape

    lat, bw = 4e-3, 1e9
    truth = CommShape(d_intra=1.0, s_multi=0.2, sigma=0.1, lat_bytes=lat * bw, parallel=2.0)

    def rows(name: str, gb: float) -> Rows:
        recs = [PlacementRow((g,), b, truth.step_time(0.002 + 1e-4 * b, lat + gb / bw, (g,), gb))
                for g in (2, 3, 4) for b in (8, 32, 128)]
        return Rows.of(name, 0.002, 1e-4, recs, gb)

    fitted = fit_shape([rows("small", 3e5), rows("mid", 3e6), rows("large", 5e7)], CommShape(parallel=2.0))
    assert all(getattr(fitted, p) == getattr(CommShape(), p) for p in SHARED_CORES_FIXED)
    assert fitted.parallel == 2.0 and fitted.lat_bytes == pytest.approx(lat * bw, rel=0.05)
    assert set(SHARED_CORES_FIXED) == {"gamma", "d_intra_bw"}
    assert fitted.s_multi == pytest.approx(0.2, abs=0.02) and fitted.sigma == pytest.approx(0.1, abs=0.02)


def test_benchmark_reads_cores_and_keeps_held_out_apps_out_of_every_fit(tmp_path):
    """cores= / threads_per_rank= in the profiles' headers declare the node's sharing; an app named
    by held_out= in CLUSTER is scored but trains no other app; hosts that disagree are an error."""
    cl = tmp_path / "cpu"
    head = "# measured; grad_bytes={gb}; cores=4 threads_per_rank=2\nplacement,local_bsz,step_time,sync_time\n"
    for i, (app, gb) in enumerate((("a", 3e5), ("b", 3e6), ("c", 1e7), ("d", 5e7))):
        lines = [f"{g},{b},{(0.002 + 1e-4 * b) * max(1, g / 2) + (0.004 + gb / 1e9) * (g - 1) * (1 + 0.01 * i):.6f},0"
                 for g in (1, 2, 3, 4) for b in (8, 32, 128)]
        (cl / app).mkdir(parents=True)
        (cl / app / "placements.csv").write_text(head.format(gb=int(gb)) + "\n".join(lines) + "\n")
    (cl / "CLUSTER").write_text("cpu-box held_out=d\n")
    run = [sys.executable, str(REPO / "benchmarks" / "cost_accuracy.py"), "--profiles", str(cl), "--json"]
    doc = json.loads(subprocess.run(run, capture_output=True, text=True, check=True).stdout)
    apps = doc["apps"]
    assert apps["cpu-box/d"]["held_out"] and not apps["cpu-box/a"]["held_out"]
    assert all("cpu-box/d" not in a["fit"]["shape_fitted_on"] for a in apps.values())
    assert apps["cpu-box/d"]["fit"]["shape_fitted_on"] == ["cpu-box/a", "cpu-box/b", "cpu-box/c"]
    assert all(a["fit"]["shape"]["parallel"] == 2.0 for a in apps.values())
    assert doc["overall"]["rows"] == 3 * 6 and doc["overall_held_out"]["rows"] == 6
    bad = subprocess.run(run[:-1] + ["--held-out", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "nope" in bad.stderr
    (cl / "a" / "placements.csv").write_text((cl / "a" / "placements.csv").read_text().replace("cores=4", "cores=8"))
    mixed = subprocess.run(run, capture_output=True, text=True)
    assert mixed.returncode == 2 and "different cores" in mixed.stderr


def test_link_latency_grows_with_hops_and_the_rest_of_v_time_shares():
    """With the link's latency known (lat_s), a model's 2-GPU all-reduce v splits into that latency
    (growing with the ring's hops) and the rest (bytes, and per-step sync work beyond the ring),
    which on shared cores slows by o. Two models of the same gradient bytes but different v: the
    one with more v beyond the link grows like o, not like the hops; without lat_s the shape keeps
    the proportional split of v (the form before)."""
    from lyasched.costmodel.commshape import CommShape

    lat, bw, gb = 4e-3, 1e9, 2.6e6
    cpu = CommShape(d_intra=1.0, lat_bytes=lat * bw, lat_s=lat, parallel=2.0)
    old = CommShape(d_intra=1.0, lat_bytes=lat * bw, parallel=2.0)
    f = cpu.bw_share(gb)
    for v in (lat + gb / bw, 9e-3):
        for g in (2, 3, 4):
            o = max(1.0, g / 2)
            assert cpu.comm_time(v, g, 1, gb) == pytest.approx((v - lat) * o + lat * (g - 1))
            assert old.comm_time(v, g, 1, gb) == pytest.approx(v * ((1 - f) * (g - 1) + f * o))
            assert cpu.step_time(0.01, v, (g,), gb) == pytest.approx(0.01 * o + (v - lat) * o + lat * (g - 1))
    # v equal to the link's own latency + bytes/bandwidth: both forms agree
    v0 = lat + gb / bw
    assert cpu.comm_time(v0, 4, 1, gb) == pytest.approx(old.comm_time(v0, 4, 1, gb))
    # v beyond the link's (9 ms against 6.6 ms): 4 ranks pay 2x v + 2 extra hops of 4 ms, not 3x v's latency share
    assert cpu.comm_time(9e-3, 4, 1, gb) == pytest.approx(2 * 5e-3 + 3 * 4e-3)
    assert old.comm_time(9e-3, 4, 1, gb) > cpu.comm_time(9e-3, 4, 1, gb) + 1e-3
    # GPUs (o = 1): v plus the link's growth; unknown bytes or several nodes: v * comm_factor
    gpu = CommShape(d_intra=1.0, d_intra_bw=0.3, lat_bytes=lat * bw, lat_s=lat)
    assert gpu.comm_time(9e-3, 4, 1, gb) == pytest.approx(9e-3 + lat * 2 + gb / bw * 0.3 * 2)
    assert gpu.comm_time(9e-3, 4, 1) == pytest.approx(9e-3 * gpu.comm_factor(4, 1))
    assert gpu.comm_time(9e-3, 8, 2, gb) == pytest.approx(9e-3 * gpu.comm_factor(8, 2, gb))
    assert cpu.comm_time(9e-3, 1, 1, gb) == 0.0


def test_fit_shape_recovers_the_link_latency_and_predicts_a_model_with_extra_sync_work():
    """Rows made by the link-latency form, each training model with its own sync work beyond the
    link (v = lat + V/bw + extra): fit_shape recovers lat_s; a held-out model of the same bytes as
    one of them but 3 ms more sync work is predicted from its 2-GPU rows to within 1%, where the
    proportional split (lat_s = 0) over-predicts 4 ranks by more than 5%."""
    from dataclasses import replace

    from lyasched.costmodel.commshape import CommShape, Rows, fit_shape, fit_v

    lat, bw = 4e-3, 1e9
    truth = CommShape(d_intra=1.0, lat_bytes=lat * bw, lat_s=lat, parallel=2.0)

    def rows(name: str, gb: float, extra: float) -> Rows:
        recs = [PlacementRow((g,), b, truth.step_time(0.002 + 1e-4 * b, lat + gb / bw + extra, (g,), gb))
                for g in (2, 3, 4) for b in (8, 32, 128)]
        return Rows.of(name, 0.002, 1e-4, recs, gb)

    fitted = fit_shape([rows("small", 3e5, 0.0), rows("mid", 3e6, 0.0), rows("large", 5e7, 0.0)],
                       CommShape(parallel=2.0))
    assert fitted.lat_s == pytest.approx(lat, rel=0.05)
    assert fitted.lat_bytes == pytest.approx(lat * bw, rel=0.05)
    held = rows("vgg-like", 3e6, 3e-3)
    two = Rows(held.app, held.alpha, held.beta, held.b[:3], held.g[:3], held.n[:3], held.k[:3], held.t[:3], 3e6)

    def worst(shape: CommShape) -> float:
        v = fit_v(shape, two)
        return max(abs(shape.step_time(held.alpha + held.beta * b, v, (int(g),), 3e6) / t - 1)
                   for b, g, t in zip(held.b, held.g, held.t))

    assert worst(fitted) < 0.01
    assert worst(replace(fitted, lat_s=0.0)) > 0.05


def test_config_shape_takes_the_link_latency():
    """[cluster] shape accepts lat_s (what cost_accuracy.py --json prints as apps.*.fit.shape.lat_s)."""
    from lyasched.costmodel.commshape import CommShape
    from lyasched.config import ConfigError, from_mapping

    conf = from_mapping({"cluster": {"shape": {"d_intra": 1.0, "lat_bytes": 4e6, "lat_s": 4e-3, "parallel": 2}}})
    assert conf.shape == CommShape(d_intra=1.0, lat_bytes=4e6, lat_s=4e-3, parallel=2.0)
    with pytest.raises(ConfigError, match="cluster.shape.lat_s must be >= 0"):
        from_mapping({"cluster": {"shape": {"lat_s": -1e-3}}})


def test_measure_ddp_profiles_from_raw_rebuilds_the_recorded_h200_host_recsys_rows(tmp_path):
    """The h200 host's recsys placements.csv is exactly what --from-raw makes of its repeats.csv
    (its 8-process run was cut short); a file that is not a --raw file, or no --cores, is one line
    and exit 2, and writes nothing."""
    src = REPO / "benchmarks" / "data" / "profiles-h200host" / "recsys"
    script = str(REPO / "benchmarks" / "measure_ddp_profiles.py")
    proc = subprocess.run([sys.executable, script, "--from-raw", str(src / "repeats.csv"), "--cores", "12",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    made = tmp_path / "recsys" / "placements.csv"
    assert read_placements_csv(made) == read_placements_csv(src / "placements.csv")
    assert read_grad_bytes(made) == read_grad_bytes(src / "placements.csv") == 51270664
    assert read_parallel(made) == 12
    bad = tmp_path / "bad.csv"
    bad.write_text("placement,local_bsz,step_time,sync_time\n1,16,0.03,0\n")
    for extra in (["--from-raw", str(bad), "--cores", "12"], ["--from-raw", str(src / "repeats.csv")]):
        out = tmp_path / "out2"
        proc = subprocess.run([sys.executable, script, *extra, "--out", str(out)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error:")
        assert not out.exists()


def test_by_placement_groups_signed_residuals():
    from lyasched.costmodel.calibration import by_placement

    res = [((2, 2), 0.1), ((2, 2), -0.3), ((2, 2), 0.2), ((1, 1, 1), -0.05), ((4, 4), 0.0)]
    t = by_placement(res)
    assert list(t) == ["22", "44", "111"] and t["22"]["rows"] == 3
    assert t["22"]["median_rel_err"] == pytest.approx(0.1) and t["22"]["median_abs_rel_err"] == pytest.approx(0.2)
    s = by_placement(res, "shape")
    assert list(s) == ["2x2", "2x4", "3x1"] and s["3x1"]["median_rel_err"] == pytest.approx(-0.05)


def test_two_node_allreduce_grows_with_the_gpus_per_node_and_is_fitted():
    """A two-node all-reduce grows with log2 of the GPUs on the fuller node (d_two_nodes); from
    three nodes on it does not. fit_shape recovers the term from apps measured on such a cluster."""
    from lyasched.costmodel.commshape import CommShape, Rows, fit_shape

    truth = CommShape(gamma=2.0, s_multi=0.05, inter_ratio=5.0, d_inter=0.02, d_nodes=0.1, d_two_nodes=0.4)
    base = CommShape(**{**truth.to_dict(), "d_two_nodes": 0.0})
    assert truth.comm_factor(8, 2, per_node_max=4) == pytest.approx(base.comm_factor(8, 2, per_node_max=4) * 1.8)
    assert truth.comm_factor(2, 2, per_node_max=1) == base.comm_factor(2, 2, per_node_max=1)
    assert truth.comm_factor(12, 3, per_node_max=4) == base.comm_factor(12, 3, per_node_max=4)
    placements = [(2,), (4,), (1, 1), (2, 2), (1, 4), (4, 4), (1, 1, 1), (2, 2, 2), (4, 4, 4), (2, 2, 2, 2)]

    def rows(name: str, v: float) -> Rows:
        recs = [PlacementRow(p, b, truth.step_time(0.01 + 2e-4 * b, v, p)) for p in placements for b in (8, 32, 128)]
        return Rows.of(name, 0.01, 2e-4, recs)

    fit = fit_shape([rows("a", 0.02), rows("b", 0.08), rows("c", 0.3)])
    assert fit.d_two_nodes == pytest.approx(0.4, rel=0.05)
    one_node = fit_shape([Rows.of("x", 0.01, 2e-4, [PlacementRow((g,), 8, 0.02 * g) for g in (2, 3, 4)])])
    assert one_node.d_two_nodes == 0.0  # no multi-node rows: not identifiable, stays at the default


def test_multi_node_allreduce_grows_with_the_fullest_node_and_is_fitted():
    """d_node_gpus: every multi-node all-reduce x (1 + d*log2 k), k the fullest node's GPUs; 0 (the
    default) changes nothing; the vectorised fit path agrees with step_time on mixed placements;
    fit_shape recovers it from apps with one-GPU-per-node and mixed placements."""
    from lyasched.costmodel.commshape import CommShape, Rows, fit_shape

    truth = CommShape(gamma=2.0, s_multi=0.05, inter_ratio=5.0, d_inter=0.02, d_nodes=0.1, d_two_nodes=0.3,
                      d_node_gpus=0.25)
    base = CommShape(**{**truth.to_dict(), "d_node_gpus": 0.0})
    assert base == CommShape(**{k: v for k, v in truth.to_dict().items() if k != "d_node_gpus"})
    assert truth.comm_factor(12, 4, per_node_max=4) == pytest.approx(base.comm_factor(12, 4, per_node_max=4) * 1.5)
    assert truth.comm_factor(3, 3, per_node_max=1) == base.comm_factor(3, 3, per_node_max=1)  # one GPU a node
    assert truth.comm_factor(4, 1) == base.comm_factor(4, 1)  # one node: not a multi-node all-reduce
    placements = [(2,), (4,), (1, 1), (2, 2), (1, 4), (4, 4), (1, 1, 1), (1, 1, 2), (2, 2, 2), (1, 1, 1, 4),
                  (4, 4, 4), (1, 1, 1, 1), (2, 2, 2, 2)]

    def rows(name: str, v: float) -> Rows:
        recs = [PlacementRow(p, b, truth.step_time(0.01 + 2e-4 * b, v, p)) for p in placements for b in (8, 32, 128)]
        return Rows.of(name, 0.01, 2e-4, recs)

    a = rows("a", 0.05)
    fit = fit_shape([a, rows("b", 0.08), rows("c", 0.3)])
    assert fit.d_node_gpus == pytest.approx(0.25, rel=0.05)
    from lyasched.costmodel.online import _predict

    exact = [truth.step_time(0.01 + 2e-4 * b, 0.05, p) for p in placements for b in (8, 32, 128) if sum(p) > 1]
    assert _predict(truth, 0.05, 1.0, a) == pytest.approx(exact, rel=1e-12)
    one_node = fit_shape([Rows.of("x", 0.01, 2e-4, [PlacementRow((g,), 8, 0.02 * g) for g in (2, 3, 4)])])
    assert one_node.d_node_gpus == 0.0  # no multi-node rows: not identifiable, stays at the default


def test_benchmark_online_protocol_json(tmp_path):
    """--protocol online --json: per app and k, median/p90/rows beside the existing keys."""
    pollux = tmp_path / "pollux"
    for app, src in (("cifar10", "placements_cifar10_subset.csv"), ("imagenet", "placements_imagenet_subset.csv")):
        (pollux / app).mkdir(parents=True)
        (pollux / app / "placements.csv").write_text((DATA / src).read_text())
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cost_accuracy.py"), "--protocol", "online",
                          "--profiles", str(pollux), "--json"], capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["protocol"] == "online" and set(doc["apps"]) == {"pollux/cifar10", "pollux/imagenet"}
    for app in doc["apps"].values():
        assert app["order"][0] == "2222" and set(app["online"]) == {"1", "2", "3"}
        rows = [app["online"][k]["rows"] for k in ("1", "2", "3")]
        assert rows[0] > rows[1] > rows[2] > 0  # each further placement seen leaves fewer to predict
        assert all(0 < app["online"][k]["median_abs_rel_err"] <= app["online"][k]["p90_abs_rel_err"] for k in "123")


def test_placement_scatter_is_zero_on_smooth_rows_and_sees_noise():
    from lyasched.costmodel.calibration import placement_scatter

    smooth = [PlacementRow((2, 2), b, 0.1 + 1e-3 * b + 1e-6 * b * b) for b in (4, 8, 16, 32, 64)]
    assert max(placement_scatter(smooth)) < 1e-9
    noisy = smooth[:2] + [PlacementRow((2, 2), 16, smooth[2].step_time * 1.2)] + smooth[3:]
    assert max(placement_scatter(noisy)) > 0.05
    assert placement_scatter(smooth[:4]) == [] and placement_scatter([PlacementRow((1,), 4, 1.0)]) == []


def test_benchmark_by_shape_tables_and_target_misses(tmp_path):
    """--by shape --json: each app's signed residuals by nodes x GPUs per node, and the list of
    (application, node count) that miss the target, beside the existing keys."""
    pollux = tmp_path / "pollux"
    for app, src in (("cifar10", "placements_cifar10_subset.csv"), ("imagenet", "placements_imagenet_subset.csv")):
        (pollux / app).mkdir(parents=True)
        (pollux / app / "placements.csv").write_text((DATA / src).read_text())
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cost_accuracy.py"), "--profiles", str(pollux),
                          "--by", "shape", "--json"], capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    for app in doc["apps"].values():
        table = app["by_shape"]
        assert sum(g["rows"] for g in table.values()) == app["all"]["rows"]
        assert all(-1 < g["median_rel_err"] < 1 for g in table.values())
    for m in doc["target_misses"]:
        assert m["median_abs_rel_err"] > 0.10 or m["p90_abs_rel_err"] > 0.20
