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
from lyasched.whatif.policies import LYASCHED
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


_FIXED_COLORS = {"actual": "black", LYASCHED: "#1f77b4", "backfill": "#ff7f0e"}
_OTHER_COLORS = ("#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def colors(names: Sequence[str]) -> dict[str, str]:
    """One colour per outcome, the same in every plot: actual black, lyapunov blue, backfill
    orange, the others (the best other baseline first) from the rest of matplotlib's palette."""
    out = {n: _FIXED_COLORS[n] for n in names if n in _FIXED_COLORS}
    rest = iter(_OTHER_COLORS * (1 + len(names) // len(_OTHER_COLORS)))
    for n in names:
        if n not in out:
            out[n] = next(rest)
    return out


def on_scale(peaks: dict[str, float], ratio: float, keep: Sequence[str] = ()) -> float:
    """An axis limit no outlier sets. With ``keep`` (outcomes never cut): the largest of their
    peaks, raised to any other peak within ``ratio`` times it. Without: the largest peak, unless
    it is more than ``ratio`` times the next one; then drop it and look again. Whatever goes past
    the limit is drawn cut, saying so."""
    vals = {n: v for n, v in peaks.items() if np.isfinite(v)}
    kept = [v for n, v in vals.items() if n in keep]
    if kept:
        ref = max(kept)
        return max([ref, *(v for v in vals.values() if v <= ratio * ref)])
    order = sorted(vals.values(), reverse=True)
    while len(order) > 1 and order[0] > ratio * max(order[1], 1e-9):
        order.pop(0)
    return order[0] if order else 1.0


def _label(s: dict, name: str) -> str:
    return s.get("labels", {}).get(name, name)


def jct_cdf_svg(outcomes: Sequence[Outcome], s: dict | None = None) -> str:
    s = s or {}
    plt = _pyplot()
    col = colors([o.name for o in outcomes])
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for o in outcomes:
        x, y = cdf(np.maximum(o.jct, 1.0) / 3600.0)
        ax.step(x, y, where="post", label=_label(s, o.name), lw=2.4 if o.name == "actual" else 1.5, color=col[o.name])
    ax.set_xscale("log")
    finish(ax, "JCT CDF: what happened and each policy (further left is better)",
           "job completion time, arrival to end (h, log scale)", "fraction of jobs", legend=False)
    ax.legend(fontsize=8, loc="lower right")
    return _svg(fig)


_WAIT_FLOOR_S = 1.0
_WAIT_TICKS = [(1, "\u22641s"), (10, "10s"), (60, "1m"), (600, "10m"), (3600, "1h"), (6 * 3600, "6h"), (86400, "1d"),
               (7 * 86400, "7d"), (30 * 86400, "30d")]


def waits_svg(s: dict, outcomes: Sequence[Outcome]) -> str:
    """One row per user (the busiest by GPU-hours), one marker per outcome: average wait, on a
    log scale (waits of seconds and of hours in one plot, none squashed; 0 drawn at 1 s)."""
    plt = _pyplot()
    col = colors([o.name for o in outcomes])
    users = sorted(s["users"].items(), key=lambda kv: (-kv[1]["gpu_hours"], kv[0]))[:_TOP_USERS]
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.3 * len(users)))
    y = np.arange(len(users))
    top = _WAIT_FLOOR_S
    for k, o in enumerate(outcomes):
        vals = np.array([(u["actual"] if o.name == "actual" else u["policies"][o.name])["avg_wait_s"] for _, u in users],
                        dtype=float)
        vals = np.maximum(vals, _WAIT_FLOOR_S)
        top = max(top, float(vals.max(initial=0.0)))
        jit = (k - (len(outcomes) - 1) / 2) * 0.12  # a small vertical offset per outcome: no marker hides another
        if o.name == "actual":
            ax.scatter(vals, y + jit, marker="D", s=36, color="black", label=_label(s, o.name), zorder=3)
        else:
            ax.scatter(vals, y + jit, marker="o", s=26, color=col[o.name], label=_label(s, o.name), zorder=2)
    ax.set_xscale("log")
    ax.set_xlim(_WAIT_FLOOR_S * 0.7, max(top * 1.5, 100.0))
    ticks = [(t, lab) for t, lab in _WAIT_TICKS if t <= max(top * 1.5, 100.0)]
    ax.set_xticks([t for t, _ in ticks], [lab for _, lab in ticks])
    ax.minorticks_off()
    ax.set_yticks(y, [u for u, _ in users], fontsize=8)
    ax.set_ylim(len(users) - 0.5, -0.5)
    ax.set_xlabel("average wait (log scale)")
    ax.set_title(f"average wait per user (the {len(users)} with most GPU-hours; further left is better)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)  # beside: never on the axis labels
    return _svg(fig)


def gpus_svg(outcomes: Sequence[Outcome], total_gpus: int, s: dict | None = None) -> str:
    """GPUs in use over time: one small panel per outcome on shared axes (lines on top of each
    other hide each other). A replay that runs on far longer than the rest is cut, and says so."""
    s = s or {}
    plt = _pyplot()
    col = colors([o.name for o in outcomes])
    shown = [o for o in outcomes if len(o.util_t)]
    n = max(len(shown), 1)
    fig, axes = plt.subplots(n, 1, figsize=(8, 0.8 + 1.25 * n), sharex=True, sharey=True, squeeze=False)
    spans = {o.name: float(o.makespan) for o in shown}
    end_s = on_scale(spans, 1.5, keep=("actual", LYASCHED)) * 1.03  # only another policy's long tail is cut
    unit, label = _time_axis(end_s)
    for ax, o in zip(axes[:, 0], shown):
        t, b = _thin(o.util_t / unit, o.util_busy)
        ax.fill_between(t, b, step="post", color=col[o.name], alpha=0.25, lw=0)
        ax.step(t, b, where="post", color=col[o.name], lw=1.0)
        ax.axhline(total_gpus, color="grey", ls="--", lw=0.8)
        util = o.busy_gpu_s / (o.total_gpus * o.makespan) if o.makespan > 0 else 0.0
        note = f"{_label(s, o.name)}: GPU util {util:.2f}, last job ends at {o.makespan / unit:.3g} {label}"
        if o.makespan > end_s:
            note += " (cut here \u2192)"
        ax.text(0.01, 0.93, note, transform=ax.transAxes, fontsize=8.5, va="top",
                bbox=dict(facecolor="white", alpha=0.8, edgecolor="none", pad=1.5))
        ax.set_ylabel("GPUs", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    axes[0, 0].set_xlim(0, end_s / unit)
    axes[0, 0].set_ylim(0, total_gpus * 1.25)
    axes[0, 0].set_title(f"GPUs in use over time (dashed: the cluster's {total_gpus} GPUs)", fontsize=10)
    axes[-1, 0].set_xlabel(f"time since the first arrival ({label})")
    return _svg(fig)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left;white-space:nowrap}th{background:#f4f4f4}tr.actual td{font-weight:bold}
.wide{overflow-x:auto}img{max-width:100%;display:block;margin:1em 0}.note{color:#555;font-size:.9em}
.assumed{background:#fff8e1;border-left:4px solid #f0b400;padding:.4em 1em;margin:1em 0}.assumed ul{margin:.3em 0}"""


def _table(heads: Sequence[str], rows: Sequence[Sequence[str]], first_class: str | None = None) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in heads)
    body = []
    for i, r in enumerate(rows):
        cls = f' class="{first_class}"' if first_class and i == 0 else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>")
    return f"<div class=\"wide\"><table><tr>{th}</tr>{''.join(body)}</table></div>"


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


def _assumed(s: dict) -> str:
    items = [a["text"] for a in s.get("assumptions", [])]
    if not items:
        return ""
    lis = "".join(f"<li>{escape(t)}</li>" for t in items)
    return f"<div class=\"assumed\"><b>Assumed where the records say nothing:</b><ul>{lis}</ul></div>"


def _choice(s: dict) -> str:
    ch = s.get("baseline_choice")
    if not ch:
        return ""
    cands = ", ".join(f"{escape(n)} {human_s(v)}" for n, v in ch["candidates"].items())
    return (f"<p class=\"note\">Shown as the best other baseline: <b>{escape(ch['chosen'])}</b>, the lowest average JCT "
            f"on this history of {cands}. Other policies (random, fixed-1, sjf-oracle, elastic, ...) run when named "
            "with <code>--policies</code>.</p>")


def _managed(s: dict) -> str:
    m = s.get("managed")
    if not m:
        return ""
    e = m["estimates"]
    src = ", ".join(f"{escape(k)} {v}" for k, v in e["sources"].items())
    ratio = m.get("avg_jct_vs_backfill") or {}
    vs = ", ".join(f"{escape(k)} {v:.3f}" for k, v in ratio.items())
    return (f"<p class=\"note\">Managed view: every policy saw each job's run time as estimated from the jobs that "
            f"ended before it arrived (docs/estimates.md): median error {e['median_rel_error']:.0%} of the run, median "
            f"log(estimate / actual) {e['median_log_ratio']:+.2f}, {e['within_2x']:.0%} within 2x; sources: {src}."
            + (f" Average JCT over backfill's with the same estimates: {vs}." if vs else "") + "</p>")


def render(s: dict, outcomes: Sequence[Outcome]) -> str:
    """The whole report as one HTML string (plots made here: call only once the replay is done)."""
    pols = list(s["policies"])
    c, j = s["cluster"], s["jobs"]
    summary_rows = []
    for name, m in [("actual", s["actual"]), *s["policies"].items()]:
        summary_rows.append([_label(s, name), human_s(m["avg_jct_s"]), human_s(m["p95_jct_s"]),
                             human_s(m["avg_wait_s"]), human_s(m["p95_wait_s"]), f"{m['avg_slowdown']:.2f}",
                             f"{m['worst_user_slowdown']:.2f}", f"{m['gpu_util']:.2f}", m["other_gpu_count"]])
    counts = _table(["what was read", "count"], [[_COUNT_LABELS.get(k, k), v] for k, v in j.items()])
    states = _table(["final state of replayed GPU jobs", "jobs"], list(s["final_states"].items()))
    imgs = [("JCT CDF", jct_cdf_svg(outcomes, s)), ("Waits per user", waits_svg(s, outcomes)),
            ("GPUs in use", gpus_svg(outcomes, c["total_gpus"], s))]
    parts = [
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>lyasched what-if</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>What if lyasched had scheduled these jobs?</h1>",
        f"<p>{escape(s['source'])}: {escape(s['period']['first_arrival'])} to {escape(s['period']['last_end'])} "
        f"({s['period']['days']:g} days). Cluster {c['nodes']} &times; {c['gpus_per_node']} GPUs "
        f"({escape(c['how'])}). Slot {s['slot_s']:g} s, "
        + ("" if s.get("managed") else f"estimate error {s['estimate_error']:g}, ") + f"seed {s['seed']}.</p>",
        f"<p class=\"view\"><b>View</b>: {escape(s['view_text'])}.</p>",
        _assumed(s),
        "<h2>Outcome</h2>",
        _table(["", "avg JCT", "p95 JCT", "avg wait", "p95 wait", "slowdown", "worst user slowdown", "GPU util",
                "jobs on another GPU count"], summary_rows, first_class="actual"),
        _choice(s),
        _managed(s),
        "<p class=\"note\">JCT = end - arrival (Eligible time); wait = JCT - time holding GPUs; slowdown = max(1, JCT / "
        "max(run, 10 s)), averaged over jobs; worst user = the highest per-user average. \"actual\" is what the "
        "records say happened; the others are replays of the same jobs (docs/whatif.md).</p>",
        *(f"<h2>{escape(t)}</h2><img alt=\"{escape(t)}\" src=\"data:image/svg+xml;base64,{b}\">" for t, b in imgs),
        "<h2>Records</h2>", counts, states,
        "<h2>Users</h2>", _group_table(s["users"], pols, "user"),
        "<h2>Accounts</h2>", _group_table(s["accounts"], pols, "account"),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)
