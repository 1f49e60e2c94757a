"""The SQLite cost table: upserts, lookups and the bounded online refinement rule."""

import json
import subprocess
import sys

import pytest

from lyasched.profile.result import ProfileResult
from lyasched.store import open_db
from lyasched.store import costtable as ct


def result(sig="abc123", device="NVIDIA A100-SXM4-40GB", alpha=0.01, beta=0.002, source="measured", **kw):
    base = dict(
        model="resnet", signature=sig, device_type=device, device_name=device, params=1000, bytes_per_param=4,
        alpha=alpha, beta=beta, r2=0.99, m0=1e6, m1=2e4, source=source, batches=[1, 2, 4],
        step_times=[alpha + beta, alpha + 2 * beta, alpha + 4 * beta], mem_points=[1.02e6, 1.04e6, 1.08e6],
    )
    base.update(kw)
    return ProfileResult(**base)


@pytest.fixture
def db(tmp_path):
    return open_db(tmp_path / "cost.db")


def test_put_get_roundtrip_and_device_name_normalisation(db):
    e = ct.put(db, result())
    assert e.device_type == "a100" and e.grad_bytes == 4000 and e.correction == 1.0 and e.observations == 0
    got = ct.get(db, "abc123", "a100")
    assert got == e == ct.get(db, "abc123", "NVIDIA A100-SXM4-80GB")
    assert got.step_points == {"batches": [1, 2, 4], "seconds": pytest.approx([0.012, 0.014, 0.018])}
    assert got.mem_points["bytes"] == [1.02e6, 1.04e6, 1.08e6]
    assert json.loads(db.execute("select result_json from profiles").fetchone()[0])["schema_version"] == 1
    assert ct.get(db, "abc123", "h100") is None and ct.get(db, "nope", "a100") is None
    p = ct.get_profile(db, "abc123", "a100")
    assert (p.alpha, p.beta, p.params, p.mem_base, p.mem_per_sample, p.source) == (0.01, 0.002, 1000, 1e6, 2e4, "measured")


def test_put_accepts_a_dict(db):
    assert ct.put(db, result().to_dict()).alpha == 0.01


def test_upsert_replaces_fit_keeps_created_and_resets_refinement(db):
    first = ct.put(db, result())
    ct.refine(db, "abc123", "a100", predicted_s=100, observed_s=150)
    second = ct.put(db, result(alpha=0.02))
    assert len(ct.list_entries(db)) == 1
    assert second.alpha == 0.02 and second.created == first.created
    assert second.correction == 1.0 and second.observations == 0 and second.last_ratio is None


def test_estimate_never_replaces_measurement_but_measurement_replaces_estimate(db):
    ct.put(db, result(sig="m", alpha=0.01))
    assert ct.put(db, result(sig="m", alpha=0.5, source="estimated")).alpha == 0.01
    ct.put(db, result(sig="e", alpha=0.5, source="estimated", r2=float("nan")))
    assert ct.get(db, "e", "a100").r2 is None
    assert ct.put(db, result(sig="e", alpha=0.03)).source == "measured"


def test_list_entries_newest_first_and_per_device(db):
    ct.put(db, result(sig="one"))
    ct.put(db, result(sig="one", device="cpu"))
    db.execute("update profiles set updated = '2000-01-01' where device_type = 'cpu'")
    ct.put(db, result(sig="two", device="h100"))
    keys = [(e.signature, e.device_type) for e in ct.list_entries(db)]
    assert set(keys) == {("one", "a100"), ("one", "cpu"), ("two", "h100")} and keys[-1] == ("one", "cpu")


@pytest.mark.parametrize("bad", [dict(alpha=-1.0), dict(beta=float("inf")), dict(source="guessed"), dict(signature=None)])
def test_put_rejects_bad_profiles_and_writes_nothing(db, bad):
    with pytest.raises(ValueError):
        ct.put(db, result(**bad))
    assert ct.list_entries(db) == []


def test_refinement_step_and_corrected_profile(db):
    ct.put(db, result())
    e = ct.refine(db, "abc123", "a100", predicted_s=100.0, observed_s=150.0)
    assert e.correction == pytest.approx(0.7 * 1.0 + 0.3 * 1.5) and e.observations == 1 and e.last_ratio == 1.5
    p = ct.get_profile(db, "abc123", "a100")
    assert p.alpha == pytest.approx(0.01 * 1.15) and p.beta == pytest.approx(0.002 * 1.15)
    raw = ct.get_profile(db, "abc123", "a100", corrected=False)
    assert raw.alpha == 0.01


def test_refinement_clamps_ratio_and_correction(db):
    ct.put(db, result())
    e = ct.refine(db, "abc123", "a100", predicted_s=10.0, observed_s=1000.0, corrected=False)
    assert e.correction == pytest.approx(0.7 + 0.3 * 4.0) and e.last_ratio == pytest.approx(100.0)
    e = ct.refine(db, "abc123", "a100", predicted_s=10.0, observed_s=1000.0, corrected=False)
    assert e.correction == 2.0  # 0.7*1.9 + 1.2 = 2.53, clamped
    for _ in range(30):
        e = ct.refine(db, "abc123", "a100", predicted_s=10.0, observed_s=0.01, corrected=False)
    assert e.correction == 0.5 and e.observations == 32
    assert ct.next_correction(1.0, 0.0) == pytest.approx(0.775)  # ratio clamped to 0.25


def test_refinement_converges_when_scheduler_predicts_with_the_corrected_profile(db):
    ct.put(db, result())
    true_factor, runtime_raw = 1.3, 500.0  # the job really takes 1.3x the profile's prediction
    for _ in range(40):
        c = ct.get(db, "abc123", "a100").correction
        ct.refine(db, "abc123", "a100", predicted_s=runtime_raw * c, observed_s=runtime_raw * true_factor)
    e = ct.get(db, "abc123", "a100")
    assert e.correction == pytest.approx(true_factor, abs=1e-3) and e.observations == 40


def test_refine_missing_entry_and_bad_input(db):
    assert ct.refine(db, "nope", "a100", 1.0, 2.0) is None
    ct.put(db, result())
    for pred, obs in [(0.0, 1.0), (1.0, -1.0), (float("nan"), 1.0)]:
        with pytest.raises(ValueError):
            ct.refine(db, "abc123", "a100", pred, obs)
    assert ct.get(db, "abc123", "a100").observations == 0


WORKER = """
import sys
from lyasched.store import open_db
from lyasched.store import costtable as ct
db = open_db(sys.argv[1])
for _ in range(8):
    ct.refine(db, "abc123", "a100", predicted_s=100.0, observed_s=150.0, corrected=False)
"""


def test_concurrent_refinements_are_not_lost(tmp_path):
    path = tmp_path / "shared.db"
    ct.put(open_db(path), result())
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(path)]) for _ in range(3)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    e = ct.get(open_db(path), "abc123", "a100")
    # with one fixed ratio the result does not depend on the order, only on no update being lost
    assert e.observations == 24 and e.correction == pytest.approx(1.5 - 0.5 * 0.7**24, abs=1e-12)
