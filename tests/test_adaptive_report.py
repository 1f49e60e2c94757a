"""The adaptive batch in the step report (lyasched.job.steptimes ``A`` lines and their sidecar):
old readers keep working, the refit learns only from steps at the reported local batch."""

from __future__ import annotations

import json

from lyasched.costmodel.learn import parse_steps
from lyasched.job.steptimes import StepTimes, sidecar


def _report(tmp_path, monkeypatch, shapes):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    path = tmp_path / "steps-9.tsv"
    st = StepTimes(path, local_bsz=32)
    for i, shape in enumerate(shapes):
        if shape is not None:
            st.adaptive(shape)
        st.begin()
        st.end()
    st.close()
    return path


def test_a_lines_and_sidecar(tmp_path, monkeypatch):
    info = {"batch": 64, "local": 32, "accum": 1, "m0": 64, "phi": 120.5, "eff": 1.0, "base": 0.0, "lr": 1.0}
    later = {**info, "batch": 128, "local": 32, "accum": 2, "phi": 300.0, "base": 6.0}
    path = _report(tmp_path, monkeypatch, [info] + [None] * 5 + [later] + [None] * 5)
    lines = path.read_text().splitlines()
    a = [line.split("\t") for line in lines if line.startswith("A\t")]
    assert [(x[1], x[2]) for x in a] == [("0", "0"), ("0", "6")]
    assert json.loads(a[1][3])["phi"] == 300.0
    side = json.loads(sidecar(path).read_text())
    assert side["step"] == 6 and side["batch"] == 128 and side["phi"] == 300.0
    assert sidecar(path).name == "steps-9.adaptive.json"
    # the refit reads only the steps at the reported local batch (32, no accumulation): the first 6
    rep = parse_steps(path.read_bytes())
    assert rep is not None and rep.local_bsz == 32 and rep.steps == 6 - 2  # less the warm-up steps
    plain = "\n".join(line for line in lines if not line.startswith("A\t"))
    assert parse_steps(plain).steps == 12 - 2  # a report without A lines: every step, as before


def test_only_rank_zero_writes_a_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    st = StepTimes(tmp_path / "steps-3.tsv", local_bsz=8)
    st.adaptive({"batch": 16})
    st.close()
    assert "A\t" not in (tmp_path / "steps-3.tsv").read_text()
    assert not sidecar(tmp_path / "steps-3.tsv").exists()
