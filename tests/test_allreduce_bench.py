import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lyasched.costmodel.calibration import fit_bench_result, load_bench_result
from lyasched.cli import main
from lyasched.cli.calibrate import sbatch_script, torchrun_command
from lyasched.costmodel.cost import Link, ring_allreduce_time
from lyasched.store import open_db
from lyasched.store.cluster import load_cluster_links, save_cluster_link

DATA = Path(__file__).parent / "data"


def _result(tmp_path, name, link, ranks=4, spans=True, sizes=(1e5, 1e6, 1e7, 1e8)):
    doc = {"sizes": list(sizes), "seconds": [ring_allreduce_time(s, ranks, link) for s in sizes],
           "world_size": ranks, "backend": "nccl", "hosts": ["a", "b"] if spans else ["a"], "spans_nodes": spans}
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_parse_sizes():
    from lyasched.job.allreduce_bench import parse_sizes

    assert parse_sizes("4K,1M,64MiB,4096") == [4096, 1024**2, 64 * 1024**2]
    with pytest.raises(ValueError):
        parse_sizes("4Q")
    with pytest.raises(ValueError):
        parse_sizes("")


def test_command_builders():
    cmd = torchrun_command(4, "o.json", "4K,1M", 2, 5, python="py")
    assert cmd[:5] == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
    assert cmd[cmd.index("--out") + 1] == "o.json" and cmd[-2:] == ["--sizes", "4K,1M"]
    s = sbatch_script(2, 4, "inter.json", partition="gpu")
    assert "#SBATCH --nodes=2" in s and "#SBATCH --gpus-per-node=4" in s and "#SBATCH --partition=gpu" in s
    assert "torchrun --nnodes 2 --nproc-per-node 4" in s and "--out inter.json" in s
    r = CliRunner().invoke(main, ["calibrate", "run", "--sbatch", "--nodes", "2", "--nproc", "8", "--sizes", "1M,64M",
                                  "--out", "/shared/x y.json"])
    assert r.exit_code == 0 and r.output.startswith("#!/bin/bash")
    assert "--out '/shared/x y.json' --warmup 3 --repeats 10 --sizes 1M,64M" in r.output


def test_fit_recorded_gloo_result():
    # recorded on the 2-core development VM: 2 gloo ranks on CPU, 4 KiB .. 16 MiB
    doc = load_bench_result(DATA / "allreduce_gloo_2ranks_cpu.json")
    fit = fit_bench_result(doc)
    assert fit.kind == "intra" and fit.world_size == 2 and fit.backend == "gloo"
    # loopback gloo on this VM moves a few hundred MB/s to a few GB/s; latency well under 10 ms
    assert 1e8 < fit.link.bandwidth < 2e10
    assert 0 <= fit.link.latency < 1e-2
    assert fit.r2 > 0.8


def test_fit_store_show_synthetic(tmp_path):
    inter = _result(tmp_path, "inter.json", Link(5e9, 20e-6), ranks=8, spans=True)
    intra = _result(tmp_path, "intra.json", Link(80e9, 5e-6), ranks=4, spans=False)
    db = tmp_path / "c.db"
    r = CliRunner().invoke(main, ["calibrate", "fit", str(intra), str(inter), "--db", str(db), "--json"])
    assert r.exit_code == 0, r.output
    fits = {f["kind"]: f for f in json.loads(r.output)}
    assert fits["inter"]["bandwidth"] == pytest.approx(5e9, rel=1e-6)
    assert fits["intra"]["latency"] == pytest.approx(5e-6, rel=1e-6)
    li, le = load_cluster_links(open_db(db))
    assert li.bandwidth == pytest.approx(80e9, rel=1e-6) and le.latency == pytest.approx(20e-6, rel=1e-6)
    shown = json.loads(CliRunner().invoke(main, ["calibrate", "show", "--db", str(db), "--json"]).output)
    assert set(shown) == {"intra", "inter"} and shown["inter"]["world_size"] == 8
    # a later calibration replaces the old one of the same kind
    save_cluster_link(open_db(db), "inter", Link(1e9, 1e-4))
    assert load_cluster_links(open_db(db))[1] == Link(1e9, 1e-4)


def test_bad_results_store_nothing(tmp_path):
    db = tmp_path / "c.db"
    good = _result(tmp_path, "good.json", Link(5e9, 1e-5))
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"sizes": [1, 2], "seconds": [1, 2], "world_size": 1, "spans_nodes": False}))
    for args in ([str(good), str(one)], [str(good), str(good)], [str(tmp_path / "missing.json")]):
        r = CliRunner().invoke(main, ["calibrate", "fit", *args, "--db", str(db)])
        assert r.exit_code != 0
        assert r.output.strip().startswith("Error:") and len(r.output.strip().splitlines()) == 1
    assert load_cluster_links(open_db(db)) == (None, None)
    empty = CliRunner().invoke(main, ["calibrate", "show", "--db", str(db)])
    assert empty.exit_code == 0 and "no calibrated links" in empty.output


@pytest.mark.slow
def test_real_benchmark_two_gloo_ranks(tmp_path):
    """The real thing: torchrun starts 2 CPU processes, gloo all-reduces, rank 0 writes JSON,
    `calibrate run --store` fits and stores the intra-node link."""
    out = tmp_path / "intra.json"
    db = tmp_path / "c.db"
    r = CliRunner().invoke(main, ["calibrate", "run", "--nproc", "2", "--sizes", "4K,1M,16M", "--warmup", "1",
                                  "--repeats", "3", "--out", str(out), "--store", "--db", str(db)])
    assert r.exit_code == 0, r.output
    doc = load_bench_result(out)
    assert doc["world_size"] == 2 and doc["backend"] == "gloo" and doc["spans_nodes"] is False
    assert doc["sizes"] == [4096, 1048576, 16777216] and all(s > 0 for s in doc["seconds"])
    intra, inter = load_cluster_links(open_db(db))
    assert inter is None and intra is not None and intra.bandwidth > 0
    assert "intra: bandwidth" in r.output


def test_with_calibrated_links_replaces_only_calibrated_kinds(tmp_path):
    from lyasched.costmodel.cost import ClusterSpec
    from lyasched.store.cluster import with_calibrated_links

    db = open_db(tmp_path / "c.db")
    base = ClusterSpec(nodes=4, gpus_per_node=8)
    assert with_calibrated_links(db, base) == base
    save_cluster_link(db, "inter", Link(3e9, 7e-5))
    spec = with_calibrated_links(db, base)
    assert spec.inter == Link(3e9, 7e-5) and spec.intra == base.intra and spec.nodes == 4
