"""The what-if summary (the `--json` object) and its terminal tables."""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Any, Sequence

import numpy as np

from lyasched.whatif.cluster import SiteCluster
from lyasched.whatif.history import History
from lyasched.whatif.metrics import Outcome, by_group, summary

# what each view shows (the summary's "view"; the terminal's and the report's first words on it)
VIEWS = {
    "managed": "managed: every job on its recorded GPU count, every policy seeing the run time estimated from the "
               "jobs that ended before it (what the site would get; --rigid or --elastic for the other views)",
    "rigid": "rigid: every job on its recorded GPU count, run times predicted with the given estimate error",
    "elastic": "elastic: policies may give a job another GPU count (every job treated as elastic data-parallel "
               "training; not what a site's plain jobs allow)",
}

COUNT_KEYS = ("gpu", "cpu_only", "cancelled_before_start", "still_running", "pending", "never_started",
              "requeued", "other_partition", "total", "records", "steps")


def assumptions(hist: History, missing: Sequence[str], site: SiteCluster) -> list[dict]:
    """What stood in for values the records lack, one entry per field, counted over the replayed
    jobs: ``{"field", "jobs", "of", "text"}``, the text like "Eligible missing for 120 of 300
    jobs: Submit used as the arrival". ``missing``: optional fields the sacct header lacks."""
    n = len(hist.jobs)
    used = {
        "Eligible": "Submit used as the arrival",
        "NodeList": (f"cluster {site.how}" if site.source != "records"
                     else "cluster inferred from the other jobs' nodes"),
        "Timelimit": "no time limit (backfill plans with none)",
    }
    out = []
    for f, what in used.items():
        k = hist.unrecorded.get(f, 0)
        if not k:
            continue
        why = f" (no {f} field)" if f in missing else ""
        out.append({"field": f, "jobs": int(k), "of": n, "text": f"{f} missing for {k} of {n} jobs{why}: {what}"})
    return out


def build_summary(
    source: str,
    hist: History,
    steps: int,
    site: SiteCluster,
    outcomes: Sequence[Outcome],
    *,
    slot: float,
    estimate_error: float,
    seed: int,
    params: dict[str, dict[str, Any]],
    view: str = "elastic",
    missing: Sequence[str] = (),
    labels: dict[str, str] | None = None,
    choice: dict | None = None,
    managed: dict | None = None,
) -> dict:
    """Everything the table, the JSON and the HTML report show; outcomes[0] is "actual".
    ``view``: "managed", "rigid" or "elastic" (`VIEWS`); ``missing``: the optional sacct fields the header lacks; ``labels``: how the report names each
    outcome ("lyapunov (lyasched)"); ``choice``: how the default set's other baseline was picked;
    ``managed``: the estimates' figures of a ``--managed`` replay (lyasched.whatif.managed)."""
    jobs = hist.jobs
    recorded = np.array([j.gpus for j in jobs], dtype=int)
    users = [j.user for j in jobs]
    accounts = [j.account for j in jobs]
    gpu_s = np.array([sum((r.end - r.start) * r.gpus for r in j.runs) for j in jobs], dtype=float)
    first, last = min(j.arrival for j in jobs), max(j.end for j in jobs)
    counts = {**{k: 0 for k in COUNT_KEYS}, **hist.counts, "steps": steps}
    c = site.spec
    out: dict[str, Any] = {
        "source": source,
        "period": {
            "first_arrival": datetime.fromtimestamp(first).isoformat(timespec="seconds"),
            "last_end": datetime.fromtimestamp(last).isoformat(timespec="seconds"),
            "days": round((last - first) / 86400.0, 3),
        },
        "jobs": {k: int(counts[k]) for k in COUNT_KEYS},
        "final_states": dict(sorted(hist.final_states.items())),
        "gpu_types": dict(sorted(hist.gpu_types.items())),
        "cluster": {"nodes": c.nodes, "gpus_per_node": c.gpus_per_node, "total_gpus": c.total_gpus,
                    "source": site.source, "how": site.how,
                    **({"gpu_types": site.typed, "total_gpus": _typed_total(site.typed)} if site.typed else {})},
        "slot_s": slot,
        "estimate_error": estimate_error,
        "seed": seed,
        "view": view,
        "view_text": VIEWS[view],
        "rigid": view != "elastic",
        "params": {n: p for n, p in params.items() if p},
        "actual": summary(outcomes[0], recorded, users),
        "policies": {o.name: summary(o, recorded, users) for o in outcomes[1:]},
        "assumptions": assumptions(hist, missing, site),
        "labels": {o.name: (labels or {}).get(o.name, o.name) for o in outcomes},
        "baseline_choice": choice,
        "users": by_group(users, outcomes, gpu_s),
        "accounts": by_group(accounts, outcomes, gpu_s),
    }
    if managed is not None:
        pol: dict[str, dict] = out["policies"]
        base = pol.get("backfill", {}).get("avg_jct_s")
        out["managed"] = {
            "estimates": managed,
            # average JCT over backfill's with the same estimates (the target: lyapunov <= 0.85)
            "avg_jct_vs_backfill": ({n: m["avg_jct_s"] / base for n, m in pol.items()} if base else None),
        }
    return out


