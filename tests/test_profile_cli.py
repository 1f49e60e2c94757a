"""`python -m lyasched.profile` and `lyasched profiles` end to end (real profiling, real SQLite)."""

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from lyasched.cli import main as lyasched_main
from lyasched.profile.__main__ import main as profile_main
from lyasched.store import open_db
from lyasched.store.costtable import get, put
from lyasched.profile.result import ProfileResult


def result(sig, device="NVIDIA A100-SXM4-40GB", source="measured"):
    return ProfileResult(model="resnet", signature=sig, device_type=device, device_name=device, params=1000,
                         bytes_per_param=4, alpha=0.01, beta=0.002, r2=0.99, m0=1e6, m1=2e4, source=source,
                         batches=[1, 2], step_times=[0.012, 0.014], mem_points=[1.02e6, 1.04e6])


def run_module(*args, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "lyasched.profile", *args], capture_output=True, text=True,
                          env=env, timeout=120, **kw)


def test_module_profiles_mlp_prints_json_and_stores(tmp_path):
    db = tmp_path / "c.db"
    p = run_module("mlp", "--arg", "width=32", "--batches", "1,2,4", "--warmup", "0", "--repeats", "2",
                   "--threads", "1", "--db", str(db), "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["schema_version"] == 1 and out["batches"] == [1, 2, 4] and out["source"] == "measured"
    assert out["model_args"]["width"] == 32 and out["threads"] == 1
    assert "batch 4:" in p.stderr  # progress on stderr, JSON alone on stdout
    entry = get(open_db(db), out["signature"], "cpu")
    assert entry is not None and entry.alpha == out["alpha"] and entry.params == out["params"]


def test_module_bad_spec_exits_2_with_one_line():
    p = run_module("no_such_pkg_xyz:factory")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and p.stderr.startswith("error: cannot import")


def test_cli_estimate_to_file(tmp_path):
    out = tmp_path / "est.json"
    r = CliRunner().invoke(profile_main, ["mlp", "--arg", "width=16", "--estimate", "--target", "h100", "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["source"] == "estimated" and d["device_type"] == "h100" and "ESTIMATE" in d["note"]


def test_cli_bad_inputs_exit_2():
    r = CliRunner().invoke(profile_main, ["mlp", "--batches", "1,two"])
    assert r.exit_code == 2 and "expected comma-separated integers" in r.output
    r = CliRunner().invoke(profile_main, ["notamodel"])
    assert r.exit_code == 2 and "unknown model 'notamodel'" in r.output


def test_profiles_list_show_json(tmp_path):
    db = tmp_path / "c.db"
    runner = CliRunner()
    r = runner.invoke(lyasched_main, ["profiles", "--db", str(db), "--json"])
    assert r.exit_code == 0 and json.loads(r.output) == []
    put(open_db(db), result(sig="deadbeef00000001"))
    put(open_db(db), result(sig="deadbeef00000001", device="cpu"))
    put(open_db(db), result(sig="cafe000000000002", device="h100", source="estimated"))

    r = runner.invoke(lyasched_main, ["profiles", "list", "--db", str(db), "--json"])
    rows = json.loads(r.output)
    assert {(e["signature"], e["device_type"]) for e in rows} == {
        ("deadbeef00000001", "a100"), ("deadbeef00000001", "cpu"), ("cafe000000000002", "h100")}
    r = runner.invoke(lyasched_main, ["profiles", "--db", str(db)])
    assert r.exit_code == 0 and r.output.splitlines()[0].startswith("signature") and len(r.output.splitlines()) == 4

    r = runner.invoke(lyasched_main, ["profiles", "show", "cafe", "--db", str(db)])
    assert r.exit_code == 0 and "cafe000000000002" in r.output and "estimated" in r.output
    r = runner.invoke(lyasched_main, ["profiles", "show", "deadbeef", "--db", str(db)])
    assert r.exit_code == 1 and "ambiguous" in r.output
    r = runner.invoke(lyasched_main, ["profiles", "show", "deadbeef", "--device", "NVIDIA A100-PCIE-40GB",
                                      "--db", str(db), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["device_type"] == "a100"
    r = runner.invoke(lyasched_main, ["profiles", "show", "ffff", "--db", str(db)])
    assert r.exit_code == 1 and "no profile matches" in r.output


def test_profiles_command_does_not_import_torch(tmp_path):
    code = ("import sys; from click.testing import CliRunner; from lyasched.cli import main; "
            f"r = CliRunner().invoke(main, ['profiles', '--db', {str(tmp_path / 'x.db')!r}]); "
            "assert r.exit_code == 0, r.output; print('torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "False"
