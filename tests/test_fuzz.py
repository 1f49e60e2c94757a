"""Property-based fuzzing (issue 5): every parser raises only its documented error type on arbitrary
input, and nothing a user passes escapes the batch script's quoting.

Documented error types: CostSummary.decode -> ValueError; lyasched.slurm.query parsers ->
ParseError (a ValueError); lyasched.slurm.submit.parse_parsable -> ValueError (its other parsers
never raise); read_trace -> TraceError; load_config/from_mapping -> ConfigError;
launcher.quote/render -> ValueError for NUL (argv cannot carry it).
"""

from __future__ import annotations

import math
import string
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lyasched.config import ConfigError, from_mapping, load_config
from lyasched.job.launcher import quote, render, write_script
from lyasched.sim.workloads import TraceError, read_trace
from lyasched.slurm import query as q
from lyasched.slurm import submit as sub
from lyasched.summary import PREFIX, CostSummary

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# ---------------------------------------------------------------- strategies

KEYS = ["id", "sig", "b", "it", "gmin", "gmax", "a", "bt", "p", "bpp", "m0", "m1", "src", "x", "", "B", "id "]
VALUES = st.one_of(
    st.integers(min_value=-(10**25), max_value=10**25).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-0", "0x10", "+5", ".5", "5.", "1e400", "1e-400", "m", "e", "", "=", ";", "|",
                     "$(id)", "\udcff", "\x00", "1_000", "١٢", "０"]),
    st.text(max_size=20),
)
FIELD = st.tuples(st.sampled_from(KEYS), VALUES).map(lambda kv: f"{kv[0]}={kv[1]}")
NEAR_SUMMARY = st.lists(FIELD, max_size=16).map(lambda fs: PREFIX + ";".join(fs))
PIPE_TEXT = st.lists(st.sampled_from(list(string.printable) + ["|", "(null)", "N/A", "\udcff", "é", "\x00"]),
                     max_size=60).map("".join)
SLURM_WORDS = st.sampled_from([
    "PENDING", "RUNNING", "COMPLETED", "JobHeldUser", "N/A", "(null)", "UNLIMITED", "10:00", "1-02:03:04", "-5",
    "2026-11-22T13:50:01", "2026-13-45T99:99:99", "gres:gpu:4", "gpu:a100:2(S:0)", "gres/gpu=4", "node[1-3]",
    "n[01-02],x", "lyasched:v1;id=x", "", " ", "99999999999999999999", "abc", "|", "=", "Key=Value", "²", "١٢", "inf", "nan", "1e999",
])
SQUEUE_LINE = st.lists(st.one_of(SLURM_WORDS, PIPE_TEXT), min_size=0, max_size=20).map("|".join)
KV_LINE = st.lists(st.tuples(st.sampled_from(["JobId", "NodeName", "UserId", "JobState", "SubmitTime", "StartTime",
                                              "EndTime", "TimeLimit", "NumNodes", "TresPerNode", "AllocTRES",
                                              "Gres", "GresUsed", "CfgTRES", "State", "Comment", "NodeList",
                                              "Priority", "x", ""]),
                             st.one_of(SLURM_WORDS, PIPE_TEXT)), max_size=15).map(
    lambda kvs: " ".join(f"{k}={v}" for k, v in kvs))


# ---------------------------------------------------------------- cost summary


