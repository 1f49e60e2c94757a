"""A native library's printf inside `native_stdout_to_stderr` reaches stderr, not the JSON on stdout."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import ctypes, json, sys
    from lyasched.cli.nativeout import native_stdout_to_stderr
    libc = ctypes.CDLL(None)
    print("before", flush=True)
    with native_stdout_to_stderr():
        libc.printf(b"solver says hello\\n")  # C stdio, buffered when stdout is a pipe
        print("python inside")
    print(json.dumps({"ok": True}))
""")


def test_native_prints_go_to_stderr_and_stdout_stays_parseable():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "before" and json.loads(lines[-1]) == {"ok": True} and len(lines) == 2, r.stdout
    assert "solver says hello" in r.stderr and "python inside" in r.stderr


def test_without_the_guard_the_printf_lands_on_stdout():
    """The failure the guard prevents (so the test above can fail): the same printf unguarded."""
    bare = SCRIPT.replace("with native_stdout_to_stderr():", "if True:")
    r = subprocess.run([sys.executable, "-c", bare], capture_output=True, text=True, timeout=60)
    assert "solver says hello" in r.stdout
