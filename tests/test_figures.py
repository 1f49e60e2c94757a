"""benchmarks/figures.py renders docs/results.md and the headline table from the benchmarks' JSON
(fed in here: every figure on the page is the input's)."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import figures  # noqa: E402


def _data(ly: float, quick: bool = True) -> dict:
    jct = {"lyapunov": ly, "elastic": 0.8 * ly, "backfill": 2 * ly, "tiresias": 4 * ly, "sjf-oracle": 0.5 * ly, "srpt-oracle": 0.25 * ly}
    return {
        "quick": quick, "date": "2026-11-28",
        "machine": {"cores": 2, "cpu": "Test CPU", "python": "3.11.2", "torch": "2.13.0", "numpy": "2.0", "os": "Linux 6"},
        "commands": {k: "python " + " ".join(v) for k, v in figures.commands(quick).items()},
        "wall_s": {"quality": 12.0},
        "quality": {"policies": list(jct), "seeds": 1,
                    "groups": {"seed-small-bursty": {"avg_jct_s": jct, "lower_bound_s": 0.1 * ly},
                               "philly[0:+10] 2x8": {"avg_jct_s": {**jct, "srpt-oracle": None}, "lower_bound_s": 1.0}}},
        "overhead_lyapunov": {"jobs": 10000, "running": 0, "nodes": 1024, "gpus_per_node": 4, "free_gpus": 1300,
                              "median_ms": 12.34, "p90_ms": 15.0, "cold_first_ms": 99.0, "target_ms": 25.0},
        "overhead_elastic": {"jobs": 10000, "running": 900, "nodes": 1024, "gpus_per_node": 4, "free_gpus": 1300,
                             "median_ms": 45.6, "p90_ms": 50.0, "cold_first_ms": 120.0, "target_ms": None},
        "cost": {"protocol": "leave-one-app-out",
                 "apps": {"pollux/bert": {"all": {"rows": 7, "median_abs_rel_err": 0.031, "p90_abs_rel_err": 0.12}, "held_out": False}},
                 "overall": {"rows": 7, "median_abs_rel_err": 0.031, "p90_abs_rel_err": 0.12},
                 "target": {"median_abs_rel_err": 0.10, "p90_abs_rel_err": 0.20}},
    }


def test_render_takes_every_figure_from_its_input():
    for ly in (1000.0, 3000.0):
        page, head = figures.render(_data(ly))
        assert f"| seed-small-bursty | {ly:,.0f} | {0.8 * ly:,.0f} | {2 * ly:,.0f} |" in page
        # ratios: lyapunov / backfill 0.50, / tiresias 0.25, / the better oracle (srpt) 4.00; elastic 0.40 / 0.20 / 3.20
        assert "| seed-small-bursty | 0.50 | 0.25 | 4.00 | 0.40 | 0.20 | 3.20 |" in head
        assert "| philly[0:+10] 2x8 | 0.50 | 0.25 | 2.00 | 0.40 | 0.20 | 1.60 |" in head  # srpt not run: sjf-oracle
        assert "median 12.3 ms" in page and "median 45.6 ms" in page
        assert "| pollux/bert | 7 | 3.1% | 12.0% |" in page
        assert "2 cores, Test CPU" in page and "Python 3.11.2, torch 2.13.0" in page and "2026-11-28" in page
        assert "python benchmarks/replay_quality.py" in page and "python benchmarks/reliability.py" in page
        begin, end = page.index(figures.HEADLINE_BEGIN), page.index(figures.HEADLINE_END)
        assert head.split("\n\n", 2)[2].strip() == page[begin + len(figures.HEADLINE_BEGIN):end].strip()


def test_from_json_writes_both_pages(tmp_path):
    src = tmp_path / "in.json"
    src.write_text(json.dumps(_data(2000.0, quick=False)))
    p = subprocess.run([sys.executable, str(REPO / "benchmarks" / "figures.py"), "--from-json", str(src), "--out-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    page = (tmp_path / "results.md").read_text()
    assert "mode: full" in page and "| seed-small-bursty | 2,000 |" in page
    assert "| seed-small-bursty | 0.50 |" in (tmp_path / "results-headline.md").read_text()


def test_the_readme_headline_block_is_replaced_and_nothing_else():
    from figures import HEADLINE_BEGIN, HEADLINE_END, splice

    text = f"intro\n{HEADLINE_BEGIN}\nold table\n{HEADLINE_END}\nrest\n"
    out = splice(text, "| new |\n")
    assert out == f"intro\n{HEADLINE_BEGIN}\n| new |\n{HEADLINE_END}\nrest\n"
    assert splice("no block here\n", "| new |\n") == "no block here\n"


def test_sections_measured_by_their_own_command_survive_a_rerun(tmp_path):
    from figures import KEPT_BEGIN, KEPT_END

    src = tmp_path / "in.json"
    src.write_text(json.dumps(_data(2000.0, quick=False)))
    block = f"{KEPT_BEGIN}\n## Goodput\n\n`python benchmarks/goodput.py --json`: 0.97\n{KEPT_END}"
    (tmp_path / "results.md").write_text(f"# Results\n\nold generated text\n\n{block}\n\nstray hand edit\n")
    cmd = [sys.executable, str(REPO / "benchmarks" / "figures.py"), "--from-json", str(src), "--out-dir", str(tmp_path)]
    for _ in range(2):  # twice: the block is kept once, not duplicated
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        page = (tmp_path / "results.md").read_text()
        assert page.count(block) == 1 and "| seed-small-bursty | 2,000 |" in page
        assert "old generated text" not in page and "stray hand edit" not in page  # outside the markers: regenerated