@FUZZ
@given(st.one_of(NEAR_SUMMARY, st.text(max_size=300), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_summary_decode_raises_only_value_error(text: str) -> None:
    try:
        s = CostSummary.decode(text)
    except ValueError as e:
        msg = str(e)
        assert msg.startswith("cost summary: ") and "\n" not in msg.replace("\\n", "")
        return
    assert CostSummary.decode(s.encode()) == s  # whatever decodes is valid and round-trips


def test_summary_decode_non_string() -> None:
    for junk in (None, 5, b"lyasched:v1;", ["x"]):
        with pytest.raises(ValueError):
            CostSummary.decode(junk)  # type: ignore[arg-type]


# ---------------------------------------------------------------- Slurm output parsers


def _only_parse_error(fn, text):
    try:
        return fn(text)
    except q.ParseError:
        return None


@FUZZ
@given(st.lists(SQUEUE_LINE, max_size=5).map("\n".join), st.booleans())
def test_parse_squeue(text: str, only: bool) -> None:
    jobs = _only_parse_error(lambda t: q.parse_squeue(t, lyasched_only=only), text)
    for j in jobs or []:
        assert isinstance(j.job_id, str) and j.gpus >= 0


@FUZZ
@given(st.lists(KV_LINE, max_size=4).map("\n".join))
def test_parse_show_job_and_nodes(text: str) -> None:
    _only_parse_error(q.parse_show_job, text)
    for n in _only_parse_error(q.parse_nodes, text) or []:
        assert n.gpus_free >= 0


@FUZZ
@given(st.lists(st.lists(st.one_of(SLURM_WORDS, PIPE_TEXT), max_size=12).map("|".join), max_size=4).map("\n".join))
def test_parse_sacct(text: str) -> None:
    _only_parse_error(q.parse_sacct, text)


@FUZZ
@given(st.one_of(SLURM_WORDS, st.text(max_size=40)))
def test_small_value_parsers(v: str) -> None:
    _only_parse_error(q.parse_time, v)
    d = _only_parse_error(q.parse_duration, v)
    assert d is None or d >= 0
    assert q.gpus_in_tres(v) >= 0
    assert isinstance(q.parse_kv_line(v), dict)
    assert isinstance(q.accounting_enabled(v), bool)


HOSTLIST = st.text(alphabet=st.sampled_from(list("nodeg01239[]-,") + ["x"]), max_size=30)


@FUZZ
@given(HOSTLIST)
def test_expand_hostlist(v: str) -> None:
    """Hostlists come from Slurm; whatever they hold, the expansion raises nothing but ParseError/ValueError."""
    assume(sum(c.isdigit() for c in v) <= 6)  # keep ranges small: n[0-99999] would be a real 100,000 names
    try:
        names = q.expand_hostlist(v)
    except ValueError:
        return
    assert all(isinstance(n, str) for n in names)


@FUZZ
@given(st.one_of(SQUEUE_LINE, KV_LINE, st.text(max_size=100)), st.text(alphabet=string.ascii_letters + "-", max_size=20))
def test_submit_parsers(text: str, uid: str) -> None:
    try:
        job, cluster = sub.parse_parsable(text)
        assert job.replace("_", "").isdigit()
    except ValueError:
        pass
    found = sub.find_job_by_uid(text, uid)
    assert found is None or isinstance(found, str)
    assert isinstance(sub.parse_scontrol_show(text), dict)
    assert isinstance(sub.job_state(sub.parse_scontrol_show(text)), str)
    assert isinstance(sub.has_lua_submit_plugin(text), bool)


# ---------------------------------------------------------------- trace CSV and config files

CSV_CELL = st.one_of(SLURM_WORDS, st.sampled_from(["0", "1", "2.5", "-1", "1e30", "nan", "inf", "1e308", "",
                                                   "2026-11-22T13:50:01", "\"", "\"a,b\"", "\x00", "\udcff"]),
                     st.text(max_size=6))
CSV_TEXT = st.tuples(
    st.sampled_from(["submit_time,duration,num_gpus", "timestamp,duration,num_gpus,user", "a,b", "",
                     "submit_time,duration,num_gpus,cluster"]),
    st.lists(st.lists(CSV_CELL, max_size=5).map(",".join), max_size=6),
).map(lambda t: "\n".join([t[0], *t[1]]))


@FUZZ
@given(st.one_of(CSV_TEXT.map(lambda s: s.encode("utf-8", "surrogateescape")), st.binary(max_size=200)))
def test_read_trace_raises_only_trace_error(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "t.csv"
    p.write_bytes(data)
    try:
        rows = read_trace(str(p))
    except TraceError as e:
        assert "\n" not in str(e)
        return
    assert rows and all(r.gpus >= 1 and r.duration >= 0 and math.isfinite(r.submit) for r in rows)


TOML_VALUE = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20).map(str), st.floats().map(lambda f: repr(f).replace("inf", "inf")),
    st.sampled_from(['"x"', '""', "[]", '["lyatest"]', "[1]", "{ bandwidth = 0 }", "true", "nan", "-inf", "1e400",
                     '"/nonexistent/x.db"', '"DEBUG"', '"lyapunov"', "{}", "{ latency = -1 }"]),
)
TOML_KEY = st.sampled_from(["slot_seconds", "db", "release_grace", "slurm_timeout", "partition", "log_level", "users",
                            "device", "name", "params", "gpu_mem", "intra", "inter", "V", "x"])
TOML_DOC = st.lists(st.tuples(st.sampled_from(["[service]", "[policy]", "[cluster]", "[policy.params]", "[x]", ""]),
                              st.lists(st.tuples(TOML_KEY, TOML_VALUE), max_size=4)), max_size=4).map(
    lambda secs: "\n".join(h + "\n" + "\n".join(f"{k} = {v}" for k, v in kv) for h, kv in secs))


@FUZZ
@given(st.one_of(TOML_DOC.map(str.encode), st.binary(max_size=120)))
def test_load_config_raises_only_config_error(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "c.toml"
    p.write_bytes(data)
    try:
        cfg = load_config(p)
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    assert cfg.slot_seconds > 0 and math.isfinite(cfg.slot_seconds) and cfg.gpu_mem > 0


JSONISH = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
                       lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(TOML_KEY, c, max_size=3)),
                       max_leaves=10)


