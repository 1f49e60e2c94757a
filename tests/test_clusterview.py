"""One cluster view (lyasched.clusterview) for lyasub and `lyasched serve`: the same nodes, the
same cost-table device key (LYASCHED_DEVICE_TYPE honoured by both) and the calibrated links of
the service database, so the run time lyasub prints for a GPU count is the one the service
records and decides with for that job."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_service import NODE_LINE, FakeJob, FakeSlurm, StartAs

from lyasched.clusterview import DEVICE_ENV, cluster_view, device_key, gpu_nodes
from lyasched.config import Config, load_config
from lyasched.costmodel.cost import Link
from lyasched.live import observe as observe_module  # where the service reads its cluster view
from lyasched.service import Service
from lyasched.slurm import query as q
from lyasched.store import jobrecord, records
from lyasched.store.cluster import save_cluster_links
from lyasched.submitter import SubmitRequest, submit

CALIBRATED_INTER = Link(bandwidth=1.5e9, latency=2e-4)  # far from the config's default links


class TypedGpuSlurm(FakeSlurm):
    """FakeSlurm whose nodes report typed GPUs (Gres=gpu:a100:4), as a real cluster's may."""

    def run(self, args, *, idempotent=True, input=None):
        out = super().run(args, idempotent=idempotent, input=input)
        if list(args)[:3] == ["scontrol", "show", "node"]:
            out = out.replace("Gres=gpu:", "Gres=gpu:a100:").replace("GresUsed=gpu:", "GresUsed=gpu:a100:")
        return out


def nodes_of(slurm: FakeSlurm):
    return q.parse_nodes(slurm.run(["scontrol", "show", "node", "-o", "-d"]))


def test_device_key_order() -> None:
    nodes = nodes_of(TypedGpuSlurm())
    assert [n.gpu_type for n in nodes] == ["a100"] * 3
    assert device_key("", nodes, env={}) == "a100"  # the Gres type
    assert device_key("NVIDIA H100 80GB HBM3", nodes, env={}) == "h100"  # the config, as the cost table keys it
    assert device_key("", nodes, env={DEVICE_ENV: "V100"}) == "v100"  # the environment first
    assert device_key("", nodes_of(FakeSlurm()), env={}) == "gpu"  # untyped Gres


def test_calibrated_links_replace_the_config(tmp_path: Path) -> None:
    db = records.open_records(tmp_path / "s.db")
    nodes = gpu_nodes(nodes_of(FakeSlurm()))
    plain = cluster_view(nodes, Config(), None, env={})
    assert plain.spec.inter == Config().inter and (plain.spec.nodes, plain.spec.gpus_per_node) == (3, 4)
    save_cluster_links(db, [{"kind": "inter", "link": CALIBRATED_INTER}])
    cal = cluster_view(nodes, Config(), db, env={})
    assert cal.spec.inter == CALIBRATED_INTER and cal.spec.intra == plain.spec.intra  # intra never calibrated


@pytest.mark.parametrize("env_device", [None, "h100"])
def test_lyasub_prints_what_serve_decides_with(tmp_path: Path, monkeypatch, env_device) -> None:
    """lyasub (dry run) and one service slot on the same cluster and config: the same view, and the
    predictions lyasub prints equal the run times the service recorded for the held job."""
    if env_device:
        monkeypatch.setenv(DEVICE_ENV, env_device)
    else:
        monkeypatch.delenv(DEVICE_ENV, raising=False)
    dbp = tmp_path / "lyasched.db"
    db = records.open_records(dbp)
    save_cluster_links(db, [{"kind": "inter", "link": CALIBRATED_INTER}])
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[service]\ndb = "{dbp}"\nslot_seconds = 2\n')
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    slurm = TypedGpuSlurm()
    sub = submit(SubmitRequest(command=[str(script)], model="mlp", global_batch=64, iterations=50000, min_gpus=1,
                               max_gpus=8, profile=False, db=tmp_path / "user.db", config=cfg, dry_run=True),
                 slurm=slurm)  # the user's own cost table: the links come from the service database the config names

    slurm.jobs.append(FakeJob("201", sub.summary.encode(), limit="UNLIMITED"))
    seen: list = []  # the view the service's slot built (it keeps it in the slot's context only)
    real = observe_module.cluster_view

    def spy(*a, **kw):
        seen.append(real(*a, **kw))
        return seen[-1]

    monkeypatch.setattr(observe_module, "cluster_view", spy)
    svc = Service(load_config(cfg), db, slurm=slurm, policy=StartAs({}), clock=lambda: 1_000_100.0)
    svc.run_slot()
    [view] = seen
    assert view.device_type == sub.device_type == (env_device or "a100")
    assert view.spec == sub.cluster and sub.cluster.inter == CALIBRATED_INTER

    rec = jobrecord.job(db, sub.summary.uid)
    assert rec is not None and rec.state == "waiting"
    gpn = sub.cluster.gpus_per_node
    recorded = {g: (rec.pred_one if g <= gpn else rec.pred_multi)[g - 1] for g in sub.predictions}
    assert all(math.isfinite(t) for t in recorded.values()), recorded
    for g, t in sub.predictions.items():
        assert recorded[g] == pytest.approx(t, abs=2e-3), (g, recorded[g], t)  # records keep 3 decimals
    assert len({round(t, 3) for t in sub.predictions.values()}) > 1  # the counts differ: not a constant


def test_the_views_differed_before(tmp_path: Path) -> None:
    """The control: the config's links alone (what lyasub used) give other multi-node run times than
    the calibrated ones (what serve used), so the test above can fail."""
    from lyasched.costmodel.cost import CostModel
    from lyasched.summary import CostSummary

    nodes = gpu_nodes(nodes_of(FakeSlurm()))
    db = records.open_records(tmp_path / "s.db")
    save_cluster_links(db, [{"kind": "inter", "link": CALIBRATED_INTER}])
    s = CostSummary(uid="ctl00000001", sig="cnn:test", global_batch=64, iterations=200, min_gpus=1, max_gpus=8,
                    alpha=0.01, beta=0.002, params=1_000_000)
    plain = CostModel(cluster_view(nodes, Config(), None, env={}).spec)
    cal = CostModel(cluster_view(nodes, Config(), db, env={}).spec)
    p = s.to_profile()
    assert plain.run_time(p, 64, 200, 8, True) != pytest.approx(cal.run_time(p, 64, 200, 8, True), rel=1e-3)
