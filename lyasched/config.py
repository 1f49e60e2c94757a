"""Service configuration: one TOML file, every key optional, checked before anything runs.

```toml
[service]
slot_seconds = 30          # one scheduling decision every slot
db = "/var/lib/lyasched/lyasched.db"
release_grace = 60         # a released job Slurm has not started by then is held again
move_timeout = 300         # a moved job whose checkpoint is not complete by then is left running
slurm_timeout = 30         # seconds per Slurm command
partition = ""             # only nodes of this partition ("" = all GPU nodes)
log_level = "INFO"
users = []                 # schedule only these users' jobs ([] = everybody's; a pilot, or tests)
device = ""                # cost-table device key refined with observed run times ("" = GPU type from Gres)

[policy]
name = "lyapunov"
[policy.params]            # passed to make_policy(name, **params)
V = 10.0

[slurm]
backend = "auto"           # "auto" | "cli" | "pyslurm" (docs/slurm-backends.md)
limits = "auto"            # Slurm's QOS/association GPU limits: "auto" (when sacctmgr answers) | "on" | "off"

[metrics]                  # Prometheus metrics of `lyasched serve` (absent: off; docs/service.md, Monitoring)
port = 9464                # 0 = any free port (logged)
address = "127.0.0.1"      # bind address

[failsafe]                 # when the service stops (docs/service.md, "When the service stops")
lease = "/var/lib/lyasched/lease.json"  # renewed every slot; on storage the controller host shares (default: beside db)
grace = 150                # `lyasched failsafe` releases held jobs once the lease is this stale (default 5 slots, >= 60 s)
takeover_slots = 2         # `lyasched serve --standby` takes over after this many slots without renewal (<= 3)

[cluster]                  # what the cost model assumes about the hardware
gpu_mem = 32e9
intra = { bandwidth = 100e9, latency = 1e-5 }   # within a node
inter = { bandwidth = 10e9, latency = 5e-5 }    # between nodes
# optional: the cluster's fitted step-time shape (lyasched.costmodel.commshape: overlap, contention, growth
# of the all-reduce with GPUs and nodes); absent = the plain ring model. docs/calibration.md
shape = { gamma = 2.8, s_multi = 0.05, sigma = 0.02, inter_ratio = 4.2, d_intra = 0.17, d_inter = 0.02, d_nodes = 0.05 }

[cluster.gpu_types]        # optional: GPU types the roofline does not know, or overrides (lyasched.costmodel.roofline)
rtx = { tflops = 53.8, bandwidth = 616, memory_gib = 11 }   # dense fp16 TFLOP/s, GB/s, GiB per GPU
a100 = { memory_gib = 80 }                                  # an override names only what differs
```

A bad file is a `ConfigError` with a one-line message naming the file and the key.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from lyasched.costmodel.cost import Link

DEFAULT_PATH = Path("/etc/lyasched/config.toml")
CONFIG_ENV = "LYASCHED_CONFIG"
DEFAULT_DB = Path("/var/lib/lyasched/lyasched.db")


def _known_types() -> Mapping[str, Any]:
    from lyasched.costmodel.roofline import KNOWN_TYPES

    return KNOWN_TYPES


class ConfigError(ValueError):
    """The configuration is invalid (message is one line)."""


@dataclass(frozen=True)
class Config:
    slot_seconds: float = 30.0
    db: Path = DEFAULT_DB
    release_grace: float = 60.0
    move_timeout: float = 300.0  # seconds a move waits for the job's checkpoint (docs/elastic.md)
    slurm_timeout: float = 30.0
    partition: str = ""
    log_level: str = "INFO"
    users: tuple[str, ...] = ()  # schedule only these users' jobs (() = everybody's)
    device: str = ""  # cost-table device key for refinement ("" = the nodes' GPU type, else "gpu")
    slurm_backend: str = "auto"  # [slurm] backend: "auto" | "cli" | "pyslurm"
    slurm_limits: str = "auto"  # [slurm] limits: "auto" | "on" | "off" (lyasched.live.limits)
    policy: str = "lyapunov"
    params: Mapping[str, Any] = field(default_factory=dict)
    gpu_mem: float = 32e9
    intra: Link = field(default_factory=lambda: Link(bandwidth=100e9, latency=10e-6))
    inter: Link = field(default_factory=lambda: Link(bandwidth=10e9, latency=50e-6))
    shape: Any = None  # lyasched.costmodel.commshape.CommShape from [cluster] shape; None = plain ring model
    # GPU types by Slurm GRES name: the roofline's table with [cluster.gpu_types] added (lyasched.costmodel.roofline)
    gpu_types: Mapping[str, Any] = field(default_factory=lambda: dict(_known_types()))
    metrics_port: int | None = None  # [metrics] port: Prometheus metrics of serve (None = off; 0 = any free port)
    metrics_address: str = "127.0.0.1"  # [metrics] address: what the metrics server binds
    failsafe_lease: Path | None = None  # [failsafe] lease: the service's lease file (None: lease.json beside db)
    tenant_shares: dict[str, float] = field(default_factory=dict)  # [tenants] shares: user -> share (equal when absent)
    failsafe_grace: float | None = None  # [failsafe] grace (None: 5 slots of the lease, at least 60 s)
    failsafe_takeover_slots: float = 2.0  # [failsafe] takeover_slots: a standby takes over after this many slots
    source: str = "<defaults>"


_SERVICE_KEYS = {
    "slot_seconds": float,
    "db": str,
    "release_grace": float,
    "move_timeout": float,
    "slurm_timeout": float,
    "partition": str,
    "log_level": str,
    "device": str,
    "users": list,
}
_LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}


# Upper bounds (a huge value is a typo, not a wish): a slot at most a day, a grace period at
# most a week, one Slurm command at most an hour.
_MAX = {"slot_seconds": 86400.0, "release_grace": 7 * 86400.0, "slurm_timeout": 3600.0, "move_timeout": 86400.0}


def _number(where: str, key: str, value: Any, positive: bool = True, hi: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
    v = float(value)
    if v != v or v in (float("inf"), float("-inf")):
        raise ConfigError(f"{where}: {key} must be finite, got {value!r}")
    if positive and v <= 0:
        raise ConfigError(f"{where}: {key} must be > 0, got {value!r}")
    if not positive and v < 0:
        raise ConfigError(f"{where}: {key} must be >= 0, got {value!r}")
    if hi is not None and v > hi:
        raise ConfigError(f"{where}: {key} must be <= {hi:g}, got {value!r}")
    return v


def _table(where: str, name: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: [{name}] must be a table")
    return value


def _link(where: str, name: str, value: Any, default: Link) -> Link:
    t = _table(where, name, value)
    unknown = set(t) - {"bandwidth", "latency"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {name}.{sorted(unknown)[0]}")
    bw = _number(where, f"{name}.bandwidth", t.get("bandwidth", default.bandwidth))
    lat = _number(where, f"{name}.latency", t.get("latency", default.latency), positive=False)
    return Link(bandwidth=bw, latency=lat)


def _shape(where: str, value: Any) -> Any:
    """[cluster] shape: a table of `CommShape` fields, each a number within its fitting bounds."""
    from lyasched.costmodel.commshape import _BOUNDS, CommShape

    t = _table(where, "cluster.shape", value)
    known = list(_BOUNDS) + ["lat_bytes", "lat_s", "parallel"]
    unknown = set(t) - set(known)
    if unknown:
        raise ConfigError(f"{where}: unknown key cluster.shape.{sorted(unknown)[0]} (known: {', '.join(known)})")
    kw = {}
    for key, val in t.items():
        lo, hi = _BOUNDS.get(key, (0.0, None))
        v = _number(where, f"cluster.shape.{key}", val, positive=key == "parallel", hi=hi)
        if v < lo:
            raise ConfigError(f"{where}: cluster.shape.{key} must be >= {lo:g}, got {val!r}")
        kw[key] = v
    return CommShape(**kw)


def from_mapping(data: Mapping[str, Any], source: str = "<config>", base_dir: Path | None = None) -> Config:
    """Validate a parsed TOML document and build a Config (relative db paths resolve against
    ``base_dir``, the config file's directory)."""
    where = source
    unknown = set(data) - {"service", "policy", "cluster", "slurm", "metrics", "failsafe", "tenants"}
    if unknown:
        raise ConfigError(f"{where}: unknown table [{sorted(unknown)[0]}] (known: service, policy, cluster, slurm, metrics, "
                          "failsafe, tenants)")
    d = Config()
    kw: dict[str, Any] = {"source": source}

    svc = _table(where, "service", data.get("service", {}))
    for key in svc:
        if key not in _SERVICE_KEYS:
            raise ConfigError(f"{where}: unknown key service.{key} (known: {', '.join(_SERVICE_KEYS)})")
    for key in ("slot_seconds", "release_grace", "slurm_timeout", "move_timeout"):
        if key in svc:
            kw[key] = _number(where, f"service.{key}", svc[key], positive=key != "release_grace", hi=_MAX[key])
    for key in ("db", "partition", "log_level", "device"):
        if key in svc and not isinstance(svc[key], str):
            raise ConfigError(f"{where}: service.{key} must be a string, got {svc[key]!r}")
    if "db" in svc:
        if not svc["db"]:
            raise ConfigError(f"{where}: service.db must not be empty")
        p = Path(svc["db"]).expanduser()
        if not p.is_absolute() and base_dir is not None:
            p = base_dir / p
        kw["db"] = p
    if "partition" in svc:
        kw["partition"] = svc["partition"]
    if "device" in svc:
        kw["device"] = svc["device"]
    if "users" in svc:
        u = svc["users"]
        if not isinstance(u, list) or not all(isinstance(x, str) and x for x in u):
            raise ConfigError(f"{where}: service.users must be a list of user names, got {u!r}")
        kw["users"] = tuple(u)
    if "log_level" in svc:
        lvl = svc["log_level"].upper()
        if lvl not in _LEVELS:
            raise ConfigError(f"{where}: service.log_level must be one of {', '.join(sorted(_LEVELS))}")
        kw["log_level"] = lvl

    pol = _table(where, "policy", data.get("policy", {}))
    for key in pol:
        if key not in {"name", "params"}:
            raise ConfigError(f"{where}: unknown key policy.{key} (known: name, params)")
    if "name" in pol:
        from lyasched.policy import POLICIES

        if not isinstance(pol["name"], str) or pol["name"] not in POLICIES:
            raise ConfigError(f"{where}: policy.name must be one of {', '.join(POLICIES)}, got {pol['name']!r}")
        kw["policy"] = pol["name"]
    if "params" in pol:
        from lyasched.policy.params import ParamError, check_params

        raw = dict(_table(where, "policy.params", pol["params"]))
        try:
            kw["params"] = check_params(kw.get("policy", Config.policy), raw)
        except ParamError as e:
            raise ConfigError(f"{where}: policy.params: {e}") from None

    sl = _table(where, "slurm", data.get("slurm", {}))
    for key in sl:
        if key not in {"backend", "limits"}:
            raise ConfigError(f"{where}: unknown key slurm.{key} (known: backend, limits)")
    if "limits" in sl:
        if sl["limits"] not in ("auto", "on", "off"):
            raise ConfigError(f"{where}: slurm.limits must be one of auto, on, off, got {sl['limits']!r}")
        kw["slurm_limits"] = sl["limits"]
    if "backend" in sl:
        from lyasched.slurm.backend import BACKENDS

        if sl["backend"] not in BACKENDS:
            raise ConfigError(f"{where}: slurm.backend must be one of {', '.join(BACKENDS)}, got {sl['backend']!r}")
        kw["slurm_backend"] = sl["backend"]

    cl = _table(where, "cluster", data.get("cluster", {}))
    for key in cl:
        if key not in {"gpu_mem", "intra", "inter", "shape", "gpu_types"}:
            raise ConfigError(f"{where}: unknown key cluster.{key} (known: gpu_mem, intra, inter, shape, gpu_types)")
    if "gpu_mem" in cl:
        kw["gpu_mem"] = _number(where, "cluster.gpu_mem", cl["gpu_mem"])
    if "intra" in cl:
        kw["intra"] = _link(where, "cluster.intra", cl["intra"], d.intra)
    if "inter" in cl:
        kw["inter"] = _link(where, "cluster.inter", cl["inter"], d.inter)
    if "shape" in cl:
        kw["shape"] = _shape(where, cl["shape"])
    if "gpu_types" in cl:
        from lyasched.costmodel.roofline import parse_types

        try:
            kw["gpu_types"] = parse_types(_table(where, "cluster.gpu_types", cl["gpu_types"]))
        except ValueError as e:
            raise ConfigError(f"{where}: cluster.{e}") from None
    kw.update(_metrics(where, data.get("metrics", {})))
    kw.update(_failsafe(where, data.get("failsafe", {}), base_dir))
    kw.update(_tenants(where, data.get("tenants", {})))
    return Config(**kw)


def _tenants(where: str, value: Any) -> dict[str, Any]:
    """[tenants] shares: {user = share} (lyasched.live.tenants; equal when absent)."""
    t = _table(where, "tenants", value)
    unknown = set(t) - {"shares"}
    if unknown:
        raise ConfigError(f"{where}: unknown key tenants.{sorted(unknown)[0]} (known: shares)")
    shares = _table(where, "tenants.shares", t.get("shares", {}))
    out = {}
    for user, v in shares.items():
        out[str(user)] = _number(where, f"tenants.shares.{user}", v, hi=1e9)
    return {"tenant_shares": out} if out else {}


def _failsafe(where: str, value: Any, base_dir: Path | None) -> dict[str, Any]:
    """[failsafe] lease, grace, takeover_slots (lyasched.live.lease, lyasched.live.failsafe)."""
    t = _table(where, "failsafe", value)
    unknown = set(t) - {"lease", "grace", "takeover_slots"}
    if unknown:
        raise ConfigError(f"{where}: unknown key failsafe.{sorted(unknown)[0]} (known: lease, grace, takeover_slots)")
    kw: dict[str, Any] = {}
    if "lease" in t:
        if not isinstance(t["lease"], str) or not t["lease"]:
            raise ConfigError(f"{where}: failsafe.lease must be a non-empty path, got {t['lease']!r}")
        p = Path(t["lease"]).expanduser()
        kw["failsafe_lease"] = base_dir / p if not p.is_absolute() and base_dir is not None else p
    if "grace" in t:
        kw["failsafe_grace"] = _number(where, "failsafe.grace", t["grace"], hi=7 * 86400.0)
    if "takeover_slots" in t:
        kw["failsafe_takeover_slots"] = _number(where, "failsafe.takeover_slots", t["takeover_slots"], hi=3.0)
    return kw


def _metrics(where: str, value: Any) -> dict[str, Any]:
    """[metrics] port and address (lyasched.live.metrics): the Config fields they set."""
    t = _table(where, "metrics", value)
    unknown = set(t) - {"port", "address"}
    if unknown:
        raise ConfigError(f"{where}: unknown key metrics.{sorted(unknown)[0]} (known: port, address)")
    kw: dict[str, Any] = {}
    if "port" in t:
        kw["metrics_port"] = check_port(t["port"], f"{where}: metrics.port")
    if "address" in t:
        if not isinstance(t["address"], str) or not t["address"]:
            raise ConfigError(f"{where}: metrics.address must be a non-empty string, got {t['address']!r}")
        kw["metrics_address"] = t["address"]
    return kw


def check_port(value: Any, what: str) -> int:
    """A TCP port 0..65535 (0: any free one), else a ConfigError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ConfigError(f"{what} must be a port number 0..65535, got {value!r}")
    return value


# the fail-safe's grace: shorter than this, a service that is merely slow (a long slot, a slow Slurm
# answer) would be taken for a dead one and its jobs released behind its back
MIN_GRACE_S = 60.0
MIN_GRACE_SLOTS = 2


def check_grace(grace: float | None, slot_seconds: float, what: str = "failsafe.grace") -> None:
    """A ConfigError unless ``grace`` (None: the default, 5 slots and >= 60 s) is at least 2 slots
    and at least 60 s."""
    if grace is None:
        return
    floor = max(MIN_GRACE_S, MIN_GRACE_SLOTS * slot_seconds)
    if grace < floor:
        raise ConfigError(f"{what} must be at least {floor:g} s ({MIN_GRACE_SLOTS} slots of {slot_seconds:g} s, "
                          f"and at least {MIN_GRACE_S:g} s), got {grace:g}")


def lease_path(cfg: Config) -> Path:
    """The service's lease file: [failsafe] lease, else lease.json beside the database."""
    return cfg.failsafe_lease if cfg.failsafe_lease is not None else Path(cfg.db).parent / "lease.json"


def load_config(path: str | os.PathLike | None = None) -> Config:
    """Load ``path``; without one, `$LYASCHED_CONFIG` or /etc/lyasched/config.toml, and the
    defaults when that default file does not exist. A named file that is missing is an error."""
    explicit = path is not None or bool(os.environ.get(CONFIG_ENV))
    p = Path(path if path is not None else os.environ.get(CONFIG_ENV) or DEFAULT_PATH)
    if not p.exists():
        if explicit:
            raise ConfigError(f"{p}: no such config file")
        return Config()
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: invalid TOML: {e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text (a TOML file must be UTF-8)") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror}") from None
    return from_mapping(data, source=str(p), base_dir=p.parent)
