"""The Lyapunov drift-plus-penalty policy (docs/model.md derives it).

Two queues, both read off the state so the policy keeps no memory (a restarted service
decides exactly as before):

* actual queue  Q = sum of the estimated compute time (``work``) of waiting jobs;
* virtual queue Z = sum of the waiting times of waiting jobs: it grows by one slot for
  every postponed job and drops by a job's whole wait when it starts.

Starting job j in configuration c (g GPUs, one node or several) instead of postponing it
lowers the drift bound by  Q*e_j + Z*(w_j + slot)  and costs the penalty  V*Theta*p_j(c),
with Theta = Q + Z making V dimensionless. The penalty is the increase in total job
completion time the decision causes: the job's own extra run time over its best
configuration plus the delay its GPU-seconds impose on the other waiting jobs. Doing
nothing scores 0; a job starts only with a positive score. The slot's choice is a
multiple-choice knapsack over free GPUs per node: solved exactly by dynamic programming
over the total free GPUs when that is cheap (and the optimum places), greedily by score per
GPU otherwise.

Options that were measured and not adopted (docs/model.md) live with the design sweeps, in
benchmarks/experiments/variants/ (not part of the package);
they change the decision only through a few extension points here (`_restrict`, `_credit`,
`_z_credit`, `_starts_first`, `_values`, `_wake_at`), which in this class are the shipped rule.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, ClassVar

import numpy as np

from lyasched.policy import adaptive
from lyasched.policy.bytype import decide_by_type
from lyasched.policy.rowcache import RowCache, gpu_seconds
from lyasched.policy.state import Decision, FreeGpus, Placement, SlotResult, SlotState
from lyasched.policy.tenants import TenantBook

Fut = tuple[np.ndarray, np.ndarray] | None  # a term added to the penalty: (one node, several nodes) per configuration


@dataclass
class LyapunovPolicy:
    """Drift-plus-penalty over (Q, Z); V trades completion time against queue growth."""

    V: float = 5.0  # chosen on the design workloads of benchmarks/robustness.py (with the fill step)
    externality: float = 1.0  # weight of the delay a start imposes on other waiting jobs
    q_weight: float = 1.0  # weight of the actual queue's drift term (1 = the textbook bound)
    relative: bool = True  # externality relative to the job shortest-first would start instead
    max_stretch: float = 3.0  # never fewer GPUs than asked if that more than multiplies the run time by this
    exact_limit: int = 50_000  # solve exactly when jobs x free GPUs x options is at most this
    tenant_weight: float = 10.0  # weight of the tenants' GPU-time deficits (0: tenants ignored; docs/model.md, section 5)
    tenant_slack: float = 0.05  # a tenant counts as behind only past this share of its entitlement
    seed: int = 0  # unused: the policy is deterministic
    name: str = "lyapunov"
    cross_type: bool = False  # typed slots: a start's penalty counts from the job's best type, not the slot's (off: docs/types.md)
    types_aware: ClassVar[bool] = True  # False: every GPU one type (the reference `lyapunov-unaware`; docs/types.md)
    # Shortcuts that skip work whose result is known (scores masked to -inf anyway, one free GPU, the
    # fill's cached column): the same decisions to the bit. False: the general path everywhere
    # (tests/test_lyapunov_shortcuts.py decides both ways on random states and compares).
    shortcuts: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._started: list[int] = []  # scratch for one decide() call
        self._best = np.zeros(0)
        self._rows = RowCache()
        self._tenant_floor: tuple[float, float] | None = None  # this slot's (floor, scale) of the tenant term
        self._tenant_y: dict[str, float] = {}  # this slot's shortfall per waiting tenant (`_tenants_behind`)
        self._tenant_ix: tuple[np.ndarray, np.ndarray, list[str]] | None = None  # `_tenant_index`'s last answer
        self._owed_of: tuple[np.ndarray, np.ndarray] | None = None  # (codes, Y_k per job) from `_tenant_credit`
        self._wake_guess: tuple[int, ...] = ()  # where the last tenant wake-up search's doubling stopped (`quiet_for_many`)
        self._type_best: np.ndarray | None = None  # decide_by_type: each job's best run over its types
        # decide_by_type: (generation, the jobs' `TypeMemo` rows, the jobs) for `RowCache.cut`'s keys
        self._type_keys: tuple[object, np.ndarray, tuple] | None = None

    def _scores(self, state: SlotState, cols: int | None = None, prune: bool = False,
                spread: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float, float, dict]:
        """Score of starting each waiting job on k+1 GPUs on one node / several nodes.

        Only the first ``cols`` GPU counts are scored (more than the free GPUs can never start).
        ``prune``: the jobs whose every score is surely <= 0 are left out (`_live`): then the score
        rows are those of the jobs ``arr["live"]`` only, in order. What decides is unchanged, as
        only positive scores start a job; the wake-up rule reads them all (`decide` rescores).
        ``spread``: per GPU count, whether several nodes can hold it now (`FreeGpus.spread_mask`);
        when none can, the several-node scores are all -inf without being computed, as `decide`
        would set them (only for a caller that masks them so, and reads them only after).
        """
        jobs = state.waiting
        n = len(jobs)
        # the shipped restriction on plain jobs: rows cut to ``cols`` first, the best runs as the
        # whole rows give them (`RowCache.cut`); else all counts, as best needs them
        fast = cols is not None and type(self)._restrict is LyapunovPolicy._restrict
        cached = None  # each job's least GPU-time and its count, over the cut rows, as `RowCache.cut` keeps them
        both = None  # the cut rows, one node then several side by side (`RowCache.cut`)
        if fast and cols is not None:
            keys = self._type_keys
            one, multi, work, submit, best, req, run_req, slivers, best_kept, g_time, g_need, both = \
                self._rows.cut(jobs, cols, self.max_stretch, keys[:2] if keys is not None and keys[2] is jobs else None)
            fast = not self._rows.n_adaptive
            if fast:
                cached = (g_time, g_need)
            else:
                both = None
        if not fast:
            one, multi, work, submit, best, req, run_req = self._rows.arrays(jobs)
        wait = state.now - submit
        np.maximum(wait, 0.0, out=wait)
        q = float(work.sum())
        z = float(wait.sum())
        theta = q + z
        total_gpus = max(1, sum(state.free) + sum(map(_GPUS, state.running)))
        if fast:  # `_restrict` on the cut rows: `RowCache.cut` applied it
            if slivers.any():
                best = best_kept
            fut: Fut = None
            notes: dict = {}
        else:
            gk = np.arange(1, one.shape[1] + 1)
            with np.errstate(invalid="ignore"):
                fm = np.fmin(one, multi)
                # no slivers: fewer GPUs than asked only while the run stays within max_stretch of the request's
                over = (gk[None, :] < req[:, None]) & (fm > self.max_stretch * run_req[:, None])
            one, multi, best, fut, notes = self._restrict(state, one, multi, best, over, req, run_req, total_gpus)
        if self._type_best is not None:  # one type of a typed slot: the penalty counts from the job's best type
            best = np.minimum(best, self._type_best)  # (the adaptive jobs' one-node rule below re-bases it on its rows)
        ad = self._rows.waiting_adaptive()
        if ad is not None:  # adaptive jobs: one node while others wait (lyasched.policy.adaptive)
            narrowed = adaptive.one_node_while_waiting(n, ad, multi, req)
            if narrowed is not None:
                multi = narrowed
                best = np.fmin(one, multi).min(axis=1)
        if cols is not None and cols < one.shape[1]:  # more GPUs than are free can never start
            one, multi = one[:, :cols], multi[:, :cols]
            if fut is not None:
                fut = (fut[0][:, :cols], fut[1][:, :cols])
        finite_best = np.where(np.isfinite(best), best, 0.0)
        credit = self._credit(work, q / n)
        gain = self.q_weight * q * credit + z * self._z_credit(wait, state.slot_len)  # drift reduction of starting the job now
        free_now = sum(state.free)
        g = np.arange(1, one.shape[1] + 1, dtype=float)
        # Other waiting jobs left without even one GPU if this job takes g of the free ones:
        # each of them is delayed, roughly by the GPU-seconds this job holds shared over the cluster.
        blocked = np.maximum(0.0, (n - 1) - (free_now - g))
        # ... relative to the job that would otherwise take those GPUs: the F-th smallest
        # GPU-time among the waiting jobs (F = free GPUs) is what shortest-first would start last.
        if cached is not None:
            gpu_time = cached[0]
        else:
            gt = gpu_seconds(one, multi)
            gpu_time = gt.min(axis=1)
        tau = 0.0
        if self.relative and n > 1 and free_now == 1 and self.shortcuts:
            # one free GPU: shortest-first hands it to the least GPU-time, whoever holds it
            # (`_shortest_first`'s answer; the rows' GPU-times are never NaN: `gpu_seconds`)
            least = float(gpu_time.min())
            if math.isfinite(least):
                tau = least
        elif self.relative and n > 1 and free_now > 0:
            ok = np.isfinite(gpu_time)
            if ok.any():
                # shortest-first by GPU-time, each job on its most GPU-efficient count
                need = cached[1][ok] if cached is not None else gt[ok].argmin(axis=1) + 1
                tau = _shortest_first(gpu_time[ok], need, free_now)

        def score(run: np.ndarray, fut: np.ndarray | None, gw: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
            with np.errstate(invalid="ignore"):
                return _score(run, fut, *(gw or (g, weight)))

        weight = self.externality * blocked  # per GPU count
        vtheta = self.V * theta

        def _score(run: np.ndarray, fut: np.ndarray | None, g: np.ndarray, weight: np.ndarray) -> np.ndarray:
            # pen = (run - best) + weight * max(0, g*run - tau) / G (+ fut); score = gain - V*theta*pen.
            # In place, one temporary at a time (the hot path at 10,000 waiting jobs), the same
            # operations in the same order as written out, so the same bits.
            imposed = g[None, :] * run
            imposed -= tau
            np.maximum(imposed, 0.0, out=imposed)
            imposed *= weight[None, :]
            imposed /= total_gpus
            pen = run - finite_best[:, None]
            pen += imposed
            if fut is not None:
                pen += fut
            pen *= vtheta
            s = np.subtract(gain[:, None], pen, out=pen)
            s[~np.isfinite(run)] = -np.inf
            return s

        # no configuration across nodes fits now: those scores are -inf, not computed
        no_multi = self.shortcuts and spread is not None and not spread[:one.shape[1]].any()
        codes = self._rows.waiting_tenants() if state.tenants is not None and self.tenant_weight > 0 else None
        credit_t = self._tenant_credit(state, vtheta, total_gpus, codes)
        live = None
        if prune and fast and credit_t is None and self.externality >= 0 and vtheta >= 0 and n > 1:  # (the bound's signs)
            live = _live(gain, gpu_time, tau, float(weight[0]), total_gpus, vtheta)
        s_both = None  # both placements' scores side by side, when scored so (s_one and s_multi: its views)
        if live is not None:  # only the rows that may score > 0 (the wake-up rule asks for all: `decide`)
            every = finite_best, gain
            finite_best, gain = finite_best[live], gain[live]  # (read by `_score`)
            s_one = score(one[live], None)
            s_multi = np.full(s_one.shape, -np.inf) if no_multi else score(multi[live], None)
            finite_best, gain = every
            notes = {"live": live}
        elif fut is None:
            if both is not None and not no_multi and self.shortcuts:  # both placements in one pass: the same
                # elementwise steps on the rows side by side, each column with its own count's g and weight
                c = one.shape[1]
                gg = np.concatenate((g, g))
                s_both = score(both, None, (gg, np.concatenate((weight, weight))))
                s_one, s_multi = s_both[:, :c], s_both[:, c:]
            else:
                s_one = score(one, None)
                s_multi = np.full(s_one.shape, -np.inf) if no_multi else score(multi, None)
        else:
            s_one, s_multi = score(one, fut[0]), score(multi, fut[1])
        if credit_t is not None:  # in place, -inf (not allowed) stays -inf
            owed = self._owed(state, codes)
            if s_both is not None and both is not None:  # both placements in one pass, as scored: the same elementwise steps
                g_both = repaying_gpus(gg, owed, both)
                s_both += credit_t[:, None] * g_both  # (s_one and s_multi are its views)
                g_one, g_multi = g_both[:, :s_one.shape[1]], g_both[:, s_one.shape[1]:]
            else:
                g_one = repaying_gpus(g, owed, one)
                s_one += credit_t[:, None] * g_one
                if no_multi:  # (-inf stays -inf; the wake-up rule reads these GPUs only where a score is finite)
                    g_multi = np.zeros(g_one.shape)
                else:
                    g_multi = repaying_gpus(g, owed, multi)
                    s_multi += credit_t[:, None] * g_multi
            notes = {**notes, "tenant_credit": credit_t, "tenant_gpus": (g_one, g_multi)}
        extra = {"req": req, "run_req": run_req, "one": one, "multi": multi, "credit": credit, "gpu_time": gpu_time,
                 "tenant_codes": codes, "cut_rows": fast and self.shortcuts, "no_multi": no_multi, **notes}
        return s_one, s_multi, q, z, {"work": work, "wait": wait, "best": best, **extra}

    def _restrict(self, state: SlotState, one: np.ndarray, multi: np.ndarray, best: np.ndarray, over: np.ndarray,
                  req: np.ndarray, run_req: np.ndarray, total_gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, Fut, dict]:
        """Extension point (benchmarks/experiments/variants): the configurations a job may take this slot.

        Returns the run-time rows with the ``over`` configurations out (inf; out of the job's best
        too, so the allowed ones are not charged against one it may not take), the best runs, a
        term added to the penalty per configuration (one node, several; None: none) and notes
        for `_wake_at`. Shipped: ``over`` is the no-sliver rule alone, no added term. ``one`` and
        ``multi`` are the caller's own copies (`RowCache.arrays` cuts new ones): masked in place."""
        if over.any():
            np.copyto(one, np.inf, where=over)
            np.copyto(multi, np.inf, where=over)
            best = np.fmin(one, multi).min(axis=1)
        return one, multi, best, None, {}

    def _tenant_credit(self, state: SlotState, vtheta: float, total_gpus: int,
                       codes: np.ndarray | None = None) -> np.ndarray | None:
        """Per waiting job, the drift reduction per GPU of starting it, from its tenant's virtual
        queue (docs/model.md, section 5): its shortfall against its entitlement, relative
        to the least-behind tenant with a job waiting (what any start gets, so it cannot change
        whether GPUs are used, only by whom), in cluster-seconds, times V*Theta so that it reads
        against the penalty. None (no change at all) without tenant input, with one tenant
        waiting, or when no waiting tenant is behind another. ``codes``: the waiting jobs' users
        as `RowCache` codes (`_tenant_index`), so no per-job Python step."""
        if state.tenants is None or self.tenant_weight <= 0:
            return None
        if codes is None:
            users = list(map(_USER, state.waiting))
            behind = self._tenants_behind(state, users, total_gpus)
            if behind is None:
                return None
            per_tenant = {k: vtheta * v for k, v in behind.items()}
            return np.fromiter(map(per_tenant.__getitem__, users), dtype=float, count=len(users))
        order, names = self._tenant_index(codes)
        behind = self._tenants_behind(state, names, total_gpus)
        if behind is None:
            return None
        if type(self)._tenants_behind is LyapunovPolicy._tenants_behind:  # Y_k too (`_owed`'s), in one gather
            y, ent = self._tenant_y, state.tenants.entitled
            credit, owed = [0.0] * len(self._rows.tenant_names), [0.0] * len(self._rows.tenant_names)  # per code
            for c, k in zip(order.tolist(), names):
                credit[c] = vtheta * behind[k]
                owed[c] = y[k] * ent.get(k, 0.0)
            per_job = np.array((credit, owed)).take(codes, 1)  # (as [:, codes], a few times sooner)
            self._owed_of = (codes, per_job[1])
            return per_job[0]
        per_code = np.zeros(len(self._rows.tenant_names))
        per_code[order] = [vtheta * behind[k] for k in names]
        return per_code[codes]

    def _tenant_index(self, codes: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """The distinct codes among ``codes`` in order of first appearance, and their users: the
        order in which ``set(users)`` is built from the waiting jobs' users, so the sets (and the
        float sums walked over them) are the same as from the whole list. With the shipped
        `_tenants_behind`, in code order instead (a third of the cost): it reads its set of tenants
        through min, max, fsum and by name only, none of which depends on the order."""
        memo = self._tenant_ix
        if memo is not None and memo[0] is codes:  # the credit's, again for Y_k in the same slot
            return memo[1], memo[2]
        names = self._rows.tenant_names
        if type(self)._tenants_behind is LyapunovPolicy._tenants_behind:
            order = np.flatnonzero(np.bincount(codes, minlength=len(names)))
            got = [names[c] for c in order.tolist()]
            self._tenant_ix = (codes, order, got)
            return order, got
        n = codes.size
        first = np.full(len(names), n, dtype=np.intp)  # each code's first position (n: absent)
        np.minimum.at(first, codes, np.arange(n, dtype=np.intp))
        present = np.flatnonzero(first < n)
        order = present[np.argsort(first[present])]  # distinct positions: the order of first appearance
        got = [names[c] for c in order.tolist()]
        self._tenant_ix = (codes, order, got)
        return order, got

    def _tenants_behind(self, state: SlotState, users: list[str], total_gpus: int) -> dict[str, float] | None:
        """Per tenant of a waiting job (``users``), its credit per GPU over V*Theta:
        tenant_weight x Ebar x (y_k - the least y_k among them) / G^2, y_k its shortfall per
        GPU-second entitled (`TenantBook.shortfall`, past the slack and one slot of the cluster),
        Ebar the mean entitlement among them, G the cluster's GPUs; tenants of no waiting job via
        `tenant_behind`. None when the term is off or changes nothing (`_tenant_credit`)."""
        book = state.tenants
        names = set(users)
        if book is None or len(names) < 2:
            return None
        pad = self._tenant_pad = total_gpus * state.slot_len  # a slot of the whole cluster: none can act sooner
        y = self._tenant_y = book.shortfalls(names, self.tenant_slack, pad)
        floor = min(y.values())
        if max(y.values()) - floor <= 0:
            return None
        # at the mean tenant's scale; fsum: a set's order follows PYTHONHASHSEED, its sum must not
        ebar = math.fsum(book.entitled.get(k, 0.0) for k in names) / len(names)
        scale = self.tenant_weight * ebar / (total_gpus * total_gpus)
        self._tenant_floor = (floor, scale)
        return {k: scale * (v - floor) for k, v in y.items()}

    def _owed(self, state: SlotState, codes: np.ndarray | None = None) -> np.ndarray:
        """Per waiting job, its tenant's GPU-seconds behind beyond the slack and the pad (Y_k)."""
        took = self._owed_of
        if codes is not None and took is not None and took[0] is codes:  # this slot's `_tenant_credit` took them
            return took[1]
        if codes is not None:
            order, names = self._tenant_index(codes)
            per_code = np.zeros(len(self._rows.tenant_names))
            book = state.tenants
            if type(self)._tenants_behind is not LyapunovPolicy._tenants_behind or book is None \
                    or self._tenant_floor is None:
                per_code[order] = [self.tenant_owed(state, k) for k in names]
            else:  # `tenant_owed`, with the shortfalls this slot's `_tenants_behind` computed
                y = self._tenant_y
                per_code[order] = [y[k] * book.entitled.get(k, 0.0) for k in names]
            return per_code[codes]
        users = [w.user for w in state.waiting]
        memo = {k: self.tenant_owed(state, k) for k in set(users)}
        return np.fromiter(map(memo.__getitem__, users), dtype=float, count=len(users))

    def tenant_owed(self, state: SlotState, tenant: str) -> float:
        """The tenant's GPU-seconds behind beyond the slack and this slot's pad (Y_k; 0 when the
        slot's `_tenants_behind` was None)."""
        if state.tenants is None or self._tenant_floor is None:
            return 0.0
        return state.tenants.shortfall(tenant, self.tenant_slack, self._tenant_pad) * state.tenants.entitled.get(tenant, 0.0)

    def tenant_behind(self, state: SlotState, tenant: str) -> float:
        """Any tenant's credit per GPU over V*Theta, against this slot's floor (0 when the
        slot's `_tenants_behind` was None)."""
        if state.tenants is None or self._tenant_floor is None:
            return 0.0
        floor, scale = self._tenant_floor
        return scale * max(0.0, state.tenants.shortfall(tenant, self.tenant_slack, self._tenant_pad) - floor)

    def _credit(self, work: np.ndarray, mean: float) -> np.ndarray:
        """A start's credit in the actual-queue term: its work capped at the mean work (at most
        its work, so the drift bound holds; an extension point, ``q_credit`` in variants)."""
        return np.minimum(work, mean)

    def _z_credit(self, wait: np.ndarray, slot: float) -> np.ndarray:
        """A start's credit in the virtual-queue term: the textbook one-slot drift, the job's whole
        wait (sunk) plus the slot (an extension point, ``z_credit`` in variants)."""
        return wait + slot

    def decide(self, state: SlotState) -> SlotResult:
        if state.node_types:
            return decide_by_type(self, state, LyapunovPolicy.decide)
        self._tenant_floor = None
        if not state.waiting:
            return SlotResult(starts=(), q=0.0, z=0.0)
        free = FreeGpus(state.free, state.gpus_per_node)
        if free.total == 0:
            q = sum(j.work for j in state.waiting)
            z = sum(max(0.0, state.now - j.submit_time) for j in state.waiting)
            # nothing can start before a GPU is released (an event for any caller that skips slots)
            return SlotResult(starts=(), q=q, z=z, info={"solver": "none", "wake_at": math.inf})
        prune = type(self)._values is LyapunovPolicy._values and type(self)._starts_first is LyapunovPolicy._starts_first \
            and type(self)._greedy is LyapunovPolicy._greedy
        # the several-node scores are masked below by the spread rule: none computed when it allows none
        spread = free.spread_mask(free.total) if type(self)._starts_first is LyapunovPolicy._starts_first else None
        s_one, s_multi, q, z, arr = self._scores(state, cols=free.total, prune=prune, spread=spread)
        self._best, self._started = arr["best"], []
        rows = arr.get("live")  # pruned: the score rows are these jobs' (row j is job rows[j])
        pre = self._starts_first(state, arr, free, s_one, s_multi)
        k = s_one.shape[1]
        # Configurations that can never fit this slot are out.
        gcol = np.arange(1, k + 1)
        if free.max_on_one_node() < k or not self.shortcuts:  # (else no column is out)
            s_one[:, gcol > free.max_on_one_node()] = -np.inf  # in place: the scores are this call's own
        no_multi = arr["no_multi"]  # every several-node score is -inf already
        if not no_multi:  # equal GPUs per node (placement.py); ``spread`` holds the same for the first k counts
            s_multi[:, ~(free.spread_mask(k) if spread is None else spread[:k])] = -np.inf
        raw_one, raw_multi = s_one, s_multi  # the drift-plus-penalty scores: their sign decides, and wake_at reads them
        s_one, s_multi = self._values(s_one, s_multi, arr)
        # (the one-node scores hold no NaN: a run that is not finite scores -inf, the rest are finite)
        best = s_one if no_multi and type(self)._values is LyapunovPolicy._values else np.maximum(s_one, s_multi)
        cand = np.flatnonzero((best[:, 0] if k == 1 and self.shortcuts else best.max(axis=1)) > 0)
        solver = "greedy"
        chosen: list[tuple[int, int]] | None = None
        cand_dp = _useful(best, cand, free.total)
        if cand_dp.size and cand_dp.size * free.total * k <= self.exact_limit:
            cand = cand_dp
            if free.total == 1 and self.shortcuts:  # `_useful` kept the one job it could be, with a value > 0
                chosen = [(0, 1)]
            elif self.shortcuts and cand.size * (free.total + 1) * min(k, free.total) <= _SMALL_DP:
                chosen = _knapsack_small(best[cand], free.total)  # the same answer, on Python floats
            else:
                chosen = _knapsack(best[cand], free.total)
            if chosen is not None:
                chosen = [(int(cand[i]), g) for i, g in chosen]
                solver = "exact"
        starts: list[Decision] = []
        if chosen is not None:
            trial = free.copy() if self.shortcuts else FreeGpus(tuple(free.free), state.gpus_per_node)
            placed: list[tuple[int, int, tuple[tuple[int, int], ...]]] | None = []
            for j, g in sorted(chosen, key=lambda t: (-t[1], t[0])):
                one_ok = math.isfinite(s_one[j, g - 1]) and s_one[j, g - 1] > 0
                pl = trial.take(g, True) if one_ok and trial.fits(g, True) else None
                if pl is None and s_multi[j, g - 1] > 0:
                    pl = trial.take(g, False)
                if pl is None:
                    placed = None
                    break
                assert placed is not None
                placed.append((j, g, pl))
            if placed is not None:
                free = trial
                for j, g, pl in placed:
                    sc = s_one[j, g - 1] if len(pl) == 1 else s_multi[j, g - 1]
                    starts.append(self._decision(state, j if rows is None else int(rows[j]), g, pl, float(sc), solver))
            else:
                solver = "greedy"
        if solver == "greedy":
            starts = self._greedy(state, s_one, s_multi, cand, free, best, rows)
        starts = pre + starts
        if free.total > 0 and len(starts) < len(state.waiting):
            starts += self._fill(state, arr, free)
        idx = list(self._started)
        self._rows.left(state.waiting, idx)  # the next slot's jobs are likely these less the started ones
        if len(idx) == 1 and self.shortcuts:  # a sum of one value is that value
            q_after = q - float(arr["work"][idx[0]])
            z_after = z - float(arr["wait"][idx[0]])
        else:
            q_after = q - float(arr["work"][idx].sum())
            z_after = z - float(arr["wait"][idx].sum())
        self._started = []
        info = {"solver": solver, "Q": q, "Z": z}
        if not starts and cand.size == 0:
            if rows is not None:  # the wake-up rule reads every score: this slot's, unpruned (nothing started)
                raw_one, raw_multi, *_ = self._scores(state, cols=free.total, spread=spread)
                raw_one[:, gcol > free.max_on_one_node()] = -np.inf
                raw_multi[:, ~free.spread_mask(k)] = -np.inf
            codes = arr.get("tenant_codes")
            if codes is not None:  # two or more tenants waiting, as `_tenants_of` asks
                some = bool(codes.size) and bool((codes != codes[0]).any())
            else:
                some = self._tenants_of(state) is not None
            if not some:
                info["wake_at"] = self._wake_at(state, raw_one, raw_multi, arr, q, z)
            else:  # the tenant credit moves too: a bound on it, not the exact quadratic
                info["wake_at"] = self._wake_at_tenants(state, raw_one, raw_multi, arr, q, z)
        return SlotResult(starts=tuple(starts), q=q_after, z=z_after, info=info)

    def _starts_first(self, state: SlotState, arr: dict, free: FreeGpus, s_one: np.ndarray, s_multi: np.ndarray) -> list[Decision]:
        """Extension point (benchmarks/experiments/variants): starts made before the scores choose, on
        ``free`` (taken from it; their jobs' scores set to -inf). Shipped: none."""
        return []

    def _values(self, s_one: np.ndarray, s_multi: np.ndarray, arr: dict) -> tuple[np.ndarray, np.ndarray]:
        """Extension point (benchmarks/experiments/variants): the value of each configuration in the slot's
        knapsack, a positive multiple of its score (signs kept). Shipped: the score itself."""
        return s_one, s_multi

    def _fill(self, state: SlotState, arr: dict, free: FreeGpus) -> list[Decision]:
        """Work conservation: GPUs the scores left free go to waiting jobs that fit at their request.

        Shortest estimated GPU-time at the request first, whatever the tenant: the tenant term acts
        in the scores, where a job's length weighs against it (ordering the fill by tenant put the
        long jobs of a tenant behind ahead of every short one). Fewer GPUs than asked stay the scores'
        choice (bounded by ``max_stretch``): filling only ever gives a job what it asked for.
        """
        req, run_req, one, multi = arr["req"], arr["run_req"], arr["one"], arr["multi"]
        n = len(req)
        k = one.shape[1]
        # the request's column only (no row is read elsewhere): an allowed count, finite on one
        # node or across nodes, for a job the scores left waiting
        if arr.get("cut_rows"):
            # `RowCache.cut`'s rows: the request is a count in 1..width, the no-sliver rule never masks
            # it, and its run there is ``run_req`` (the fmin below, read once per job when cached)
            r = req
            has = np.isfinite(run_req) & (r <= min(k, free.total))
        else:
            with np.errstate(invalid="ignore"):
                r = req.astype(np.int64)
                has = (r == req) & (r >= 1) & (r <= k)
                col = np.where(has, r - 1, 0)
                rows = np.arange(n)
                has &= np.isfinite(np.fmin(one[rows, col], multi[rows, col]))
            has &= r <= free.total
        has[self._started] = False
        cand = np.flatnonzero(has)
        key = req[cand] * run_req[cand]
        out: list[Decision] = []
        gpn = state.gpus_per_node

        def attempt(j: int) -> None:
            g = int(r[j])  # the request
            if free.total < g:
                return
            pl = None
            if g <= gpn and math.isfinite(one[j, g - 1]) and free.fits(g, True):
                pl = free.take(g, True)
            elif g <= multi.shape[1] and math.isfinite(multi[j, g - 1]) and free.fits(g, False):
                pl = free.take(g, False)
            if pl is not None:
                out.append(self._decision(state, int(j), g, pl, 0.0, "fill"))

        if free.total == 1 and cand.size and self.shortcuts and type(self)._fill_order is LyapunovPolicy._fill_order:
            # one GPU: the loop below ends at its first start, so its first candidate (the least key,
            # the first of equal ones, as `_fill_order` sorts) is tried alone first; if it does not
            # start, nothing changed and the loop runs as ever
            attempt(int(cand[int(np.argmin(key))]))
            if free.total == 0:
                return out
        for j in cand[self._fill_order(arr, cand, key)]:
            attempt(int(j))
            if free.total == 0:
                break
        return out

    def _fill_order(self, arr: dict, cand: np.ndarray, key: np.ndarray) -> np.ndarray:
        """Extension point (benchmarks/experiments/tenant_cost.py): the order in which the fill tries
        the candidates ``cand`` (their GPU-time at the request: ``key``). Shipped: shortest first,
        whatever the tenant."""
        return np.lexsort((cand, key))

    def _wake_terms(self, state: SlotState, s_one: np.ndarray, s_multi: np.ndarray, arr: dict, q: float,
                    z: float) -> float | tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """What every wake-up rule starts from: (n waiting, which configurations fit, their scores
        now s0, their fixed penalties p), or the answer itself (inf: nothing fits; now: V*(Q+Z) <= 0)."""
        n = len(state.waiting)
        vtheta = self.V * (q + z)
        s = np.concatenate([s_one, s_multi], axis=1)
        ok = np.isfinite(s)
        if not ok.any():
            return math.inf
        if vtheta <= 0:
            return float(state.now)
        gain = (self.q_weight * q * arr["credit"] + z * self._z_credit(arr["wait"], state.slot_len))[:, None]
        s0 = np.where(ok, s, -1.0)
        return n, ok, s0, np.where(ok, (gain - s0) / vtheta, 0.0)

    def _wake_at(self, state: SlotState, s_one: np.ndarray, s_multi: np.ndarray, arr: dict, q: float, z: float) -> float:
        """Earliest time a configuration that fits now gets a positive score, if nothing else changes.

        With no arrival, completion or start, only the waits grow: after d seconds Z = Z0 + n*d and
        w_j = w_j0 + d, so every score is the quadratic s(d) = s0 + d*(Z0 + n*(w_j0 + slot) - V*n*p)
        + n*d^2 (p, the penalty, is fixed). A caller may skip slots until then (the simulator does);
        deciding again earlier would give the same empty answer. inf when no configuration fits.
        (An extension point: variants whose scores grow otherwise say so.)
        """
        terms = self._wake_terms(state, s_one, s_multi, arr, q, z)
        if isinstance(terms, float):
            return terms
        n, ok, s0, pen = terms
        b = z + n * (arr["wait"][:, None] + state.slot_len) - self.V * n * pen
        disc = np.maximum(b * b - 4.0 * n * s0, 0.0)
        d = (-b + np.sqrt(disc)) / (2.0 * n)
        return state.now + float(np.where(ok, np.maximum(d, 0.0), np.inf).min())

    def _tenants_of(self, state: SlotState) -> list[str] | None:
        """The waiting jobs' tenants when the tenant term may act (two or more of them), else None."""
        if state.tenants is None or self.tenant_weight <= 0:
            return None
        users = list(map(_USER, state.waiting))
        return users if len(set(users)) >= 2 else None

    def _wake_at_tenants(self, state: SlotState, s_one: np.ndarray, s_multi: np.ndarray, arr: dict, q: float,
                         z: float) -> float:
        """A time before which no score turns positive, with the tenant credit in the scores.

        Without the credit a score is the quadratic of `_wake_at`, convex in d, so over [0, D] it
        is at most its larger end. The credit per GPU is V*Theta (increasing) times
        scale x (y_k - floor): scale grows with the mean entitlement, and each tenant's shortfall
        y_k is a ratio of two linear functions of d while demand is unchanged (`TenantBook.at`),
        so monotone: over [0, D] it lies between its ends, and the floor is at least the least
        end of any. Their product bounds the credit; D doubles while the bound stays <= 0 (then a
        few halvings close in), and the last D that held is returned. A lower bound on the exact
        time: the caller only asks again sooner than it had to.
        """
        codes = arr.get("tenant_codes")
        users: list[str] | None = None
        if codes is None:
            users = self._tenants_of(state)
            assert users is not None
        book = state.tenants
        assert book is not None
        n = len(state.waiting)
        k = s_one.shape[1]
        s = np.concatenate([s_one, s_multi], axis=1)
        ok = np.isfinite(s)
        if not ok.any():
            return math.inf
        vtheta = self.V * (q + z)
        if vtheta <= 0:
            return float(state.now)
        g = np.concatenate([np.arange(1, k + 1), np.arange(1, k + 1)]).astype(float)
        # the allowed configurations only, flat (row j, column c): each entry the same operations
        # as on the whole (n, 2k) table, rows broadcast by indexing
        rows, cols = np.nonzero(ok)
        tc = arr.get("tenant_credit")
        base_f = s[rows, cols]
        if tc is not None:
            base_f = base_f - tc[rows] * np.concatenate(arr["tenant_gpus"], axis=1)[rows, cols]
        gain = self.q_weight * q * arr["credit"] + z * self._z_credit(arr["wait"], state.slot_len)
        pen_f = (gain[rows] - base_f) / vtheta
        b_f = z + n * (arr["wait"][rows] + state.slot_len) - self.V * n * pen_f
        bound = self._tenant_bound(state, users, codes)
        g_f, who_f = g[cols], bound.who[rows]

        def holds_at(ds: np.ndarray) -> np.ndarray:
            """Per trial time d of ``ds``: no score can turn positive within d. Each d's row is
            the one-d test's operations in its order (V (q + z + n d) times the bound, the
            quadratic, the credit), so each answer is that test's."""
            d = ds[:, None]
            c = (self.V * (q + z + n * ds))[:, None] * bound.per_gpu_many(ds)
            top = np.maximum(base_f, base_f + b_f * d + n * d * d) + c.take(who_f, 1) * g_f
            return ~(top > 0).any(axis=1)

        d = quiet_for_many(holds_at, state.slot_len, max(1, _WAKE_CELLS // base_f.size), self._wake_guess)
        i = doubling_stop(d, state.slot_len)
        self._wake_guess = (i,)  # (the next search's likely stops: the same answers, sooner)
        return state.now + d

    def _tenant_bound(self, state: SlotState, users: list[str] | None, codes: np.ndarray | None = None) -> TenantBound:
        """Bounds on the tenant credit per GPU over V*Theta of the waiting jobs' tenants
        (``users``, as `_tenants_behind` reads them, or their `RowCache` ``codes``) while nothing
        arrives, starts or ends."""
        book = state.tenants
        assert book is not None
        total_gpus = max(1, sum(state.free) + sum(map(_GPUS, state.running)))
        if codes is not None:
            return TenantBound(book, [], self.tenant_weight, self.tenant_slack, total_gpus, state.slot_len,
                               codes=codes, code_names=self._rows.tenant_names)
        assert users is not None
        return TenantBound(book, users, self.tenant_weight, self.tenant_slack, total_gpus, state.slot_len)

    def _greedy(self, state: SlotState, s_one: np.ndarray, s_multi: np.ndarray, cand: np.ndarray, free: FreeGpus,
                best: np.ndarray, jobs_of: np.ndarray | None = None) -> list[Decision]:
        """Jobs by best score per GPU (``best``: the larger of the two scores per count); each
        takes its highest-scoring configuration that fits now. ``jobs_of``: score row j is waiting
        job jobs_of[j] (`_scores`' pruning; None: job j)."""
        k = s_one.shape[1]
        g = np.arange(1, k + 1, dtype=float)
        dens = best[cand] / g[None, :]
        prio = dens.max(axis=1)
        order = cand[np.lexsort((cand, -prio))]
        out: list[Decision] = []
        for lo in range(0, order.size, _GREEDY_BLOCK):  # rows sorted a block at a time: one numpy call, not one per job
            if free.total == 0:
                break
            block = order[lo: lo + _GREEDY_BLOCK]
            rows = np.concatenate([s_one[block], s_multi[block]], axis=1)
            ranks = np.argsort(-rows, axis=1, kind="stable")
            for j, row, rank in zip(block, rows, ranks):
                if free.total == 0:
                    break
                for idx in rank:
                    sc = row[idx]
                    if not sc > 0:
                        break
                    one_node = idx < k
                    gg = int(idx % k) + 1
                    if not free.fits(gg, one_node):
                        continue
                    pl = free.take(gg, one_node)
                    if pl is not None:
                        out.append(self._decision(state, int(j if jobs_of is None else jobs_of[j]), gg, pl, float(sc), "greedy"))
                        break
        return out

    def _decision(self, state: SlotState, j: int, g: int, pl: Placement, score: float, solver: str) -> Decision:
        job = state.waiting[j]
        self._started.append(j)
        run = job.run_time(g, len(pl) > 1)
        best = float(self._best[j])
        why = f"{solver}: score {score:.3g}, run {run:.0f}s (+{run - best:.0f}s over best {best:.0f}s)"
        return Decision(job_id=job.job_id, gpus=g, placement=pl, score=score, reason=why)


@dataclass
class LyapunovUnaware(LyapunovPolicy):
    """The heterogeneity-unaware reference: every GPU one type (its jobs' rows on the reference
    type), placed anywhere; a replay runs it at the speed of the type it lands on."""

    types_aware: ClassVar[bool] = False
    name: str = "lyapunov-unaware"


_GPUS, _USER = attrgetter("gpus"), attrgetter("user")


def _shortest_first(t: np.ndarray, need: np.ndarray, free: int) -> float:
    """The GPU-time ``t`` of the job at which shortest-first by GPU-time (ties by position), each
    job taking ``need`` GPUs, has handed out ``free`` GPUs (the last job's when it never does).
    As each job needs at least one GPU, that job is among the ``free`` shortest: only they are
    sorted (with ties at the edge the set may differ, but only in jobs of the same GPU-time)."""
    if free < t.size:
        part = np.argpartition(t, free - 1)[:free]
        order = part[np.lexsort((part, t[part]))]
    else:
        order = np.argsort(t, kind="stable")
    reach = np.searchsorted(np.cumsum(need[order]), free)
    return float(t[order[min(int(reach), order.size - 1)]])


def _live(gain: np.ndarray, gpu_time: np.ndarray, tau: float, weight: float, total_gpus: int,
          vtheta: float) -> np.ndarray | None:
    """The rows whose score may be > 0 (None: all of them or nearly). A job's penalty on g GPUs is
    at least the externality term at its least GPU-time and the fewest GPUs' weight (``weight``):
    (run - best) >= 0, g x run >= its GPU-time, the weight grows with g. The bound is computed with
    the same operations in the same order as `LyapunovPolicy._scores`, on smaller or equal operands,
    so as rounding is monotone each score, as computed, is at most it: a row whose bound is <= 0
    (not NaN) can never start a job."""
    with np.errstate(invalid="ignore", over="ignore"):
        lb = gpu_time - tau
        np.maximum(lb, 0.0, out=lb)
        lb *= weight
        lb /= total_gpus
        lb *= vtheta
        bound = np.subtract(gain, lb, out=lb)
        live = np.flatnonzero(~(bound <= 0))
    return live if live.size < 0.9 * gain.size else None


_WAKE_HORIZON = 2.0**26  # seconds (about two years): `quiet_for` looks no further ahead


def quiet_for(holds: Callable[[float], bool], step: float) -> float:
    """The longest D (0 if not even ``step``; at most `_WAKE_HORIZON`) found for which ``holds(D)``
    says nothing can happen within D: D doubles from ``step`` while it holds, then four halvings
    close in on where it stopped holding. ``holds`` must be monotone (true at D, true below)."""
    if not holds(step):
        return 0.0
    lo, hi = step, 2 * step
    while hi <= _WAKE_HORIZON and holds(hi):
        lo, hi = hi, 2 * hi
    if hi > _WAKE_HORIZON:
        return lo
    for _ in range(4):
        mid = 0.5 * (lo + hi)
        if holds(mid):
            lo = mid
        else:
            hi = mid
    return lo


# Python's sum of floats adds left to right before 3.12 (compensated from 3.12): `TenantBound._at_many`
# takes its rows' sums with np.cumsum then, and in Python after
_SUM_IN_ORDER = sys.version_info < (3, 12)
_WAKE_CELLS = 1 << 16  # trial times x configurations that `_wake_at_tenants` tests in one numpy pass


def quiet_for_many(holds_at: Callable[[np.ndarray], np.ndarray], step: float, per: int,
                   guess: tuple[int, ...] = ()) -> float:
    """`quiet_for`, asking ``holds_at`` (``holds_at(ds)[i]``: ``holds(ds[i])``) about up to ``per``
    trial times at once: the doubling's times in blocks, stopping at the first block with a
    no, then the four halvings' 15 possible midpoints together (``per`` >= 15) or one by one.
    The same times as `quiet_for`'s, computed the same way, and the same walk over the answers,
    so the same D (`quiet_for`'s trials are few numpy steps each on a few hundred entries).

    ``guess``: where the doubling may stop (`doubling_stop`; the last search's, as a caller
    expects): those stops' midpoints are asked with the doubling when all fit in one block, so
    a right guess saves the second call. Each answer is its trial time's alone, so the same D."""
    if not step > 0:
        return quiet_for(lambda d: bool(holds_at(np.array([d]))[0]), step)
    pts = [step]
    while 2 * pts[-1] <= _WAKE_HORIZON:  # quiet_for's hi = 2 * hi, tested while <= the horizon
        pts.append(2 * pts[-1])
    spec = [i for i in dict.fromkeys(guess) if 1 <= i < len(pts)] if per >= 15 else []
    if spec and len(pts) + 15 * len(spec) > per:
        spec = []
    ans: list[bool] = []
    extra: list[bool] = []
    for i in range(0, len(pts), per):
        if spec:  # (one block: the doubling's times, then each guessed stop's midpoints)
            got = holds_at(np.array(pts + [m for j in spec for m in _midpoints(pts[j - 1], pts[j])])).tolist()
            got, extra = got[:len(pts)], got[len(pts):]
        else:
            got = holds_at(np.array(pts[i:i + per])).tolist()
        ans += got
        if not all(got):
            break
    if not ans[0]:
        return 0.0
    i = 1
    while i < len(ans) and ans[i]:
        i += 1
    lo = pts[i - 1]
    hi = 2 * lo
    if hi > _WAKE_HORIZON:
        return lo
    if per < 15:
        for _ in range(4):
            mid = 0.5 * (lo + hi)
            if holds_at(np.array([mid]))[0]:
                lo = mid
            else:
                hi = mid
        return lo
    mids = _midpoints(lo, hi)
    if i in spec:
        at = 15 * spec.index(i)
        yes = extra[at:at + 15]
    else:
        yes = holds_at(np.array(mids)).tolist()
    m = 0
    for _ in range(4):
        if yes[m]:
            lo = mids[m]
            m = 2 * m + 2
        else:
            m = 2 * m + 1
    return lo


def _midpoints(lo: float, hi: float) -> list[float]:
    """Every midpoint the four halvings of (lo, hi) may test, as a heap: node m tests its span's
    mid; its yes child is 2m + 2 (lo = mid), its no child 2m + 1 (hi = mid)."""
    span: list[tuple[float, float]] = [(lo, hi)]
    mids: list[float] = []
    for m in range(15):
        a, b = span[m]
        mid = 0.5 * (a + b)
        mids.append(mid)
        span += [(a, mid), (mid, b)]
    return mids


def doubling_stop(d: float, step: float) -> int:
    """The doubling's first time that did not hold in a search that returned ``d`` (`quiet_for_many`'s
    ``guess``): how many of step, 2 step, 4 step, ... are at most d."""
    if not step > 0:
        return 0
    i, x = 0, step
    while x <= d and x <= _WAKE_HORIZON:
        i += 1
        x = 2 * x
    return i


def repaying_gpus(g: np.ndarray, owed: np.ndarray, run: np.ndarray) -> np.ndarray:
    """The GPUs a start's tenant credit counts for: g, at most owed / run (the GPUs whose GPU-time
    over the run repays what the tenant is owed; docs/model.md, section 5). A tenant owed less
    than one of its jobs would take is not credited as if the whole job repaid it: past what it is
    owed the start puts it ahead. 0 where the run is not finite."""
    with np.errstate(invalid="ignore", divide="ignore"):
        cap = np.where(np.isfinite(run), owed[:, None] / run, 0.0)
    return np.minimum(g, cap, out=cap)


class TenantBound:
    """While demand is unchanged, an upper bound over [now, now + d] on each waiting tenant's
    credit per GPU over V*Theta (`LyapunovPolicy._tenants_behind`: weight x Ebar x (y_k - floor)
    / G^2). Ebar grows with time, so its value at d bounds it; each shortfall y_k is a ratio of
    two linear functions of time (`TenantBook.at`), so monotone, and lies between its values at
    the ends; the floor is at least the least of those ends."""

    def __init__(self, book: TenantBook, users: list[str], weight: float, slack: float, total_gpus: int, slot: float,
                 codes: np.ndarray | None = None, code_names: list[str] | None = None) -> None:
        """``users``: the waiting jobs' tenants; or ``codes`` into ``code_names`` (`RowCache`)."""
        self.book, self.weight, self.slack = book, weight, slack
        self.g2 = float(total_gpus * total_gpus)
        self.pad = total_gpus * slot
        if codes is not None and code_names is not None:
            present = np.flatnonzero(np.bincount(codes, minlength=len(code_names)))  # np.unique(codes), no sort
            self.names = sorted(code_names[c] for c in present.tolist())
            col = {name: i for i, name in enumerate(self.names)}
            remap = np.zeros(len(code_names), dtype=np.intp)
            remap[present] = [col[code_names[c]] for c in present.tolist()]
            self.who = remap[codes]
        else:
            self.names = sorted(set(users))
            col = {name: i for i, name in enumerate(self.names)}
            self.who = np.fromiter(map(col.__getitem__, users), dtype=np.intp, count=len(users))
        self.y0 = np.array([book.shortfall(k, slack, self.pad) for k in self.names])
        self._y0_least = float(self.y0.min())  # (read by every `_at`)
        # the book's sums and rates per tenant: `_at` moves them as `TenantBook.at` does
        self._rec = np.array([book.received.get(k, 0.0) for k in self.names])
        self._held = np.array([book.held.get(k, 0.0) for k in self.names])
        self._ent = np.array([book.entitled.get(k, 0.0) for k in self.names])
        self._rate = np.array([book.rate.get(k, 0.0) for k in self.names])

    def _at(self, d: float) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(each tenant's entitled GPU-seconds and shortfall d on, the floor, the scale): `TenantBook.at`
        and `TenantBook.shortfall` on arrays, the same operations in the same order."""
        ent, y1, floor, scale = self._at_many(np.array([d]))
        return ent[0], y1[0], float(floor[0]), float(scale[0])

    def _at_many(self, ds: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`_at` for each d of ``ds``, a row each: elementwise the same operations; the floor and
        the mean entitlement as taken row by row in Python for one d (the mean's sum in order:
        `np.cumsum` adds left to right, as Python's sum of floats did before 3.12)."""
        d = ds[:, None]
        rec = self._rec + self._held * d
        ent = self._ent + self._rate * d
        with np.errstate(invalid="ignore", divide="ignore"):
            y1 = np.where(ent > 0, np.maximum(0.0, (ent - rec) - self.slack * ent - self.pad) / ent, 0.0)
        least = self._y0_least
        m = y1.min(axis=1)
        floor = np.where(m < least, m, least)  # Python's min(least, v) per row: v only if below (so not NaN)
        if _SUM_IN_ORDER:  # each row's sum as Python's sum takes it, 0.0 + e_1 + e_2 + ... left to right
            acc = np.zeros((ent.shape[0], ent.shape[1] + 1))
            acc[:, 1:] = ent
            ebar = np.cumsum(acc, axis=1)[:, -1] / len(self.names)
        else:
            ebar = np.array([sum(row) for row in ent.tolist()]) / len(self.names)
        return ent, y1, floor, self.weight * ebar / self.g2

    def per_gpu(self, d: float) -> np.ndarray:
        """Per tenant (``names`` order), the bound on its credit per GPU over V*Theta within d."""
        return self.per_gpu_many(np.array([d]))[0]

    def per_gpu_many(self, ds: np.ndarray) -> np.ndarray:
        """`per_gpu` for each d of ``ds``, a row each."""
        _, y1, floor, scale = self._at_many(ds)
        return scale[:, None] * np.maximum(0.0, np.maximum(self.y0, y1) - floor[:, None])


_GREEDY_BLOCK = 256  # jobs whose score rows `_greedy` sorts in one call


def _useful(best: np.ndarray, cand: np.ndarray, capacity: int) -> np.ndarray:
    """The jobs that can appear in an optimal knapsack solution.

    If an optimum gives job j g GPUs, the other chosen jobs are at most capacity - g, so
    if j is not among the capacity - g + 1 best jobs at g, one of those is unchosen and
    swapping it in for j loses nothing. Keeping the top capacity - g + 1 per GPU count g
    therefore keeps the optimum, and the DP runs over O(capacity x counts) jobs, not all.
    """
    if cand.size == 0:
        return cand
    sub = best[cand]
    keep = np.zeros(sub.shape[0], dtype=bool)
    for g in range(1, min(sub.shape[1], capacity) + 1):
        col = sub[:, g - 1]
        m = min(col.size, capacity - g + 1)
        top = np.argpartition(-col, m - 1)[:m] if m < col.size else np.arange(col.size)
        keep[top[col[top] > 0]] = True
    return cand[np.flatnonzero(keep)]


def _knapsack(scores: np.ndarray, capacity: int) -> list[tuple[int, int]] | None:
    """Multiple-choice knapsack: at most one GPU count per job, total GPUs <= capacity.

    ``scores[i, g-1]`` is job i's value on g GPUs (-inf or <= 0: not worth it). Returns the
    optimal [(job, g)] by dynamic programming over capacity, O(jobs x capacity x counts).
    """
    n, k = scores.shape
    kk = min(k, capacity)
    best = np.zeros(capacity + 1)
    choice = np.zeros((n, capacity + 1), dtype=np.int32)  # 0 = skip, else g
    # shift[g-1, c] indexes best[c - g] in a copy of best padded with kk leading -inf
    shift = kk + np.arange(capacity + 1)[None, :] - np.arange(1, kk + 1)[:, None]
    padded = np.full(kk + capacity + 1, -math.inf)
    for i in range(n):
        vals = scores[i, :kk]
        gs = np.flatnonzero(vals > 0)
        if gs.size == 0:
            continue
        padded[kk:] = best
        cand = padded[shift[gs]] + vals[gs][:, None]  # (options, capacity+1)
        top = cand.argmax(axis=0)
        topv = cand[top, np.arange(capacity + 1)]
        better = topv > best
        choice[i] = np.where(better, gs[top] + 1, 0)
        best = np.where(better, topv, best)
    c = int(np.argmax(best))
    out = []
    for i in range(n - 1, -1, -1):
        g = int(choice[i, c])
        if g:
            out.append((i, g))
            c -= g
    return out


_SMALL_DP = 400  # jobs x (capacity + 1) x counts up to which `_knapsack_small` is cheaper than numpy


def _knapsack_small(scores: np.ndarray, capacity: int) -> list[tuple[int, int]] | None:
    """`_knapsack` on Python floats, for small tables (a few free GPUs, a few candidates), where its
    numpy steps cost more than the arithmetic: the same sums (IEEE doubles either way), the same
    first-maximum choice per capacity (strict ``>`` walking the counts in order, as ``argmax``), the
    same strict improvement rule and the same walk back, so the same answer to the bit
    (tests/test_lyapunov_shortcuts.py compares them)."""
    n, k = scores.shape
    kk = min(k, capacity)
    best = [0.0] * (capacity + 1)
    choice: list[list[int] | None] = []
    neg = -math.inf
    for vals in scores[:, :kk].tolist():
        gs = [g for g in range(1, kk + 1) if vals[g - 1] > 0]
        if not gs:
            choice.append(None)
            continue
        new, ch = best[:], [0] * (capacity + 1)
        for c in range(capacity + 1):
            top, tg = neg, 0
            for g in gs:
                v = (best[c - g] if c >= g else neg) + vals[g - 1]
                if v > top:
                    top, tg = v, g
            if top > best[c]:
                new[c], ch[c] = top, tg
        best = new
        choice.append(ch)
    c = max(range(capacity + 1), key=best.__getitem__)  # the first maximum, as ``argmax``
    out = []
    for i in range(n - 1, -1, -1):
        row = choice[i]
        g = row[c] if row is not None else 0
        if g:
            out.append((i, g))
            c -= g
    return out
