"""The self-contained HTML report of a what-if: tables plus matplotlib plots embedded as SVG
(base64 data URIs), so the one file can be mailed or opened anywhere. Text stays text in the
SVG (``svg.fonttype = none``): the browser draws user names in any script with its own fonts."""

from __future__ import annotations

import base64
import io
import warnings
from html import escape
from typing import Sequence

import numpy as np

from lyasched.plotting import cdf, finish, pyplot as _pyplot, thin as _thin
from lyasched.whatif.metrics import Outcome
from lyasched.whatif.report import human_s

_COUNT_LABELS = {
    "gpu": "finished GPU jobs (replayed)", "cpu_only": "CPU-only jobs (left out)",
    "cancelled_before_start": "cancelled before start (left out)", "still_running": "still running (left out)",
    "pending": "pending (left out)", "never_started": "never started, not cancelled (left out)",
    "requeued": "requeued jobs (one job each)", "other_partition": "other partitions (left out)",
    "total": "distinct jobs", "records": "allocation lines", "steps": "job-step lines (skipped)",
}
_TOP_USERS = 20


def _svg(fig) -> str:
    buf = io.BytesIO()
    with warnings.catch_warnings():  # "Glyph ... missing from font": the browser has the glyph
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
        fig.savefig(buf, format="svg")
    _pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _time_axis(span_s: float) -> tuple[float, str]:
    return (86400.0, "days") if span_s > 3 * 86400 else (3600.0, "h")


def jct_cdf_svg(outcomes: Sequence[Outcome]) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for o in outcomes:
        x, y = cdf(np.maximum(o.jct, 1.0) / 3600.0)
        ax.step(x, y, where="post", label=o.name, lw=2.2 if o.name == "actual" else 1.2,
                color="black" if o.name == "actual" else None)
    ax.set_xscale("log")
    finish(ax, "JCT CDF: what happened and each policy", "job completion time, arrival to end (h)",
           "fraction of jobs")
    return _svg(fig)


