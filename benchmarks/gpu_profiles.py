#!/usr/bin/env python3
"""Profile every example model on a CUDA GPU with lyasched's own profiler and check the fit.

Measures (needs a GPU): `lyasched.profile.profiler.profile_model` on ``--device cuda`` for each
example model over the default batch sweep (1, 2, 4, ... 1024), and writes the results (the same
JSON as `python -m lyasched.profile`, one list) to ``--out``. ``--from FILE`` skips measuring and
analyses a saved file (so the table can be re-made on a machine without a GPU).

Analysis, per model: the fitted t(b) = alpha + beta*b (what the cost model uses at per-GPU batch
B/g) against every measured batch, and leave-one-batch-out: each batch predicted by the line
fitted to the other batches. On a GPU the step time is nearly flat at small batches (the device is
under-used) and linear at large ones; a least-squares line over 1..1024 follows the large batches
and can miss the small ones, which are exactly the per-GPU batches of a job spread over many GPUs.

    python benchmarks/gpu_profiles.py --out gpu_profiles.json          # on the GPU machine
    python benchmarks/gpu_profiles.py --from benchmarks/data/gpu/h200.json [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)

from lyasched.costmodel.batchshape import fit_batch_shape, leave_one_batch_out  # noqa: E402
from lyasched.costmodel.fit import fit_linear  # noqa: E402

TARGET = {"loo_median": 0.05, "loo_max": 0.15}  # issue 34: the cost model's t(b), held-out batches

MODELS = ["mlp", "mlp-large", "resnet", "resnet20", "vgg", "vgg11", "mobilenet", "recsys", "transformer"]


def measure(models: list[str], warmup: int, repeats: int, max_batch: int | None) -> list[dict]:
    from lyasched.profile.profiler import profile_model

    out = []
    for m in models:
        t0 = time.time()
        try:
            r = profile_model(m, device="cuda", warmup=warmup, repeats=repeats, max_batch=max_batch,
                              progress=lambda s, m=m: print(f"[{m}] {s}", file=sys.stderr, flush=True))
        except Exception as e:  # noqa: BLE001 - record and go on: one model's failure is a finding
            print(f"[{m}] FAILED: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            out.append({"model": m, "error": f"{type(e).__name__}: {e}"})
            continue
        d = r.to_dict()
        d["wall_s"] = round(time.time() - t0, 2)
        out.append(d)
        print(f"[{m}] done in {d['wall_s']} s", file=sys.stderr, flush=True)
    return out


def analyse(results: list[dict]) -> list[dict]:
    """Per model: the full fit's relative error at every batch and the leave-one-batch-out error."""
    rows = []
    for r in results:
        if "error" in r:
            rows.append({"model": r["model"], "error": r["error"]})
            continue
        b, t = r["batches"], r["step_times"]
        full = fit_linear(b, t)
        fit_err = [(full.intercept + full.slope * x) / y - 1 for x, y in zip(b, t)]
        loo = []
        for i in range(len(b)):
            bb = b[:i] + b[i + 1:]
            tt = t[:i] + t[i + 1:]
            f = fit_linear(bb, tt)
            loo.append((f.intercept + f.slope * b[i]) / t[i] - 1)
        shape = fit_batch_shape(b, t)
        sloo = leave_one_batch_out(b, t)
        rows.append({
            "model": r["model"], "device": r["device_name"], "params": r["params"],
            "alpha_ms": r["alpha"] * 1e3, "beta_us": r["beta"] * 1e6, "r2": r["r2"],
            "m0_mib": r["m0"] / 2**20, "m1_kib": r["m1"] / 2**10, "max_batch": r["max_batch"], "stopped": r["stopped"],
            "t_min_ms": t[0] * 1e3, "t_max_ms": t[-1] * 1e3,
            "flat_until": max((x for x, y in zip(b, t) if y <= 1.25 * t[0]), default=b[0]),
            "fit_abs_err_median": statistics.median(abs(e) for e in fit_err),
            "fit_abs_err_max": max(abs(e) for e in fit_err),
            "fit_err_smallest_batch": fit_err[0],
            "loo_abs_err_median": statistics.median(abs(e) for e in loo),
            "loo_abs_err_max": max(abs(e) for e in loo),
            "batches": b, "step_ms": [round(y * 1e3, 4) for y in t], "fit_err": [round(e, 4) for e in fit_err],
            # the cost model's t(b) (lyasched.costmodel.batchshape): flat up to the knee, then linear
            "shape": {"alpha_ms": shape.alpha * 1e3, "beta_us": shape.beta * 1e6, "knee": shape.knee,
                      "fit_abs_err_median": shape.median_abs_rel_err,
                      "loo_abs_err_median": statistics.median(abs(e) for e in sloo),
                      "loo_abs_err_max": max(abs(e) for e in sloo),
                      "loo_err": [round(e, 4) for e in sloo]},
        })
    return rows


