"""Load (issue 5): the burst and held-jobs runs of tests/reliability/load.py at test sizes, plus the
lyasub start-up fix they rely on (a remembered signature: no torch with a cached profile).

The cluster tests (marker ``slurm``) run the same code as the benchmark with 100 submissions
from 8 processes and 1,000 held jobs (the benchmark: 1,000 and 10,000). They take the shared
lock /run/lock/lyasched-rel.lock themselves unless an ancestor (``flock ... pytest``) holds it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reliability import load as rel_load

from lyasched.submitter import model_signature_of, remember_signature, remembered_signature, signature_key

ROOT = Path(__file__).resolve().parents[1]


def test_signature_key_only_for_builtins_and_stable() -> None:
    assert signature_key("mlp", {}) == signature_key("mlp", {})
    assert signature_key("mlp", {"width": 32}) != signature_key("mlp", {})
    assert signature_key("resnet", {}) != signature_key("mlp", {})
    assert signature_key("mypkg.models:make", {}) is None  # user code may change: never cached


def test_remembered_signature_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    key = signature_key("mlp", {})
    assert remembered_signature(db, key) is None  # no file: nothing, and nothing created
    assert not db.exists()
    sig = model_signature_of("mlp", {})[1]
    remember_signature(db, key, sig)
    assert remembered_signature(db, key) == sig


NODES = "".join(
    f"NodeName=node{i} Arch=x86_64 CPUTot=8 Gres=gpu:4 GresUsed=gpu:0 NodeAddr=127.0.0.1 State=IDLE "
    "Partitions=gpu CfgTRES=cpu=8,mem=1G AllocTRES=\n" for i in (1, 2, 3)
)


def test_cached_profile_and_signature_submit_without_torch(tmp_path: Path) -> None:
    """A dry-run submit in a fresh interpreter: with the measured profile and the signature
    remembered it never imports torch; without the signature it must (the control)."""
    from lyasched.store import open_db
    from lyasched.store.costtable import put

    db = tmp_path / "c.db"
    sig = model_signature_of("mlp", {})[1]
    put(open_db(db), {"signature": sig, "device_type": "gpu", "model": "mlp", "alpha": 1e-3, "beta": 1e-5,
                      "params": 1000, "source": "measured"})
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    probe = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from lyasched.submitter import SubmitRequest, submit
        class Slurm:
            def run(self, argv, idempotent=True, input=None):
                return {NODES!r} if argv[:3] == ["scontrol", "show", "node"] else ""
        r = submit(SubmitRequest(command=[{str(script)!r}], model="mlp", global_batch=8, iterations=5,
                                 db=Path({str(db)!r}), dry_run=True), slurm=Slurm())
        print(r.profile_source, r.summary.sig, "torch" in sys.modules)
    """)

    def run() -> list[str]:
        p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        return p.stdout.split()

    assert run() == ["cache", sig, "True"]  # signature not remembered yet: torch builds the model
    remember_signature(db, signature_key("mlp", {}), sig)
    assert run() == ["cache", sig, "False"]


def test_classify_lyasub_outcomes() -> None:
    assert rel_load.classify(0, "123\n", "") == "accepted"
    assert rel_load.classify(1, "", "lyasub: error: sbatch failed: x\n") == "refused"
    assert rel_load.classify(1, "", "lyasub: warning\nlyasub: error: x\n") == "refused"
    assert rel_load.classify(1, "", "Traceback (most recent call last):\nlyasub: error: x\n") == "unclean"
    assert rel_load.classify(0, "", "") == "unclean"  # exit 0 without a job id
    assert rel_load.classify(1, "", "") == "unclean"  # silent failure


def test_one_way_to_run_as_a_test_user() -> None:
    """reliability.users builds every run-as command line (as_user, the cluster's popen, the held-job
    submitters); the suites and conftest submit as the same user."""
    import conftest
    from reliability import faults, users

    assert users.as_user_argv("lyatest", "sbatch", "-t", "5") == ["runuser", "-u", "lyatest", "--", "sbatch", "-t", "5"]
    assert users.as_user_argv("root", "scontrol", "release", "7") == ["scontrol", "release", "7"]
    assert users.as_user("root", sys.executable, "-c", "print(42)").stdout == "42\n"
    assert faults.TEST_USER == conftest.TEST_USER == users.TEST_USER


@pytest.mark.slurm
def test_burst_of_lyasub_submissions() -> None:
    r = rel_load.run_burst(n=100, procs=8)
    assert r["unclean"] == 0, r["unclean_samples"]
    assert r["accepted"] + r["refused_clean"] == 100 and r["accepted"] > 0
    assert r["lost"] == 0 and r["duplicated"] == 0 and r["orphans"] == 0, r
    assert r["not_recorded_by_service"] == 0, r
    assert r["database_locked_messages"] == 0
    assert r["service_exit"] == 0 and r["slot_errors"] == 0 and r["slots"]["n"] > 0, r


@pytest.mark.slurm
def test_one_slot_over_1000_held_jobs() -> None:
    r = rel_load.run_held(n=1000, procs=8)
    assert r["submitted"] == 1000 and r["failed"] == 0, r["errors"]
    assert r["held_in_slurm"] == 1000 and r["queued_jobs"] == 1000 and r["duplicated"] == 0
    assert r["recorded_by_service"] == 1000
    for key in ("slot_busy_first", "slot_busy_later"):
        s = r[key]
        assert not s["error"] and not s["locked"] and s["waiting"] >= 1000, s  # plus any other held job of the test user
    if r["slot_free"] is not None and r["slot_free"]["free_gpus"] > 0:
        assert r["slot_free"]["started"] > 0, r["slot_free"]
