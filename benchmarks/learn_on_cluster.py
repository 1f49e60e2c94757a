"""Learning from every run on the real Slurm test cluster (`benchmarks/profile_accuracy.py --cluster`).

As root with `slurm/cluster up` (inside the cluster's flock, see docs/test-cluster.md): starts
`lyasched serve` (2 s slots, its own database), submits the example model with `lyasub` as the
test user on exactly 1, 2 and 4 GPUs (``--rounds`` times, one job at a time so that jobs do not
compete for the 2 cores), and lets every job report its step times (jobscripts/train_example.py
uses `lyasched.job.steptimes`). The service learns the profile and the start-up term when each job
ends. Then ONE held-out job on 3 GPUs runs; its reported step time and observed run time are
compared with what the FIRST profile (the one lyasub profiled and submitted with) and the
LEARNED profile (cost table after the 1/2/4-GPU runs, before the held-out job ran) predict.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "jobscripts" / "train_example.py"
sys.path.insert(0, str(REPO / "tests"))  # the test users and as_user (tests/reliability/users.py)

from reliability.users import TEST_USER as USER, as_user  # noqa: E402


def _wait_row(db_path: Path, job_id: str, timeout: float, say) -> dict:
    from lyasched.store import records

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            db = records.open_records(db_path)
            row = records.job_by_slurm_id(db, job_id)
        except Exception:  # noqa: BLE001 -- the service may be creating the database
            row = None
        if row and row["state"] in ("finished", "vanished", "invalid") and (row["refined"] or row["state"] != "finished"
                                                                            or row["slurm_state"] != "COMPLETED"):
            return dict(row)
        time.sleep(1)
    raise TimeoutError(f"job {job_id} not finished and learned from within {timeout:.0f} s")


def run(model: str, global_batch: int, iterations: int, rounds: int, held_out: int, say) -> dict:
    from lyasched.costmodel.cost import ClusterSpec, CostModel
    from lyasched.costmodel.learn import predict_step, read_steps, steps_path
    from lyasched.store import costtable, records
    from lyasched.costmodel import startup
    from lyasched.summary import CostSummary

    if shutil.which("sinfo") is None or subprocess.run(["id", USER], capture_output=True).returncode:
        raise RuntimeError("needs the Slurm test cluster (slurm/cluster up) and its test user")
    work = Path(tempfile.mkdtemp(prefix="lyasched-learn-", dir="/tmp"))
    work.chmod(0o1777)
    svc = work / "svc"
    svc.mkdir()
    db_path = svc / "lyasched.db"
    cfg = svc / "config.toml"
    cfg.write_text(f'[service]\nslot_seconds = 2\nrelease_grace = 60\ndb = "{db_path}"\nusers = ["{USER}"]\n'
                   'log_level = "INFO"\n[policy]\nname = "lyapunov"\n')
    # a SIGTERM (e.g. from `timeout`) must still stop the service and cancel the jobs below
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))
    log = open(svc / "serve.log", "w")
    serve = subprocess.Popen([shutil.which("lyasched") or "lyasched", "serve", "--config", str(cfg)],
                             stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    jobs: list[str] = []
    try:
        def submit(g: int) -> tuple[str, dict]:
            r = as_user(USER, shutil.which("lyasub") or "lyasub", "--parsable", "--db", str(work / "user.db"), "--time", "10",
                        "--output", str(work / "%j.out"), "--model", model, "--global-batch", str(global_batch),
                        "--iterations", str(iterations), "--min-gpus", str(g), "--max-gpus", str(g), "--",
                        str(TRAIN), "--threads", "1", cwd=str(work), timeout=600)
            if r.returncode != 0:
                raise RuntimeError(f"lyasub failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
            job_id = r.stdout.strip().splitlines()[-1]
            jobs.append(job_id)
            row = _wait_row(db_path, job_id, 300, say)
            if row["slurm_state"] != "COMPLETED":
                out = work / f"{job_id}.out"
                tail = out.read_text(errors="replace").strip().splitlines()[-3:] if out.exists() else []
                raise RuntimeError(f"job {job_id} on {g} GPUs ended {row['slurm_state']}: {' | '.join(tail)}")
            rep = read_steps(steps_path(str(work), job_id))
            say(f"  job {job_id}: {g} GPU(s), observed {row['observed']:.1f} s (predicted "
                f"{row['predicted'] or float('nan'):.1f} s), reported {rep.steps if rep else 0} steps of "
                f"{(rep.step_time if rep else float('nan')) * 1e3:.2f} ms")
            return job_id, {"row": row, "report": rep}

        t0 = time.monotonic()
        runs = []
        for rnd in range(rounds):
            for g in (1, 2, 4):
                say(f"round {rnd + 1}/{rounds}: {g} GPU(s)")
                runs.append((g, *submit(g)))
        db = records.open_records(db_path)
        first_row = runs[0][2]["row"]
        summary = CostSummary.decode(first_row["summary"])
        first = summary.to_profile()
        sig = summary.sig
        entries = [e for e in costtable.list_entries(db) if e.signature == sig]
        if not entries:
            raise RuntimeError(f"the service stored no profile for {sig}")
        entry = entries[0]
        learned = entry.profile()  # learned profile before the held-out job ran
        term = startup.term(db)
        nodes = json.loads(first_row["nodes"] or "[]")
        # the cluster the service predicted with: 3 nodes x 4 GPUs, the configured (default) links
        cluster = ClusterSpec(nodes=3, gpus_per_node=4)

        say(f"held out: {held_out} GPUs")
        hid, held = submit(held_out)
        rep = held["report"]
        if rep is None:
            raise RuntimeError(f"held-out job {hid} reported no steps")
        local = global_batch / held_out
        pred_first = predict_step(first, cluster, rep.placement, local)
        pred_learned = predict_step(learned, cluster, rep.placement, local)
        observed = held["row"]["observed"]
        run_first = iterations * CostModel(cluster).iter_time(first, global_batch, held_out, len(rep.placement) > 1)
        run_learned = held["row"]["predicted"]
        after = costtable.events(db, sig, entry.device_type)
        return {
            "model": model, "global_batch": global_batch, "iterations": iterations, "rounds": rounds,
            "learned_from": [{"gpus": g, "job": j, "placement": "".join(map(str, d["report"].placement)) if d["report"] else None,
                              "step_time_s": d["report"].step_time if d["report"] else None,
                              "first_step_pred_s": predict_step(first, cluster, d["report"].placement, global_batch / g)
                              if d["report"] else None,
                              "learned_step_pred_s": predict_step(learned, cluster, d["report"].placement, global_batch / g)
                              if d["report"] else None,
                              "observed_s": d["row"]["observed"], "predicted_s": d["row"]["predicted"]}
                             for g, j, d in runs],
            "held_out": {"gpus": held_out, "job": hid, "placement": "".join(map(str, rep.placement)),
                         "step_time_s": rep.step_time, "observed_run_s": observed},
            "first_profile": {"alpha": first.alpha, "beta": first.beta, "params": first.params,
                              "source": summary.source, "step_pred_s": pred_first,
                              "step_abs_rel_err": abs(pred_first / rep.step_time - 1),
                              "run_pred_s": run_first, "run_abs_rel_err": abs(run_first / observed - 1)},
            "learned_profile": {"alpha": learned.alpha, "beta": learned.beta,
                                "comm_scale_intra": learned.comm_scale_intra,
                                "comm_scale_inter": learned.comm_scale_inter, "provenance": entry.provenance,
                                "step_pred_s": pred_learned, "step_abs_rel_err": abs(pred_learned / rep.step_time - 1),
                                "run_pred_s": run_learned,
                                "run_abs_rel_err": abs(run_learned / observed - 1) if run_learned else None},
            "startup": term.to_dict() if term else None,
            "history": [f"{h['event']}: {h['detail']}" for h in after],
            "first_nodes": nodes, "elapsed_s": time.monotonic() - t0, "work_dir": str(work),
        }
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
        if jobs:
            subprocess.run(["scancel", *jobs], capture_output=True, timeout=30)


if __name__ == "__main__":
    print("run it as: python benchmarks/profile_accuracy.py --cluster [--json]", file=sys.stderr)
    sys.exit(2)
