"""Cluster parameters measured by `lyasched calibrate`: the intra- and inter-node links.

One row per link kind ("intra", "inter"); a new calibration replaces the old one. The
service and `lyasched replay` read them with ``load_cluster_links`` (or get a ClusterSpec
with them from ``with_calibrated_links``) and keep ClusterSpec's defaults where a kind was
never calibrated.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import sqlite_utils

from lyasched.costmodel.cost import ClusterSpec, Link

TABLE = "cluster_params"
KINDS = ("intra", "inter")


def ensure_table(db: sqlite_utils.Database) -> None:
    if TABLE not in db.table_names():
        db.table(TABLE).create(
            {
                "kind": str,
                "bandwidth": float,  # bytes/s
                "latency": float,  # s per ring step
                "r2": float,
                "world_size": int,
                "backend": str,
                "hosts": str,
                "source": str,
                "fitted_at": str,
            },
            pk="kind",
            if_not_exists=True,
        )


def save_cluster_link(
    db: sqlite_utils.Database,
    kind: str,
    link: Link,
    *,
    r2: float = float("nan"),
    world_size: int = 0,
    backend: str = "",
    hosts: tuple[str, ...] | list[str] = (),
    source: str = "",
) -> None:
    """Store (replace) the calibrated link of ``kind``."""
    save_cluster_links(db, [dict(kind=kind, link=link, r2=r2, world_size=world_size, backend=backend, hosts=hosts,
                                 source=source)])


def save_cluster_links(db: sqlite_utils.Database, items: list[dict]) -> None:
    """Store several links in one transaction: all or nothing."""
    rows = []
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for it in items:
        kind, link = it["kind"], it["link"]
        if kind not in KINDS:
            raise ValueError(f"link kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if not (link.bandwidth > 0) or link.latency < 0:
            raise ValueError(f"{kind}: bandwidth must be > 0 and latency >= 0")
        rows.append(
            {
                "kind": kind,
                "bandwidth": float(link.bandwidth),
                "latency": float(link.latency),
                "r2": float(it.get("r2", float("nan"))),
                "world_size": int(it.get("world_size", 0)),
                "backend": str(it.get("backend", "")),
                "hosts": ",".join(it.get("hosts", ()) or ()),
                "source": str(it.get("source", "")),
                "fitted_at": now,
            }
        )
    ensure_table(db)
    cols = list(rows[0]) if rows else []
    sql = f"INSERT OR REPLACE INTO {TABLE} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    conn = db.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(sql, [tuple(r[c] for c in cols) for r in rows])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def cluster_link_rows(db: sqlite_utils.Database) -> list[dict]:
    if TABLE not in db.table_names():
        return []
    return sorted(db[TABLE].rows, key=lambda r: KINDS.index(r["kind"]) if r["kind"] in KINDS else 99)


def load_cluster_links(db: sqlite_utils.Database) -> tuple[Link | None, Link | None]:
    """(intra, inter) as calibrated, None for a kind never calibrated."""
    found = {r["kind"]: Link(bandwidth=r["bandwidth"], latency=r["latency"]) for r in cluster_link_rows(db)}
    return found.get("intra"), found.get("inter")


def with_calibrated_links(db: sqlite_utils.Database, cluster: ClusterSpec) -> ClusterSpec:
    """``cluster`` with its intra/inter links replaced by the calibrated ones, where present."""
    intra, inter = load_cluster_links(db)
    return dataclasses.replace(cluster, intra=intra or cluster.intra, inter=inter or cluster.inter)