def table(rows: list[dict]) -> str:
    out = ["| model | params | alpha ms | beta us/sample | R2 | t(1) ms | t(max) ms | flat until | m0 MiB | m1 KiB | "
           "max b | fit err median / max | at b=1 | leave-one-batch-out median / max |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | failed: {r['error']} |" + " |" * 12)
            continue
        out.append(
            f"| {r['model']} | {r['params']:,} | {r['alpha_ms']:.3f} | {r['beta_us']:.3f} | {r['r2']:.3f} | "
            f"{r['t_min_ms']:.3f} | {r['t_max_ms']:.3f} | {r['flat_until']} | {r['m0_mib']:.1f} | {r['m1_kib']:.1f} | "
            f"{r['max_batch']} ({r['stopped']}) | {100 * r['fit_abs_err_median']:.1f}% / {100 * r['fit_abs_err_max']:.1f}% | "
            f"{100 * r['fit_err_smallest_batch']:+.1f}% | {100 * r['loo_abs_err_median']:.1f}% / {100 * r['loo_abs_err_max']:.1f}% |")
    out += ["", "flat-then-linear t(b) = alpha + beta*max(0, b - knee) (the cost model's, "
            "lyasched.costmodel.batchshape); target leave-one-batch-out median <= "
            f"{TARGET['loo_median']:.0%}, max <= {TARGET['loo_max']:.0%}", "",
            "| model | alpha ms | beta us/sample | knee | fit err median | leave-one-batch-out median / max | worst batch | target |",
            "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            continue
        s = r["shape"]
        worst = r["batches"][max(range(len(s["loo_err"])), key=lambda i: abs(s["loo_err"][i]))]
        ok = s["loo_abs_err_median"] <= TARGET["loo_median"] and s["loo_abs_err_max"] <= TARGET["loo_max"]
        out.append(f"| {r['model']} | {s['alpha_ms']:.3f} | {s['beta_us']:.3f} | {s['knee']:g} | "
                   f"{100 * s['fit_abs_err_median']:.1f}% | {100 * s['loo_abs_err_median']:.1f}% / "
                   f"{100 * s['loo_abs_err_max']:.1f}% | {worst} | {'met' if ok else 'missed'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the measured profiles (JSON list) here")
    ap.add_argument("--from", dest="src", help="analyse this saved file instead of measuring")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--max-batch", type=int, default=None, help="default: the profiler's (1024 on a GPU)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.src:
        try:
            results = json.loads(Path(args.src).read_text())
        except (OSError, ValueError) as e:
            print(f"error: cannot read {args.src}: {e}", file=sys.stderr)
            return 2
    else:
        import torch

        if not torch.cuda.is_available():
            print("error: no CUDA device visible (use --from FILE to analyse a saved run)", file=sys.stderr)
            return 2
        results = measure([m for m in args.models.split(",") if m], args.warmup, args.repeats, args.max_batch)
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    rows = analyse(results)
    if args.json:
        print(json.dumps({"models": rows, "target": TARGET}, indent=1))
    else:
        dev = next((r["device"] for r in rows if "device" in r), "?")
        print(f"device: {dev}\n")
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
