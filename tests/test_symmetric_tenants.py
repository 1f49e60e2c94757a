"""benchmarks/symmetric_tenants.py's argument errors: one line on stderr, exit 2, nothing run."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "symmetric_tenants.py")


@pytest.mark.parametrize("args", [["--band", "x"], ["--band", "1.01,-1"], ["--band", "0"], ["--seeds", "a-b"]])
def test_bad_arguments_exit_2_with_one_line(args):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, SCRIPT, *args, "--json"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
