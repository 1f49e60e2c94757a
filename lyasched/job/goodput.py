"""In-job adaptive batch: measure the gradient noise scale, re-tune the batch, scale the learning rate.

What a training script that opted in (`lyasub --adaptive-batch`) uses, torch only, nothing else of
lyasched (docs/lyasub.md "Adaptive batch", jobscripts/train_example.py ``--adaptive-batch``):

    noise = GradientNoise(model, decay=0.9)          # model: the DDP-wrapped model, or the plain one
    agent = BatchAgent.from_env(world)               # M0, max batch, rule, chosen batch from the launch env
    ...
    plan = agent.plan()                              # global batch, per-GPU micro-batch, accumulation steps
    for i in range(plan.accum):
        with noise.micro_step(i, plan.accum):       # no_sync on all but the last micro-step
            (loss_fn(model(x_i), y_i) / plan.accum).backward()
    phi = noise.finish(plan.micro, plan.accum)       # updates the smoothed estimates; None until it can tell
    for g in opt.param_groups: g["lr"] = base_lr * agent.lr_factor(phi)
    opt.step(); agent.step_done(seconds, phi)        # base-step progress, the job's own throughput

**Noise scale** (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", appendix A):
the squared norm of a gradient averaged over a batch of B samples has expectation
``|G|^2 + tr(Sigma)/B``, so two batch sizes b < M give unbiased estimates
``|G|^2 = (M|g_M|^2 - b|g_b|^2)/(M - b)`` and ``tr(Sigma) = (|g_b|^2 - |g_M|^2)/(1/b - 1/M)``.
Each is smoothed with its own bias-corrected exponential moving average and phi =
``EMA(tr Sigma) / EMA(|G|^2)`` (a ratio of averages: single-step ratios are heavy-tailed).

How the two norms are measured, at one extra local norm per step:

* **DDP** (world > 1): a communication hook (``DistributedDataParallel.register_comm_hook``, which
  torch supports on gloo and nccl alike; the tests run it on gloo/CPU) adds each bucket's local squared norm before the
  all-reduce and the reduced bucket's after it. After ``backward`` the local one is |g_b|^2 at
  b = M/world (the rank's accumulated micro-batches), the reduced one |g_M|^2. The local norms are
  averaged over the ranks with one scalar all-reduce (less variance, and every rank then computes
  the same phi, hence the same batch). The hook replaces DDP's default one (the same
  divide-then-all-reduce), so nothing else changes in the training step.
* **One replica** with gradient accumulation (k > 1 micro-steps): the gradient after the first
  micro-step (times k, the loss being divided by k) is |g_b|^2 at the micro-batch, the
  accumulated one |g_M|^2 at k micro-batches. One replica without accumulation cannot tell: phi
  stays at its last value (None before any), and the agent keeps its batch.

**Learning-rate rules** (`lr_factor`): ``linear`` (M/M0, Goyal et al. 2017), ``sqrt``
(sqrt(M/M0), Krizhevsky 2014) and ``adascale``: AdaScale SGD's gain ratio (Johnson et al.,
"AdaScale SGD: A User-Friendly Algorithm for Distributed Training", ICML 2020, section 3:
r = (sigma^2 + mu^2) / (sigma^2/S + mu^2) with sigma^2 the gradient variance at the base batch,
mu^2 = |G|^2 and scale S = M/M0), which in the noise scale is r = (phi/M0 + 1)/(phi/M + 1);
Pollux (OSDI 2021, section 3.1) uses the same rule. It equals the base steps a step at M is worth.

**Progress** is counted in base steps (steps at M0): a step at M advances it by
``(M/M0) * (phi + M0)/(phi + M)`` (the scheduler's model, docs/model.md), 1 at M0. The agent's
`state_dict` (progress, the estimates, its measured step times, the batch schedule so far) goes
into the checkpoint, so a job killed or moved mid-way, batch change included, resumes exactly.

**The agent** (`BatchAgent`): on every (re)start it takes the batch the service chose
(``$LYASCHED_GLOBAL_BATCH``); between the scheduler's moves, every ``retune_every`` steps, it picks
the global batch with the most base steps per second on the GPUs it has: candidates multiples of
the world size from M0 to the max batch (a geometric grid), each with gradient accumulation when
the per-GPU batch exceeds ``max_local``; step time from its own measurements per micro-batch
(a least-squares line t(b) = a + c*b per micro-step once two micro-batches were seen; one
point scales the prior line from the cost summary through it; none: the prior).
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

RULES = ("linear", "sqrt", "adascale")
ENV_BASE = "LYASCHED_BASE_BATCH"  # M0: the batch the learning rate is tuned for
ENV_BATCH = "LYASCHED_GLOBAL_BATCH"  # the batch the service chose for this (re)start
ENV_MAX = "LYASCHED_MAX_BATCH"
ENV_RULE = "LYASCHED_LR_RULE"
ENV_MAX_LOCAL = "LYASCHED_MAX_LOCAL_BATCH"  # the largest per-GPU micro-batch that fits (0: no limit)
ENV_ALPHA = "LYASCHED_STEP_ALPHA"  # prior step time a + bt*b per micro-step (the cost summary's a, bt)
ENV_BETA = "LYASCHED_STEP_BETA"
ENV_KNEE = "LYASCHED_STEP_KNEE"  # the prior is flat up to this micro-batch (the cost summary's kn; 0: a line)


# ---------------------------------------------------------------- formulas

def estimates(sq_small: float, b_small: float, sq_big: float, b_big: float) -> tuple[float, float]:
    """Unbiased (|G|^2, tr Sigma) from squared gradient norms at two batch sizes b_small < b_big."""
    if not 0 < b_small < b_big:
        raise ValueError(f"need 0 < b_small < b_big, got {b_small}, {b_big}")
    g2 = (b_big * sq_big - b_small * sq_small) / (b_big - b_small)
    tr = (sq_small - sq_big) / (1.0 / b_small - 1.0 / b_big)
    return g2, tr


def efficiency(phi: float, m0: float, m: float) -> float:
    """Statistical efficiency of batch m relative to m0: (phi + m0)/(phi + m)."""
    return (phi + m0) / (phi + m)


def gain(phi: float | None, m0: float, m: float) -> float:
    """Base steps one step at batch m is worth: (m/m0)(phi + m0)/(phi + m); 1 without phi at m0.
    Without a phi estimate a larger batch is credited as if phi were 0 (no gain: the cautious side)."""
    if phi is None:
        return 1.0 if m == m0 else efficiency(0.0, m0, m) * m / m0
    return (m / m0) * efficiency(phi, m0, m)


def lr_factor(rule: str, phi: float | None, m0: float, m: float) -> float:
    """The learning rate at batch m as a multiple of the one tuned for m0 (see the module doc)."""
    if rule == "linear":
        return m / m0
    if rule == "sqrt":
        return math.sqrt(m / m0)
    if rule == "adascale":
        return gain(phi, m0, m)
    raise ValueError(f"unknown learning-rate rule {rule!r} (one of {', '.join(RULES)})")


# ---------------------------------------------------------------- the estimator

class NoiseScale:
    """Smoothed |G|^2 and tr(Sigma) (bias-corrected EMAs, like Adam's moments) and their ratio phi."""

    def __init__(self, decay: float = 0.9) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay must be in [0, 1), got {decay}")
        self.decay = decay
        self.g2 = 0.0
        self.tr = 0.0
        self.weight = 0.0  # 1 - decay^n: the bias correction
        self.count = 0
        self.last: float | None = None  # the last positive ratio (kept while the averages dip to <= 0)

    def update(self, sq_small: float, b_small: float, sq_big: float, b_big: float) -> None:
        g2, tr = estimates(sq_small, b_small, sq_big, b_big)
        if not (math.isfinite(g2) and math.isfinite(tr)):
            return
        d = self.decay
        self.g2 = d * self.g2 + (1 - d) * g2
        self.tr = d * self.tr + (1 - d) * tr
        self.weight = d * self.weight + (1 - d)
        self.count += 1
        if self.g2 > 0 and self.tr > 0:
            self.last = self.tr / self.g2

    @property
    def phi(self) -> float | None:
        """tr(Sigma)/|G|^2 of the smoothed estimates (the bias corrections cancel in the ratio); None
        before a positive one. When |G|^2's average dips to <= 0 (the true gradient small against
        its noise: phi very large, as late in training), the last positive ratio stands: the
        estimate does not flip back to "unknown" and the batch back to the base one."""
        if self.weight <= 0 or self.g2 <= 0 or self.tr <= 0:
            return self.last
        return self.tr / self.g2

    def state_dict(self) -> dict:
        return {"decay": self.decay, "g2": self.g2, "tr": self.tr, "weight": self.weight, "count": self.count,
                "last": self.last}

    def load_state_dict(self, s: dict) -> None:
        self.decay, self.g2, self.tr = float(s["decay"]), float(s["g2"]), float(s["tr"])
        self.weight, self.count = float(s["weight"]), int(s["count"])
        self.last = float(s["last"]) if s.get("last") is not None else None


class GradientNoise:
    """Measures the two gradient norms of each optimizer step (see the module doc) into a `NoiseScale`."""

    def __init__(self, model: Any, decay: float = 0.9) -> None:
        import torch.distributed as dist

        self.model = model
        self.noise = NoiseScale(decay)
        self.world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        self._ddp = self.world > 1 and hasattr(model, "register_comm_hook")
        self._local: Any = None  # summed over buckets: this rank's squared gradient norm (tensor)
        self._reduced: Any = None  # the all-reduced gradient's
        self._micro_sq: float | None = None
        if self._ddp:
            # DDP checks the hook's annotations against dist.GradBucket: hand it an unannotated one
            model.register_comm_hook(None, lambda state, bucket: self._hook(bucket))

    # DDP communication hook: DDP's default (divide by world, all-reduce), plus the two norms.
    def _hook(self, bucket: Any) -> Any:
        import torch
        import torch.distributed as dist

        buf = bucket.buffer()
        sq = buf.detach().double().pow(2).sum()
        self._local = sq if self._local is None else self._local + sq
        buf.div_(self.world)
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f: Any) -> torch.Tensor:
            t = f.value()[0]
            r = t.detach().double().pow(2).sum()
            self._reduced = r if self._reduced is None else self._reduced + r
            return t

        return fut.then(done)

    @contextlib.contextmanager
    def micro_step(self, i: int, accum: int) -> Iterator[None]:
        """Wrap the forward and backward of micro-step ``i`` of ``accum`` (loss divided by ``accum``)."""
        if i == 0:
            self._local = self._reduced = None
            self._micro_sq = None
        last = i == accum - 1
        ctx = self.model.no_sync() if (self._ddp and not last) else contextlib.nullcontext()
        with ctx:
            yield
        if not self._ddp and i == 0 and accum > 1:
            self._micro_sq = _grad_sq(self.model) * accum * accum

    def finish(self, micro: int, accum: int) -> float | None:
        """After the last micro-step's backward: update the estimates; the smoothed phi."""
        if self._ddp:
            import torch
            import torch.distributed as dist

            if self._local is None or self._reduced is None:
                return self.noise.phi
            t = torch.stack([self._local.reshape(()), self._reduced.reshape(())]).to(self._local.device)
            dist.all_reduce(t)  # the mean local norm (the reduced one is the same on every rank)
            local, reduced = (t / self.world).tolist()
            b = micro * accum
            self.noise.update(local, b, reduced, b * self.world)
        elif self._micro_sq is not None:
            self.noise.update(self._micro_sq, micro, _grad_sq(self.model), micro * accum)
        self._local = self._reduced = None
        self._micro_sq = None
        return self.noise.phi


