"""The cost summary a lyasched job carries in its Slurm comment (docs/cost-summary.md).

One line, ``lyasched:v1;key=value;...``: `lyasub` encodes it, the job_submit.lua plugin
validates it at submission and `lyasched serve` decodes it. Python and Lua enforce the same
grammar and bounds, so anything `encode` writes the plugin accepts, and anything `decode`
accepts is safe to feed the cost model. Every key is required, except ``ck=1`` (the job is
checkpointable, `lyasub --checkpointable`: the scheduler may move it) and ``mb``/``lr`` (an
adaptive batch, `lyasub --adaptive-batch`: the largest global batch and the learning-rate rule)
and ``kn`` (the per-GPU batch up to which the step time is flat) and ``gt`` (the GPU types the job may
run on, `lyasub --gpu-type`) and ``pt`` (the GPU type its profile is of) and ``ft`` (its ``--constraint``: the
node features it needs), written only when set, so the summaries of other jobs are unchanged.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable

from lyasched.costmodel.cost import Profile

PREFIX = "lyasched:v1;"
MAX_LEN = 1024

_KEY_RE = re.compile(r"[a-z0-9_]+\Z")
_UID_RE = re.compile(r"[A-Za-z0-9-]{8,64}\Z")
_SIG_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}\Z")
_INT_RE = re.compile(r"-?[0-9]{1,20}\Z")
# plain or exponent notation; no nan/inf/hex, no underscores, no leading '+'
_FLOAT_RE = re.compile(r"-?[0-9]{1,40}(\.[0-9]{1,40})?([eE][+-]?[0-9]{1,3})?\Z")


# A Slurm GRES type name as lyasched writes it into a request (gres:gpu:TYPE:N) and a summary (key gt):
# Slurm's own names are free text, these are the ones safe in both.
_GPU_TYPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}\Z")


def is_gpu_type(name: str) -> bool:
    """A GPU type name lyasched can pass to Slurm: 1-32 of A-Z a-z 0-9 _ . - (not a bare number)."""
    return bool(_GPU_TYPE_RE.match(name)) and not name.isdigit()


def new_uid() -> str:
    """A fresh lyasched job uid (32 hex digits; matches the ``id`` grammar)."""
    return uuid.uuid4().hex


def is_valid_uid(uid: str) -> bool:
    return bool(_UID_RE.match(uid))


@dataclass(frozen=True)
class _Field:
    key: str  # key in the encoded summary
    attr: str  # CostSummary attribute
    kind: str  # "int", "float", "uid", "sig", "src"
    lo: float = 0
    hi: float = 0


_FIELDS: tuple[_Field, ...] = (
    _Field("id", "uid", "uid"),
    _Field("sig", "sig", "sig"),
    _Field("b", "global_batch", "int", 1, 1_048_576),
    _Field("it", "iterations", "int", 1, 1_000_000_000),
    _Field("gmin", "min_gpus", "int", 1, 1024),
    _Field("gmax", "max_gpus", "int", 1, 1024),
    _Field("a", "alpha", "float", 0, 1000),
    _Field("bt", "beta", "float", 0, 1000),
    _Field("p", "params", "int", 1, 1_000_000_000_000),
    _Field("bpp", "bytes_per_param", "int", 1, 8),
    _Field("m0", "mem_base", "float", 0, 1e13),
    _Field("m1", "mem_per_sample", "float", 0, 1e12),
    _Field("src", "source", "src"),
)
CK = _Field("ck", "checkpointable", "int", 1, 1)  # optional; only ever 1 (absent: not checkpointable)
# optional; only ever 1: a plain job of a managed partition, tagged by job_submit.lua from its request
# (no profile: the service estimates its run time from history, docs/managed.md)
PL = _Field("pl", "plain", "int", 1, 1)
_FLAGS = (CK, PL)
# optional, together or not at all: the job lets the scheduler choose its global batch between b (its
# base batch M0) and mb, and scales its learning rate by rule lr (lyasub --adaptive-batch, docs/lyasub.md)
MB = _Field("mb", "max_batch", "int", 1, 1_048_576)
LR = _Field("lr", "lr_rule", "rule")
LR_RULES = ("linear", "sqrt", "adascale")
# optional, written by the service only (the plugin refuses a user's change of the comment): the
# global batch the scheduler chose for this (re)start of an adaptive job, read by launch.sbatch
CB = _Field("cb", "chosen_batch", "int", 1, 1_048_576)
# optional: the per-GPU batch up to which the step time is flat (`Profile.knee`, lyasched.costmodel.batchshape);
# written only when the profiler's sweep showed one, so a straight-line profile's summary is unchanged. Without
# it a and bt (fitted beyond the knee) would be read as a straight line and overpredict by bt x knee.
KN = _Field("kn", "knee", "float", 0, 1_048_576)
# optional: the GPU types (Slurm GRES types, comma-separated, no repeats, at most 8) the job may run on
# (lyasub --gpu-type a100,h100); absent: any type. The service releases the job on nodes of one of them.
GT = _Field("gt", "gpu_types", "types")
MAX_GPU_TYPES = 8
# optional: the GPU type the profile (a, bt, m0, m1) was measured or estimated on (lyasub profiles on the
# fastest type the job may run on); absent: the cluster's one type. Other types are predicted from it by the
# roofline (lyasched.live.typecost) until the job's runs there report.
PT = _Field("pt", "profile_type", "type")
# optional: the job's --constraint (Slurm node Features: names joined by & and |, lyasched.policy.placement),
# written with / for | (squeue separates its fields with |); the plugin refuses one that differs from the
# job's own Features. The service places the job on such nodes only.
FT = _Field("ft", "constraint", "constraint")
_ADAPTIVE = (MB, LR)
_BY_KEY = {f.key: f for f in (*_FIELDS, *_FLAGS, *_ADAPTIVE, CB, KN, GT, PT, FT)}
_SOURCES = {"m": "measured", "e": "estimated"}
_BOUNDED_KEYS = frozenset(f.key for f in (MB, CB, KN))  # decode checks their bounds as it reads them
_FLAG_KEYS = frozenset(f.key for f in _FLAGS)


def _parse_int(f: _Field, raw: str) -> int:
    if not _INT_RE.match(raw):
        raise ValueError(f"cost summary: {f.key}={raw!r} is not an integer")
    return int(raw)


def _parse_float(f: _Field, raw: str) -> float:
    if not _FLOAT_RE.match(raw):
        raise ValueError(f"cost summary: {f.key}={raw!r} is not a plain decimal number")
    return float(raw)


def _parse_text(pattern: re.Pattern[str], what: str) -> Callable[[_Field, str], str]:
    def parse(f: _Field, raw: str) -> str:
        if not pattern.match(raw):
            raise ValueError(f"cost summary: {f.key}={raw!r} is not a valid {what}")
        return raw

    return parse


def _parse_types(f: _Field, raw: str) -> tuple[str, ...]:
    types = tuple(raw.split(","))
    if not raw or not all(is_gpu_type(t) for t in types) or len(set(types)) != len(types) or len(types) > MAX_GPU_TYPES:
        raise ValueError(f"cost summary: {f.key}={raw!r} is not a list of up to {MAX_GPU_TYPES} distinct GPU types "
                         "(A-Z a-z 0-9 _ . -, comma-separated)")
    return types


def _parse_type(f: _Field, raw: str) -> str:
    if not is_gpu_type(raw):
        raise ValueError(f"cost summary: {f.key}={raw!r} is not a GPU type (A-Z a-z 0-9 _ . -)")
    return raw


_CONSTRAINT_RE = re.compile(r"[A-Za-z0-9_.-]+([&|][A-Za-z0-9_.-]+)*\Z")


def _parse_constraint(f: _Field, raw: str) -> str:
    """``ft=a100&ib/h100`` -> Slurm's ``a100&ib|h100``."""
    text = raw.replace("/", "|")
    if "|" in raw or len(raw) > 256 or not _CONSTRAINT_RE.match(text):
        raise ValueError(f"cost summary: {f.key}={raw!r} is not node features (A-Z a-z 0-9 _ . -) joined by & and /")
    return text