def waits_svg(s: dict, outcomes: Sequence[Outcome]) -> str:
    """One row per user (the busiest by GPU-hours), one marker per outcome: average wait."""
    plt = _pyplot()
    users = sorted(s["users"].items(), key=lambda kv: (-kv[1]["gpu_hours"], kv[0]))[:_TOP_USERS]
    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.32 * len(users)))
    y = np.arange(len(users))
    waits = {o.name: [(u["actual"] if o.name == "actual" else u["policies"][o.name])["avg_wait_s"] for _, u in users]
             for o in outcomes}
    top = max((max(v) for v in waits.values() if v), default=0.0)
    unit, label = (3600.0, "h") if top >= 7200 else (60.0, "min")
    for o in outcomes:
        vals = [w / unit for w in waits[o.name]]
        if o.name == "actual":
            ax.scatter(vals, y, marker="D", s=40, color="black", label=o.name, zorder=3)
        else:
            ax.scatter(vals, y, marker="o", s=22, alpha=0.8, label=o.name, zorder=2)
    ax.set_yticks(y, [u for u, _ in users], fontsize=8)
    ax.set_ylim(len(users) - 0.5, -0.5)
    ax.set_xlabel(f"average wait ({label})")
    ax.set_title(f"average wait per user (the {len(users)} with most GPU-hours)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _svg(fig)


def gpus_svg(outcomes: Sequence[Outcome], total_gpus: int) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    unit, label = _time_axis(max(o.makespan for o in outcomes))
    for o in outcomes:
        if len(o.util_t) == 0:
            continue
        t, b = _thin(o.util_t / unit, o.util_busy)
        ax.step(t, b, where="post", label=o.name, alpha=0.85, lw=1.6 if o.name == "actual" else 1.0,
                color="black" if o.name == "actual" else None)
    ax.axhline(total_gpus, color="grey", ls="--", lw=1, label=f"{total_gpus} GPUs")
    ax.set_xlabel(f"time since the first arrival ({label})")
    ax.set_ylabel("GPUs in use")
    ax.set_title("GPUs in use over time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _svg(fig)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f4f4f4}tr.actual td{font-weight:bold}
img{max-width:100%;display:block;margin:1em 0}.note{color:#555;font-size:.9em}"""


def _table(heads: Sequence[str], rows: Sequence[Sequence[str]], first_class: str | None = None) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in heads)
    body = []
    for i, r in enumerate(rows):
        cls = f' class="{first_class}"' if first_class and i == 0 else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>")
    return f"<table><tr>{th}</tr>{''.join(body)}</table>"


def _group_table(groups: dict, policies: Sequence[str], label: str) -> str:
    heads = [label, "jobs", "GPU-h", "actual wait", *(f"{p} wait" for p in policies),
             "actual slowdown", *(f"{p} slowdown" for p in policies)]
    rows = []
    for name, g in sorted(groups.items(), key=lambda kv: (-kv[1]["gpu_hours"], kv[0])):
        pol = g.get("policies", {})
        rows.append([name, g["jobs"], f"{g['gpu_hours']:.1f}", human_s(g["actual"]["avg_wait_s"]),
                     *(human_s(pol[p]["avg_wait_s"]) for p in policies), f"{g['actual']['avg_slowdown']:.2f}",
                     *(f"{pol[p]['avg_slowdown']:.2f}" for p in policies)])
    return _table(heads, rows)


def render(s: dict, outcomes: Sequence[Outcome]) -> str:
    """The whole report as one HTML string (plots made here: call only once the replay is done)."""
    pols = list(s["policies"])
    c, j = s["cluster"], s["jobs"]
    summary_rows = []
    for name, m in [("actual", s["actual"]), *s["policies"].items()]:
        summary_rows.append([name, human_s(m["avg_jct_s"]), human_s(m["p95_jct_s"]), human_s(m["avg_wait_s"]),
                             human_s(m["p95_wait_s"]), f"{m['avg_slowdown']:.2f}", f"{m['worst_user_slowdown']:.2f}",
                             f"{m['gpu_util']:.2f}", m["other_gpu_count"]])
    counts = _table(["what was read", "count"], [[_COUNT_LABELS.get(k, k), v] for k, v in j.items()])
    states = _table(["final state of replayed GPU jobs", "jobs"], list(s["final_states"].items()))
    imgs = [("JCT CDF", jct_cdf_svg(outcomes)), ("Waits per user", waits_svg(s, outcomes)),
            ("GPUs in use", gpus_svg(outcomes, c["total_gpus"]))]
    parts = [
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>lyasched what-if</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>What if lyasched had scheduled these jobs?</h1>",
        f"<p>{escape(s['source'])}: {escape(s['period']['first_arrival'])} to {escape(s['period']['last_end'])} "
        f"({s['period']['days']:g} days). Cluster {c['nodes']} &times; {c['gpus_per_node']} GPUs "
        f"({escape(c['how'])}). Slot {s['slot_s']:g} s, estimate error {s['estimate_error']:g}, seed {s['seed']}; "
        + ("GPU counts as recorded (--rigid)." if s["rigid"] else "policies may give a job another GPU count "
           "(each job is treated as elastic data-parallel training; --rigid keeps the recorded counts).") + "</p>",
        "<h2>Outcome</h2>",
        _table(["", "avg JCT", "p95 JCT", "avg wait", "p95 wait", "slowdown", "worst user slowdown", "GPU util",
                "jobs on another GPU count"], summary_rows, first_class="actual"),
        "<p class=\"note\">JCT = end - arrival (Eligible time); wait = JCT - time holding GPUs; slowdown = max(1, JCT / "
        "max(run, 10 s)), averaged over jobs; worst user = the highest per-user average. \"actual\" is what the "
        "records say happened; the others are replays of the same jobs (docs/whatif.md).</p>",
        *(f"<h2>{escape(t)}</h2><img alt=\"{escape(t)}\" src=\"data:image/svg+xml;base64,{b}\">" for t, b in imgs),
        "<h2>Records</h2>", counts, states,
        "<h2>Users</h2>", _group_table(s["users"], pols, "user"),
        "<h2>Accounts</h2>", _group_table(s["accounts"], pols, "account"),
        "</body></html>",
    ]
    return "\n".join(parts)