def human_s(s: float) -> str:
    """Seconds for people: 45s, 12.5m, 3.40h, 2.1d."""
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{s / 60:.1f}m"
    if s < 86400 * 2:
        return f"{s / 3600:.2f}h"
    return f"{s / 86400:.1f}d"


def _width(s: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in s)


def _table(heads: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(_width(h), *(_width(r[i]) for r in rows)) for i, h in enumerate(heads)]

    def line(r: Sequence[str]) -> str:
        cells = []
        for i, (cell, w) in enumerate(zip(r, widths)):
            pad = " " * (w - _width(cell))
            cells.append(cell + pad if i == 0 else pad + cell)
        return "  ".join(cells).rstrip()

    return [line(heads), *(line(r) for r in rows)]


def _typed_total(spec: str) -> int:
    """The GPUs of typed node groups ``a100:2x4,t4:1x4``."""
    return sum(int(n) * int(g) for n, _, g in (p.split(":", 1)[1].partition("x") for p in spec.split(",")))


def format_tables(s: dict, top_users: int = 10) -> str:
    """The terminal view: what was read, the cluster, actual vs policies, the busiest users."""
    j = s["jobs"]
    c = s["cluster"]
    out = [
        f"view: {s['view_text']}",
        f"{s['source']}: {s['period']['first_arrival']} to {s['period']['last_end']} ({s['period']['days']:g} days)",
        f"jobs: {j['gpu']} GPU jobs replayed; left out: {j['cpu_only']} CPU-only, {j['cancelled_before_start']} "
        f"cancelled before start, {j['still_running']} still running, {j['pending']} pending, "
        f"{j['never_started']} never started, {j['other_partition']} other partitions; "
        f"{j['requeued']} requeued; {j['steps']} step lines skipped",
        (f"cluster: {c['gpu_types']} ({c['total_gpus']} GPUs, {c['how']}); slot {s['slot_s']:g} s, " if c.get("gpu_types")
         else f"cluster: {c['nodes']} x {c['gpus_per_node']} GPUs ({c['how']}); slot {s['slot_s']:g} s, ")
        + ("run times estimated from earlier jobs" if s.get("managed") else f"estimate error {s['estimate_error']:g}"),
    ]
    m = s.get("managed")
    if m:
        e = m["estimates"]
        out.append(f"estimates: median error {e['median_rel_error']:.0%} of the run, median log(est/actual) "
                   f"{e['median_log_ratio']:+.2f}, {e['within_2x']:.0%} within 2x; sources: "
                   + ", ".join(f"{k} {v}" for k, v in e["sources"].items()))
        if m["avg_jct_vs_backfill"]:
            out.append("average JCT / backfill's with the same estimates: "
                       + ", ".join(f"{k} {v:.3f}" for k, v in m["avg_jct_vs_backfill"].items()))
    out += [f"assumed: {a['text']}" for a in s.get("assumptions", [])]
    ch = s.get("baseline_choice")
    if ch:
        out.append(f"best other baseline: {ch['chosen']}, the lowest average JCT of "
                   + ", ".join(f"{n} {human_s(v)}" for n, v in ch["candidates"].items())
                   + " (the others: name them with --policies)")
    out.append("")
    label = s.get("labels", {})
    heads = ("", "avg JCT", "p95 JCT", "avg wait", "p95 wait", "slowdown", "worst user", "GPU util", "other GPUs", "sim s")
    rows = []
    for name, m in [("actual", s["actual"]), *s["policies"].items()]:
        rows.append([
            label.get(name, name), human_s(m["avg_jct_s"]), human_s(m["p95_jct_s"]), human_s(m["avg_wait_s"]),
            human_s(m["p95_wait_s"]), f"{m['avg_slowdown']:.2f}", f"{m['worst_user_slowdown']:.2f}",
            f"{m['gpu_util']:.2f}", str(m["other_gpu_count"]), f"{m['wall_s']:.1f}" if "wall_s" in m else "",
        ])
    out += _table(heads, rows)
    pols = list(s["policies"])
    if pols:
        users = sorted(s["users"].items(), key=lambda kv: (-kv[1]["gpu_hours"], kv[0]))[:top_users]
        p = "lyapunov" if "lyapunov" in pols else pols[0]
        out += ["", f"busiest users (of {len(s['users'])}) by recorded GPU-hours: actual vs {p}"]
        heads2 = ("user", "jobs", "GPU-h", "avg wait", f"{p} wait", "slowdown", f"{p} slowdown")
        rows2 = []
        for name, u in users:
            a, q = u["actual"], u["policies"][p]
            rows2.append([name, str(u["jobs"]), f"{u['gpu_hours']:.1f}", human_s(a["avg_wait_s"]),
                          human_s(q["avg_wait_s"]), f"{a['avg_slowdown']:.2f}", f"{q['avg_slowdown']:.2f}"])
        out += _table(heads2, rows2)
    return "\n".join(out)