def _grad_sq(model: Any) -> float:
    """Squared norm of the model's current gradients (one pass, summed in float64)."""
    total = 0.0
    for p in model.parameters():
        if p.grad is not None:
            total += float(p.grad.detach().double().pow(2).sum())
    return total


# ---------------------------------------------------------------- the agent

@dataclass(frozen=True)
class Plan:
    """One step's shape: global batch = micro x accum x world."""

    batch: int
    micro: int
    accum: int


def plan_for(batch: int, world: int, max_local: int) -> Plan:
    """The step shape of global batch ``batch`` on ``world`` GPUs: the fewest accumulation steps
    whose micro-batch fits in ``max_local`` (0: no limit), more (up to twice as many) if that
    splits the per-GPU batch exactly, else the batch rounded down to a multiple of world x
    accumulation (never below world)."""
    per = max(1, batch // world)
    accum = 1 if max_local <= 0 else max(1, -(-per // max_local))
    exact = next((k for k in range(accum, min(per, 2 * accum) + 1) if per % k == 0), None)
    if exact is not None:  # the fewest micro-steps (up to twice the least) that split it exactly
        accum = exact
    micro = max(1, per // accum)
    return Plan(micro * accum * world, micro, accum)


@dataclass
class BatchAgent:
    """Chooses the global batch for the GPUs the job has (see the module doc)."""

    m0: int
    max_batch: int
    world: int
    rule: str = "adascale"
    batch: int = 0  # current global batch (0: the service's, else m0)
    max_local: int = 0
    prior_alpha: float = 0.0
    prior_beta: float = 1.0
    prior_knee: float = 0.0
    retune_every: int = 50
    grid: int = 12  # candidates between m0 and the max batch (geometric)
    measure: bool = True  # False: choose from the prior step-time line only (reproducible choices, e.g. tests)
    progress: float = 0.0  # base steps done
    steps: int = 0  # optimizer steps done (all (re)starts)
    times: dict[int, list[float]] = field(default_factory=dict)  # micro-batch -> recent per-micro-step seconds
    schedule: list[tuple[int, int, float, float]] = field(default_factory=list)  # (step, batch, lr factor, gain)

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown learning-rate rule {self.rule!r} (one of {', '.join(RULES)})")
        if self.m0 < 1 or self.max_batch < self.m0 or self.world < 1:
            raise ValueError(f"need 1 <= base batch {self.m0} <= max batch {self.max_batch} and world >= 1")
        self.batch = self._fit(self.batch or self.m0)

    @classmethod
    def from_env(cls, world: int, env: dict | None = None, **kw: Any) -> "BatchAgent":
        """The agent the launch template configured: base batch, max batch, rule, the chosen batch."""
        e = os.environ if env is None else env
        chosen = int(e.get(ENV_BATCH) or 0)
        m0 = int(e.get(ENV_BASE) or chosen or 0)
        return cls(m0=m0, max_batch=int(e.get(ENV_MAX) or m0), world=world, rule=e.get(ENV_RULE) or "adascale",
                   batch=chosen, max_local=int(e.get(ENV_MAX_LOCAL) or 0),
                   prior_alpha=float(e.get(ENV_ALPHA) or 0.0), prior_beta=float(e.get(ENV_BETA) or 1.0),
                   prior_knee=float(e.get(ENV_KNEE) or 0.0), **kw)

    def _fit(self, batch: int) -> int:
        return plan_for(min(max(batch, self.m0), self.max_batch), self.world, self.max_local).batch

    def plan(self) -> Plan:
        return plan_for(self.batch, self.world, self.max_local)

    def lr_factor(self, phi: float | None) -> float:
        return lr_factor(self.rule, phi, self.m0, self.batch)

    # ---- throughput from the job's own step times
    def record(self, plan: Plan, seconds: float) -> None:
        """One step's measured time (the last 20 per micro-batch are kept; none when not ``measure``)."""
        if self.measure and seconds > 0 and math.isfinite(seconds):
            per = self.times.setdefault(plan.micro, [])
            per.append(seconds / plan.accum)
            del per[:-20]

    def micro_time(self, micro: int) -> float:
        """Predicted seconds of one micro-step at this micro-batch (see the module doc)."""
        pts = sorted((b, sorted(ts)[len(ts) // 2]) for b, ts in self.times.items() if ts)
        if len(pts) >= 2:
            n = len(pts)
            mb = sum(b for b, _ in pts) / n
            mt = sum(t for _, t in pts) / n
            var = sum((b - mb) ** 2 for b, _ in pts)
            slope = max(0.0, sum((b - mb) * (t - mt) for b, t in pts) / var)
            return max(mt + slope * (micro - mb), 1e-9)
        prior = self.prior_time(micro)
        if len(pts) == 1:
            b1, t1 = pts[0]
            return t1 * prior / max(self.prior_time(b1), 1e-12)
        return max(prior, 1e-9)

    def prior_time(self, micro: float) -> float:
        """The profile's step time at this micro-batch: flat up to the knee, then linear."""
        return self.prior_alpha + self.prior_beta * max(0.0, micro - self.prior_knee)

    def candidates(self) -> list[int]:
        """Global batches tried: M0, the max batch, and a geometric grid between, shaped by `plan_for`."""
        out = {self._fit(self.m0), self._fit(self.max_batch)}
        if self.max_batch > self.m0 and self.grid > 1:
            ratio = (self.max_batch / self.m0) ** (1.0 / self.grid)
            out.update(self._fit(int(self.m0 * ratio ** i)) for i in range(1, self.grid))
        return sorted(out)

    def goodput(self, batch: int, phi: float | None) -> float:
        """Base steps per second at this global batch on this job's GPUs."""
        p = plan_for(batch, self.world, self.max_local)
        return gain(phi, self.m0, p.batch) / (p.accum * self.micro_time(p.micro))

    def best(self, phi: float | None) -> int:
        """The candidate with the most goodput (the smallest on ties); the current batch without phi."""
        if phi is None:
            return self.batch
        best, value = self.batch, -1.0
        for c in self.candidates():
            v = self.goodput(c, phi)
            if v > value * (1 + 1e-9):
                best, value = c, v
        return best

    def step_done(self, plan: Plan, seconds: float, phi: float | None, lr: float | None = None) -> bool:
        """Account one optimizer step at ``plan`` (``lr``: the learning-rate factor it applied,
        default the rule's at ``phi``); True when the batch changes for the next step."""
        g = gain(phi, self.m0, plan.batch)
        lr = lr_factor(self.rule, phi, self.m0, plan.batch) if lr is None else lr
        self.schedule.append((self.steps, plan.batch, lr, g))
        self.progress += g
        self.steps += 1
        self.record(plan, seconds)
        if self.retune_every > 0 and self.steps % self.retune_every == 0:
            new = self.best(phi)
            if new != self.batch:
                self.batch = new
                return True
        return False

    def step_replayed(self, batch: int, lr: float, g: float) -> None:
        """Account one step of a replayed schedule (``--batch-schedule``): its batch, learning-rate
        factor and base-step gain as logged, so a replay sums the same progress exactly."""
        self.schedule.append((self.steps, int(batch), float(lr), float(g)))
        self.progress += g
        self.steps += 1

    def state_dict(self) -> dict:
        return {"m0": self.m0, "max_batch": self.max_batch, "rule": self.rule, "batch": self.batch,
                "progress": self.progress, "steps": self.steps, "times": {int(k): list(v) for k, v in self.times.items()},
                "schedule": [list(s) for s in self.schedule]}

    def load_state_dict(self, s: dict, *, keep_batch: bool = True) -> None:
        """Restore progress, measurements and schedule; ``keep_batch``: the batch given at this
        (re)start (the service's) stays, else the saved one is taken back."""
        self.progress, self.steps = float(s["progress"]), int(s["steps"])
        self.times = {int(k): [float(x) for x in v] for k, v in s.get("times", {}).items()}
        self.schedule = [(int(a), int(b), float(c), float(d)) for a, b, c, d in s.get("schedule", [])]
        if not keep_batch:
            self.batch = self._fit(int(s["batch"]))


def read_schedule(text: str) -> dict[int, tuple[int, float, float]]:
    """A logged batch schedule (`format_schedule`): step -> (global batch, lr factor, gain)."""
    out: dict[int, tuple[int, float, float]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split()
        try:
            out[int(f[0])] = (int(f[1]), float(f[2]), float(f[3]))
        except (ValueError, IndexError):
            raise ValueError(f"batch schedule line {n}: want 'step batch lr_factor gain', got {line!r}") from None
    return out


def format_schedule(schedule: list[tuple[int, int, float, float]]) -> str:
    """One line per step, ``step batch lr_factor gain`` (floats written to round-trip exactly)."""
    return "# step\tbatch\tlr_factor\tgain\n" + "".join(f"{s}\t{b}\t{lr!r}\t{g!r}\n" for s, b, lr, g in schedule)
