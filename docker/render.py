"""Render the docker test cluster's configuration from slurm/'s templates (one source of truth).

slurm/templates/slurm.conf and gres.conf are filled in with the same @KEYS@ slurm/cluster uses, then
the few settings that differ between one host and several containers are replaced line by line
(OVERRIDES below, each with its reason), and slurm/job_submit.lua is copied with the service
account's uid added to PRIVILEGED_UIDS. Also writes slurmdbd.conf (accounting: only here).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

STATE = "/var/lib/lyasched-cluster"  # inside each container, as on the native cluster

# Key -> value replacing the template's line "Key=...". Everything else is the native cluster's.
OVERRIDES = {
    # slurmdbd on ctl: `sacct` works, the service's accounting path is real.
    "AccountingStorageType": "accounting_storage/slurmdbd",
    # Long enough for every test to see its jobs finish in squeue (the accounting test lowers it).
    "MinJobAge": "600",
    # A killed or cut-off node is declared DOWN after 30 s (the fault tests wait for it).
    "SlurmdTimeout": "30",
}
EXTRA = """
# Docker cluster only (docker/render.py): slurmdbd on ctl.
AccountingStorageHost=ctl
AccountingStoragePort=6819
# GPU counts in sacct's AllocTRES, in all and per type (lyasched whatif reads them: docs/whatif.md).
AccountingStorageTRES=gres/gpu,@TYPED_TRES@
# Associations, QOS and their limits enforced, as a site with accounting runs (the limits test,
# tests/test_docker_limits.py, sets a QOS GPU limit; docker/init.sh gives every user an association).
AccountingStorageEnforce=associations,limits,qos
"""

SLURMDBD = f"""# Rendered by docker/render.py: slurmdbd of the docker test cluster (ctl), MariaDB on localhost.
AuthType=auth/munge
DbdHost=ctl
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=lyasched
StorageLoc=slurm_acct_db
PidFile={STATE}/run/slurmdbd.pid
LogFile={STATE}/log/slurmdbd.log
DebugLevel=info
"""

PRIVILEGED_LINE = "local PRIVILEGED_UIDS = { [0] = true }"


def render(template: str, keys: dict[str, str]) -> str:
    for key, val in keys.items():
        template = template.replace(f"@{key}@", val)
    left = re.findall(r"@[A-Z_]+@", template)
    if left:
        sys.exit(f"render.py: unknown placeholders {left} in a template")
    return template


def override(conf: str, values: dict[str, str]) -> str:
    lines = conf.splitlines()
    for key, val in values.items():
        hits = [i for i, ln in enumerate(lines) if ln.split("=", 1)[0] == key]
        if len(hits) != 1:
            sys.exit(f"render.py: slurm.conf template has {len(hits)} lines for {key}, expected 1")
        lines[hits[0]] = f"{key}={val}"
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--nnodes", type=int, default=3)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--cpus", type=int, default=8)
    ap.add_argument("--ctl-ip", required=True)
    ap.add_argument("--node-ip-prefix", required=True, help="node K gets PREFIX.(20+K)")
    ap.add_argument("--svc-uid", type=int, required=True)
    ap.add_argument("--gpu-types", default="a100,a100,t4",
                    help="GPU type of node 1, 2, ... (the last repeats): Gres=gpu:TYPE:N and a node feature")
    a = ap.parse_args()

    types = [t for t in a.gpu_types.split(",") if t]
    if not types or not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", t) for t in types):
        sys.exit(f"render.py: bad --gpu-types {a.gpu_types!r}")
    type_of = {k: types[min(k, len(types)) - 1] for k in range(1, a.nnodes + 1)}
    node_lines = "\n".join(
        f"NodeName=node{k} NodeAddr={a.node_ip_prefix}.{20 + k} CPUs={a.cpus} RealMemory=4000 "
        f"Gres=gpu:{type_of[k]}:{a.gpus} Features={type_of[k]} State=UNKNOWN" for k in range(1, a.nnodes + 1))
    gres_lines = "\n".join(f"NodeName=node{k} Name=gpu Type={type_of[k]} File=/dev/lyafake/node{k}-gpu[0-{a.gpus - 1}]"
                           for k in range(1, a.nnodes + 1))
    keys = {"STATE": STATE, "CTLD_HOST": "ctl", "CTLD_PORT": "6817", "NNODES": str(a.nnodes),
            "NODE_LIST": f"node[1-{a.nnodes}]", "NODE_LINES": node_lines, "GRES_LINES": gres_lines,
            "GPUS_PER_NODE": str(a.gpus), "TOTAL_GPUS": str(a.gpus * a.nnodes)}
    tpl = a.repo / "slurm" / "templates"
    slurm_conf = render((tpl / "slurm.conf").read_text(), keys)
    slurm_conf = slurm_conf.replace("SlurmctldHost=ctl(127.0.0.1)", f"SlurmctldHost=ctl({a.ctl_ip})")
    if f"SlurmctldHost=ctl({a.ctl_ip})" not in slurm_conf:
        sys.exit("render.py: SlurmctldHost line not found in the slurm.conf template")
    typed_tres = ",".join(f"gres/gpu:{t}" for t in dict.fromkeys(type_of.values()))
    slurm_conf = override(slurm_conf, OVERRIDES).rstrip("\n") + "\n" + EXTRA.replace("@TYPED_TRES@", typed_tres)

    lua = (a.repo / "slurm" / "job_submit.lua").read_text()
    if lua.count(PRIVILEGED_LINE) != 1:
        sys.exit(f"render.py: '{PRIVILEGED_LINE}' not found once in slurm/job_submit.lua")
    lua = lua.replace(PRIVILEGED_LINE, f"local PRIVILEGED_UIDS = {{ [0] = true, [{a.svc_uid}] = true }}"
                                       " -- + the lyasched service account (docker/render.py)")

    a.out.mkdir(parents=True, exist_ok=True)
    files = {"slurm.conf": slurm_conf, "gres.conf": render((tpl / "gres.conf").read_text(), keys),
             "job_submit.lua": lua, "slurmdbd.conf": SLURMDBD,
             "lyasched-managed.conf": render((tpl / "lyasched-managed.conf").read_text(), keys)}
    for name, text in files.items():
        path = a.out / name
        if not path.exists() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)


if __name__ == "__main__":
    main()