@FUZZ
@given(st.dictionaries(st.sampled_from(["service", "policy", "cluster", "x"]),
                       st.one_of(JSONISH, st.dictionaries(TOML_KEY, JSONISH, max_size=4)), max_size=3))
def test_from_mapping_raises_only_config_error(data: dict) -> None:
    try:
        from_mapping(data)
    except ConfigError:
        pass


# ---------------------------------------------------------------- the batch-script renderer

FAKE_SRUN = """#!/bin/bash
printf '%s\\0' "$LYASCHED_MODEL" "$LYASCHED_UID" "$@" > "$FAKE_OUT"
"""
FAKE_SCONTROL = """#!/bin/bash
if [[ "$*" == "show hostnames "* ]]; then echo n1; else echo "NodeName=n1 NodeAddr=10.0.0.1"; fi
"""
# shell metacharacters and the characters that end or switch quoting, glued in any order
TOKENS = ["'", '"', "\\", "$(", ")", "`", "${", "}", "$", "\n", "\r", "\t", "\x7f", "\x1b", ";", "&", "|", ">", "<",
          "*", "?", "[", "]", "~", "!", "#", " ", "-", "--", "=", "%", "^", "$'", "\\'", "'\\''", "EOF", "{{command}}",
          "\udc80", "\udcff", "é", "\u2028", "\ufeff", "x"]
ADVERSARIAL = st.lists(st.sampled_from(TOKENS), max_size=12).map("".join)


@pytest.fixture(scope="module")
def fakebin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fuzzbin")
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return d


def _bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


@FUZZ
@given(ADVERSARIAL)
def test_quote_is_exactly_one_word(arg: str) -> None:
    word = quote(arg)
    out = subprocess.run([b"bash", b"-c", b"printf '%s\\0' " + _bytes(word)], capture_output=True, timeout=10).stdout
    assert out == _bytes(arg) + b"\0"
    assert "\n" not in word and "\r" not in word  # one line, whatever the argument


@FUZZ
@given(st.lists(ADVERSARIAL, min_size=1, max_size=4), ADVERSARIAL)
def test_rendered_script_passes_everything_through(fakebin: Path, tmp_path: Path, command: list[str], model: str) -> None:
    """Script, arguments and model name reach the job exactly; no token runs, no line breaks out."""
    uid = "abcdef0123"
    s = render(command, global_batch=4, uid=uid, model=model, torchrun=["torchrun"])
    path = tmp_path / "job.sbatch"
    write_script(s, path)
    assert b"\r" not in path.read_bytes()
    out = tmp_path / "argv"
    out.unlink(missing_ok=True)
    env = {"PATH": f"{fakebin}:/usr/bin:/bin", "FAKE_OUT": str(out), "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1",
           "SLURM_GPUS_ON_NODE": "2", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_CPUS_PER_NODE": "8",
           "HOME": str(tmp_path)}
    p = subprocess.run(["bash", str(path)], capture_output=True, env=env, timeout=30, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    got = out.read_bytes().split(b"\0")[:-1]
    assert got[0] == _bytes(model) and got[1] == _bytes(uid)
    assert got[-len(command):] == [_bytes(c) for c in command]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["argv", "job.sbatch"]  # nothing else was created


@given(ADVERSARIAL, ADVERSARIAL)
def test_nul_is_a_clean_error(before: str, after: str) -> None:
    arg = before + "\x00" + after
    with pytest.raises(ValueError, match="NUL"):
        quote(arg)
    with pytest.raises(ValueError, match="NUL"):
        render(["train.py", arg], global_batch=4, uid="abcdef0123", torchrun=["torchrun"])
    with pytest.raises(ValueError, match="NUL"):
        render([arg], global_batch=4, uid="abcdef0123", torchrun=["torchrun"])
