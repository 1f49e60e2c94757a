"""The README's researcher commands ("For researchers: replay, whatif, benchmarks"), read from the
README itself and run as documented, only smaller: the Philly window is 12 jobs instead of 3,000,
and `october.sacct` (the reader's own history) is the shipped examples/sample.sacct. Each must exit
0 and give what it says (JSON, or the report files). How fast the replays are is
benchmarks/replay_speed.py's business, not this test's."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from lyasched.cli import main

REPO = Path(__file__).resolve().parent.parent
SMALLER = {"--max-jobs 3000": "--max-jobs 12"}  # sizes only: the command is otherwise as printed
STAND_IN = {"october.sacct": "examples/sample.sacct"}  # a file the README means as the reader's own


def researcher_commands() -> list[str]:
    """The commands of the first bash block of the README's researcher section, continuation
    lines joined."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## For researchers", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]


COMMANDS = researcher_commands()


def test_the_section_is_read():
    assert len(COMMANDS) >= 4 and all(c.startswith("lyasched ") for c in COMMANDS)
    assert any(" replay " in f" {c} " for c in COMMANDS) and any(c.startswith("lyasched whatif") for c in COMMANDS)
    assert any("examples/sample.sacct" in c for c in COMMANDS)  # the shipped history is in the README


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_researcher_command(command, tmp_path, monkeypatch):
    for big, small in SMALLER.items():
        command = command.replace(big, small)
    argv = shlex.split(command, comments=True)
    argv = [STAND_IN.get(a, a) for a in argv]
    for a in argv:
        if a.endswith((".csv", ".sacct")) and not (REPO / a).exists():
            pytest.skip(f"{a} is not in this checkout (the team's shared data)")
    out = None
    if "--out" in argv:
        i = argv.index("--out")
        out = tmp_path / "out"
        argv[i + 1] = str(out)
    monkeypatch.chdir(REPO)  # the README's paths are relative to the repository root
    r = CliRunner().invoke(main, argv[1:])
    assert r.exit_code == 0, f"{command}\n{r.output}{r.stderr}"
    if "--json" in argv:
        assert isinstance(json.loads(r.stdout), dict)
    if out is not None:
        assert (out / "summary.json").exists() and json.loads((out / "summary.json").read_text())