_PARSERS: dict[str, Callable[[_Field, str], Any]] = {
    "constraint": _parse_constraint,
    "int": _parse_int,
    "float": _parse_float,
    "uid": _parse_text(_UID_RE, "job uid ([A-Za-z0-9-]{8,64})"),
    "sig": _parse_text(_SIG_RE, "model signature ([A-Za-z0-9_.:-]{1,128})"),
    "src": _parse_text(re.compile(r"[me]\Z"), "source (m or e)"),
    "rule": _parse_text(re.compile(r"(linear|sqrt|adascale)\Z"), "learning-rate rule (linear, sqrt or adascale)"),
    "types": _parse_types,
    "type": _parse_type,
}


@dataclass(frozen=True)
class CostSummary:
    """A job's cost as lyasched schedules it: its profile, batch, length and GPU bounds.

    Construction validates every bound, so an invalid summary cannot be encoded.
    """

    uid: str
    sig: str
    global_batch: int
    iterations: int
    min_gpus: int
    max_gpus: int
    alpha: float
    beta: float
    params: int
    bytes_per_param: int = 4
    mem_base: float = 0.0
    mem_per_sample: float = 0.0
    source: str = "m"  # "m" measured, "e" estimated
    checkpointable: bool = False  # key ck, optional: 1 = the scheduler may move the job
    plain: bool = False  # key pl, optional: 1 = a managed partition's plain job (no profile)
    max_batch: int = 0  # key mb, optional (with lr): the largest global batch of an adaptive job; 0 = fixed batch
    lr_rule: str = ""  # key lr: linear, sqrt or adascale (docs/lyasub.md, "Adaptive batch")
    chosen_batch: int = 0  # key cb: the batch the service chose for the job's (re)start; 0 = none yet
    knee: float = 0.0  # key kn, optional: per-GPU batch where the step time stops being flat; 0 = a straight line
    gpu_types: tuple[str, ...] = ()  # key gt, optional: the GPU types the job may run on; () = any
    profile_type: str = ""  # key pt, optional: the GPU type the profile is of; "" = the cluster's one type
    constraint: str = ""  # key ft, optional: the job's --constraint (node features); "" = none

    @property
    def adaptive(self) -> bool:
        """Whether the scheduler chooses this job's batch (keys mb and lr)."""
        return self.max_batch > 0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first field outside the grammar or its bounds."""
        for f in _FIELDS:
            v = getattr(self, f.attr)
            if f.kind == "int":
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError(f"cost summary: {f.key} must be an integer, got {v!r}")
            elif f.kind == "float":
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise ValueError(f"cost summary: {f.key} must be a number, got {v!r}")
                if not math.isfinite(v):
                    raise ValueError(f"cost summary: {f.key} must be finite, got {v!r}")
            else:
                if not isinstance(v, str):
                    raise ValueError(f"cost summary: {f.key} must be a string, got {v!r}")
                _PARSERS[f.kind](f, v)
                continue
            if not f.lo <= v <= f.hi:
                raise ValueError(f"cost summary: {f.key}={v!r} is out of bounds [{f.lo:g}, {f.hi:g}]")
        for flag in _FLAGS:
            if not isinstance(getattr(self, flag.attr), bool):
                raise ValueError(f"cost summary: {flag.key} must be a bool, got {getattr(self, flag.attr)!r}")
        if self.max_gpus < self.min_gpus:
            raise ValueError(f"cost summary: gmax={self.max_gpus} is below gmin={self.min_gpus}")
        self._validate_adaptive()
        kn = self.knee
        if isinstance(kn, bool) or not isinstance(kn, (int, float)) or not math.isfinite(kn) or not KN.lo <= kn <= KN.hi:
            raise ValueError(f"cost summary: kn={kn!r} must be a number in [{KN.lo:g}, {KN.hi:g}]")
        gt = self.gpu_types
        if not isinstance(gt, tuple) or (gt and _parse_types(GT, ",".join(str(t) for t in gt)) != gt):
            raise ValueError(f"cost summary: gt must be a tuple of GPU type names, got {gt!r}")
        pt = self.profile_type
        if not isinstance(pt, str) or (pt and not is_gpu_type(pt)):
            raise ValueError(f"cost summary: pt must be a GPU type name, got {pt!r}")
        ft = self.constraint
        if not isinstance(ft, str) or (ft and not _CONSTRAINT_RE.match(ft)) or len(ft) > 256:
            raise ValueError(f"cost summary: ft must be node features joined by & and |, got {ft!r}")
        if len(self._encode_unchecked()) > MAX_LEN:
            raise ValueError(f"cost summary: longer than {MAX_LEN} characters")

    def _validate_adaptive(self) -> None:
        mb, rule = self.max_batch, self.lr_rule
        if isinstance(mb, bool) or not isinstance(mb, int) or not isinstance(rule, str):
            raise ValueError(f"cost summary: mb must be an integer and lr a string, got {mb!r}, {rule!r}")
        if (mb == 0) != (rule == ""):
            raise ValueError("cost summary: mb and lr go together (both or neither)")
        cb = self.chosen_batch
        if isinstance(cb, bool) or not isinstance(cb, int) or cb < 0 or (cb and not mb) or cb > max(mb, 0):
            raise ValueError(f"cost summary: cb={cb!r} must be a batch of an adaptive job, at most mb={mb}")
        if mb == 0:
            return
        if not MB.lo <= mb <= MB.hi:
            raise ValueError(f"cost summary: mb={mb!r} is out of bounds [{MB.lo:g}, {MB.hi:g}]")
        if rule not in LR_RULES:
            raise ValueError(f"cost summary: lr={rule!r} is not a valid learning-rate rule (linear, sqrt or adascale)")
        if mb < self.global_batch:
            raise ValueError(f"cost summary: mb={mb} is below b={self.global_batch}")

    def _encode_unchecked(self) -> str:
        parts = []
        for f in _FIELDS:
            v = getattr(self, f.attr)
            # repr of a float round-trips exactly and is plain or exponent notation
            parts.append(f"{f.key}={float(v)!r}" if f.kind == "float" else f"{f.key}={v}")
        parts.extend(f"{flag.key}=1" for flag in _FLAGS if getattr(self, flag.attr))
        if self.max_batch:
            parts.extend((f"{MB.key}={self.max_batch}", f"{LR.key}={self.lr_rule}"))
        if self.chosen_batch:
            parts.append(f"{CB.key}={self.chosen_batch}")
        if self.knee:
            parts.append(f"{KN.key}={float(self.knee)!r}")
        if self.gpu_types:
            parts.append(f"{GT.key}={','.join(self.gpu_types)}")
        if self.profile_type:
            parts.append(f"{PT.key}={self.profile_type}")
        if self.constraint:
            parts.append(f"{FT.key}={self.constraint.replace('|', '/')}")
        return PREFIX + ";".join(parts)

    def encode(self) -> str:
        """The one-line summary for ``sbatch --comment``."""
        return self._encode_unchecked()

    @classmethod
    def decode(cls, text: str) -> "CostSummary":
        """Parse and validate a summary; ValueError with a readable message otherwise."""
        if not isinstance(text, str):
            raise ValueError("cost summary: not a string")
        text = text.strip()
        if not text.startswith(PREFIX):
            raise ValueError(f"cost summary: does not start with {PREFIX!r}")
        if len(text) > MAX_LEN:
            raise ValueError(f"cost summary: longer than {MAX_LEN} characters")
        body = text[len(PREFIX) :]
        values: dict[str, Any] = {}
        for item in body.split(";"):
            key, sep, raw = item.partition("=")
            if not sep:
                raise ValueError(f"cost summary: field {item!r} is not key=value")
            f = _BY_KEY.get(key)  # every known key matches _KEY_RE: the pattern is tried on unknown ones only
            if f is None:
                if not _KEY_RE.match(key):
                    raise ValueError(f"cost summary: bad key {key!r}")
                raise ValueError(f"cost summary: unknown key {key!r}")
            if f.attr in values:
                raise ValueError(f"cost summary: key {key!r} given twice")
            values[f.attr] = _PARSERS[f.kind](f, raw)
            # by key, not `f in (MB, ...)`: that compares dataclasses field by field, ~20 times a summary
            if key in _BOUNDED_KEYS and not f.lo <= values[f.attr] <= f.hi:  # 0 would read as "absent"
                raise ValueError(f"cost summary: {key}={raw!r} is out of bounds [{f.lo:g}, {f.hi:g}]")
            if key in _FLAG_KEYS:
                if values[f.attr] != 1:
                    raise ValueError(f"cost summary: {key}={raw!r} must be 1 (or absent)")
                values[f.attr] = True
        missing = [f.key for f in _FIELDS if f.attr not in values]
        if missing:
            raise ValueError(f"cost summary: missing {', '.join(missing)}")
        return cls(**values)

    @classmethod
    def is_lyasched(cls, comment: str | None) -> bool:
        """Whether a Slurm comment claims to be a lyasched summary (it may still be invalid)."""
        return bool(comment) and (comment or "").strip().startswith(PREFIX)

    @classmethod
    def from_profile(
        cls, profile: Profile, *, uid: str, sig: str, global_batch: int, iterations: int, min_gpus: int, max_gpus: int,
        checkpointable: bool = False, max_batch: int = 0, lr_rule: str = "", gpu_types: tuple[str, ...] = (),
        profile_type: str = "", constraint: str = "",
    ) -> "CostSummary":
        return cls(
            uid=uid,
            sig=sig,
            global_batch=global_batch,
            iterations=iterations,
            min_gpus=min_gpus,
            max_gpus=max_gpus,
            alpha=float(profile.alpha),
            beta=float(profile.beta),
            params=int(profile.params),
            bytes_per_param=int(profile.bytes_per_param),
            mem_base=float(profile.mem_base),
            mem_per_sample=float(profile.mem_per_sample),
            source="e" if profile.source == "estimated" else "m",
            checkpointable=bool(checkpointable),
            max_batch=int(max_batch),
            lr_rule=lr_rule,
            knee=float(profile.knee),
            gpu_types=tuple(gpu_types),
            profile_type=profile_type,
            constraint=constraint,
        )

    def to_profile(self) -> Profile:
        return Profile(
            model=self.sig,
            alpha=self.alpha,
            beta=self.beta,
            params=self.params,
            bytes_per_param=self.bytes_per_param,
            mem_base=self.mem_base,
            mem_per_sample=self.mem_per_sample,
            source=_SOURCES[self.source],
            knee=self.knee,
        )

    def as_dict(self) -> dict[str, Any]:
        """Attribute names to values (for --json)."""
        return asdict(self)
