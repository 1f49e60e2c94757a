#!/usr/bin/env python3
"""Elastic's moves across GPU types (docs/types.md, "Moves across types") on cluster shapes, workloads
and seeds none of its design, held-out or generalisation runs used: each case replayed with the moves
(the default) and without (``--param elastic.type_moves=false``); prints each ratio (with / without
average JCT), their geometric mean, and how many cases got worse.

    python benchmarks/experiments/type_moves_unseen.py [--seeds 11,12,13,14,15,16] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys

CLUSTERS = ("a100:1x8,v100:2x8,t4:4x4", "a100:3x4,rtx2080ti:1x8,t4:3x4")
WORKLOADS = ("seed-small-scattered", "seed-small-bursty", "seed-large-scattered", "seed-large-bursty",
             "synth:mixed160,load=1.5")


def avg_jct(workload: str, seed: int, cluster: str, moves: bool) -> float:
    cmd = [sys.executable, "-c", "from lyasched.cli import main; main()", "replay", "-w", workload, "--seed", str(seed),
           "--cluster", cluster, "--policies", "elastic", "--json"]
    if not moves:
        cmd += ["--param", "elastic.type_moves=false"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(json.loads(out)["policies"]["elastic"]["avg_jct_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="11,12,13,14,15,16")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cases = {}
    for c in CLUSTERS:
        for w in WORKLOADS:
            for s in (int(x) for x in a.seeds.split(",")):
                r = avg_jct(w, s, c, True) / avg_jct(w, s, c, False)
                cases[f"{c} {w} seed {s}"] = r
                print(f"{c} {w} seed {s}: {r:.4f}", file=sys.stderr)
    rs = list(cases.values())
    summary = {"cases": len(rs), "geomean": math.exp(sum(map(math.log, rs)) / len(rs)),
               "worse": sum(r > 1.0 for r in rs), "worse_2pct": sum(r > 1.02 for r in rs), "worst": max(rs)}
    print(json.dumps({"ratios": cases, "summary": summary}) if a.json else json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
