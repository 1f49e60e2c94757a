"""Bad input (issue 5): the table of tests/reliability/badinput.py, one test per malformed input.

Every case must exit non-zero with ONE clear error line, submit nothing (fake Slurm tools on PATH
record every call; plugin cases: squeue of the test user) and write nothing (the sandbox is
compared file by file, SQLite databases row by row, before and after).
"""

from __future__ import annotations

import pytest
from reliability import badinput as bad


@pytest.fixture(scope="module")
def box():
    with bad.sandbox() as b:
        yield b


def test_table_is_big_enough() -> None:
    assert len(bad.CASES) + len(bad.PLUGIN_CASES) >= 40
    assert {c.tool for c in bad.CASES} == {"lyasub", "lyastat", "config", "trace"}
    assert len({c.name for c in bad.CASES + bad.PLUGIN_CASES}) == len(bad.CASES) + len(bad.PLUGIN_CASES)


@pytest.mark.parametrize("case", bad.CASES, ids=lambda c: c.name)
def test_refused_cleanly(box, case) -> None:
    o = bad.run_case(case, box)
    assert o.problems() == [], (o.exit_code, o.error_lines)
    assert o.exit_code != 0 and len(o.error_lines) == 1


def test_harness_notices_a_submission_and_a_written_file(box) -> None:
    """The checks can fail: a valid submission and a replay that writes --out are not 'refused'."""
    ok = bad.Case("valid", "lyasub", (*bad.LB, *bad.OK, "--", bad.TRAIN), "")
    o = bad.run_case(ok, box)
    assert o.exit_code == 0 and o.submitted and not o.refused
    trace = bad.Case("valid-trace", "trace", ("{file}",), "",
                     b"submit_time,duration,num_gpus\n0,60,1\n30,120,2\n")
    o = bad.run_case(trace, box)
    assert o.exit_code == 0 and any(c.startswith("work/out") for c in o.changed) and not o.refused


@pytest.mark.slurm
@pytest.mark.parametrize("case", bad.PLUGIN_CASES, ids=lambda c: c.name)
def test_plugin_refuses_cost_summary(case, test_user) -> None:
    """Real `sbatch --comment` as the test user: the job_submit plugin refuses, nothing is queued."""
    o = bad.run_plugin_case(case, test_user)
    assert o.problems() == [], (o.exit_code, o.error_lines)
    assert o.exit_code != 0 and not o.submitted
