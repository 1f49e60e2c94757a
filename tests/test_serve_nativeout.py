"""`lyasched serve`: a policy's native printf (sia's HiGHS solver writes debug lines with C's printf
to descriptor 1) reaches stderr, not the service's stdout: `serve --once --json` stays one JSON
document. The service runs in a child process against the fake Slurm of test_service, with a
policy that printf's as it decides."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

SCRIPT = textwrap.dedent("""
    import contextlib, ctypes, sys
    sys.path.insert(0, {tests!r})
    from test_service import FakeJob, FakeSlurm, summary
    import lyasched.cli.serve as serve_cli
    import lyasched.service as service
    import lyasched.slurm.backend as backend
    from lyasched.slurm import as_backend

    slurm = FakeSlurm(jobs=[FakeJob("31", summary("uid-00000031"), limit="1-00:00:00")])
    backend.make_backend = lambda *a, **k: (as_backend(slurm), "fake")
    real = service.make_policy

    class Loud:
        # the configured policy, with a native solver's printf in each decision (as sia's HiGHS)
        def __init__(self, p):
            self.p = p
        def __getattr__(self, k):
            return getattr(self.p, k)
        def decide(self, state):
            ctypes.CDLL(None).printf(b"solver says hello\\n")
            return self.p.decide(state)

    service.make_policy = lambda name, **kw: Loud(real(name, **kw))
    if {bare!r}:
        serve_cli.native_stdout_to_stderr = contextlib.nullcontext
    from lyasched.cli import main
    main(["serve", "--once", "--json", "--db", {db!r}, "--policy", "lyapunov"])
""")


def _serve(tmp_path: Path, bare: bool) -> subprocess.CompletedProcess:
    script = SCRIPT.format(tests=str(TESTS), db=str(tmp_path / "live.db"), bare=bare)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_serve_once_json_stays_one_document_when_the_policy_printfs(tmp_path):
    r = _serve(tmp_path, bare=False)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)  # the whole of stdout is the report
    assert [s["slurm_id"] for s in report["started"]] == ["31"]
    assert "solver says hello" in r.stderr


def test_without_the_guard_the_printf_lands_on_serves_stdout(tmp_path):
    """What the guard prevents (so the test above can fail): the same slot, unguarded."""
    r = _serve(tmp_path, bare=True)
    assert r.returncode == 0, r.stderr
    assert "solver says hello" in r.stdout
