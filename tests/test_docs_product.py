"""docs/ speaks of the product: no issue numbers, pages within their size caps, and the systemd
units name documentation that their install step puts in place."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md", REPO / "jobscripts" / "README.md"]


def test_no_issue_numbers_in_the_docs():
    pattern = re.compile(r"\bissues?[ -]#?\d+|\bissue's\b", re.IGNORECASE)
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()[:80]}" for p in PAGES
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, "\n".join(hits)


def test_model_page_is_under_its_cap():
    assert len((REPO / "docs" / "model.md").read_text(encoding="utf-8").splitlines()) < 500


def test_units_documentation_is_installed_by_their_install_step():
    install = "install -D -m 644 -t /usr/local/share/doc/lyasched docs/*.md"
    for unit in ("lyasched.service", "lyasched-failsafe.service", "lyasched-failsafe.timer"):
        text = (REPO / "slurm" / unit).read_text()
        (doc,) = re.findall(r"^Documentation=(\S+)$", text, re.MULTILINE)
        assert doc.startswith("file:///usr/local/share/doc/lyasched/"), unit
        assert (REPO / "docs" / doc.rsplit("/", 1)[1]).exists(), unit
    for where in ("slurm/lyasched.service", "slurm/lyasched-failsafe.service", "README.md", "docs/service.md"):
        assert install in (REPO / where).read_text(), where
