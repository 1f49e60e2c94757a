"""GPU types in the policy core: typed input (snapshot.type_rows, state.type_slice), the policies'
choice of (type, count, nodes), the unaware references and the gavel baseline."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from lyasched.costmodel.cost import ClusterSpec, CostModel, Profile
from lyasched.costmodel.jobspec import Job
from lyasched.costmodel.roofline import lookup
from lyasched.policy import make_policy
from lyasched.policy.snapshot import type_rows
from lyasched.policy.state import SlotState, WaitingJob, type_slice, untyped

TYPES = ("a100", "t4")
NODE_TYPES = ("a100", "a100", "t4", "t4")  # 2 nodes of each, 4 GPUs a node
PROFILE = Profile("m", 0.01, 0.002, 10_000_000, mem_base=1e9, mem_per_sample=50e6)


def costs(nodes_per_type: int = 2, gpn: int = 4) -> dict[str, CostModel]:
    return {t: CostModel(ClusterSpec(nodes=nodes_per_type, gpus_per_node=gpn, gpu_mem=lookup(t).memory)) for t in TYPES}


def job(i: int, batch: int = 64, req: int = 2, iters: int = 20_000, submit: float = 0.0) -> Job:
    return Job(f"j{i}", PROFILE, batch, iters, submit_time=submit, max_gpus=8, requested_gpus=req)


def typed_waiting(j: Job, allowed: tuple[str, ...] = ()) -> WaitingJob:
    by = type_rows(j, costs(), allowed, "t4", 8)
    base = next(iter(by.values()))
    ref = by.get("t4", base)  # the reference type's rows: what an unaware policy sees
    return replace(ref, by_type=by)


def state(waiting, free=(4, 4, 4, 4), now=600.0) -> SlotState:
    return SlotState(now=now, slot_len=30.0, free=tuple(free), gpus_per_node=4, waiting=tuple(waiting),
                     node_types=NODE_TYPES)


def types_of(d, node_types=NODE_TYPES) -> set[str]:
    return {node_types[n] for n, _ in d.placement}


def test_type_rows_follow_the_roofline_and_memory():
    j = job(0, batch=256)
    by = type_rows(j, costs(), (), "t4", 8)
    assert set(by) == set(TYPES)
    assert by["a100"].best_run < by["t4"].best_run  # the roofline: A100 faster than T4
    assert by["a100"].best_any == by["t4"].best_any == by["a100"].best_run
    # a batch that fits 40 GiB but not 16 GiB on one GPU: inf on t4 at one GPU only
    big = job(1, batch=400)
    rows = type_rows(big, costs(), (), "t4", 8)
    assert math.isinf(rows["t4"].run_one_node[0]) and math.isfinite(rows["a100"].run_one_node[0])
    assert math.isfinite(rows["t4"].run_one_node[3])
    # only the allowed types; an allowed type no node has is absent
    assert set(type_rows(j, costs(), ("a100",), "t4", 8)) == {"a100"}
    assert set(type_rows(j, costs(), ("v100", "t4"), "t4", 8)) == {"t4"}


def test_type_slice_renumbers_nodes_and_keeps_allowed_jobs():
    a, b = typed_waiting(job(0), ("a100",)), typed_waiting(job(1))
    sub, idx = type_slice(state([a, b], free=(1, 2, 3, 4)), "t4", [a, b])
    assert idx == (2, 3) and sub.free == (3, 4) and sub.node_types == ()
    assert [w.job_id for w in sub.waiting] == ["j1"] and sub.waiting[0] is b.by_type["t4"]


@pytest.mark.parametrize("name", ["lyapunov", "elastic", "gavel"])
def test_a_job_runs_on_a_type_it_allows_only(name):
    ws = [typed_waiting(job(i, submit=float(i)), ("t4",) if i % 2 else ("a100",)) for i in range(6)]
    res = make_policy(name).decide(state(ws))
    assert res.starts
    allowed = {w.job_id: set(w.by_type) for w in ws}
    for d in res.starts:
        assert len(types_of(d)) == 1 and types_of(d) <= allowed[d.job_id], d


def test_aware_picks_the_fast_type_when_both_are_free():
    w = typed_waiting(job(0))
    d, = make_policy("lyapunov").decide(state([w])).starts
    assert types_of(d) == {"a100"}


def test_one_type_decides_as_untyped():
    """A typed slot of one type is the untyped slot: same starts, same nodes."""
    ws = [job(i, submit=float(10 * i), req=1 + i % 3) for i in range(12)]
    cm = CostModel(ClusterSpec(nodes=4, gpus_per_node=4, gpu_mem=lookup("t4").memory))
    plain = [type_rows(j, {"t4": cm}, (), "t4", 8)["t4"] for j in ws]
    typed = [replace(w, by_type={"t4": w}) for w in plain]
    s0 = SlotState(now=900.0, slot_len=30.0, free=(4, 2, 3, 4), gpus_per_node=4, waiting=tuple(plain))
    s1 = replace(s0, waiting=tuple(typed), node_types=("t4",) * 4)
    for name in ("lyapunov", "elastic"):
        r0, r1 = make_policy(name).decide(s0), make_policy(name).decide(s1)
        assert [(d.job_id, d.gpus, d.placement) for d in r0.starts] == [(d.job_id, d.gpus, d.placement) for d in r1.starts]
        assert r0.q == pytest.approx(r1.q) and r0.z == pytest.approx(r1.z)


def test_unaware_sees_one_type():
    ws = [typed_waiting(job(i, submit=float(i))) for i in range(5)]
    s = state(ws, free=(0, 2, 4, 4))
    r_un = make_policy("lyapunov-unaware").decide(s)
    r_ref = make_policy("lyapunov").decide(untyped(s))
    assert [(d.job_id, d.gpus, d.placement) for d in r_un.starts] == [(d.job_id, d.gpus, d.placement) for d in r_ref.starts]
    assert make_policy("elastic-unaware").types_aware is False


def test_gavel_prefers_the_job_that_gains_most_on_the_fast_type():
    # two one-GPU jobs, one A100 free: the compute-heavy one (large gain on A100) gets it
    heavy = Profile("heavy", 0.0, 0.01, 1_000_000)
    light = Profile("light", 0.5, 0.00001, 1_000_000)
    js = [Job("h", heavy, 32, 1000, requested_gpus=1, max_gpus=1), Job("l", light, 32, 1000, requested_gpus=1, max_gpus=1)]
    ws = [replace(w := type_rows(j, costs(), (), "t4", 8)["t4"], by_type=type_rows(j, costs(), (), "t4", 8)) for j in js]
    res = make_policy("gavel").decide(state(ws, free=(1, 0, 1, 0), now=360.0))
    where = {d.job_id: types_of(d) for d in res.starts}
    assert where == {"h": {"a100"}, "l": {"t4"}}
    assert np.isfinite([d.score for d in res.starts]).all()


def test_unslice_maps_nodes_back_in_order():
    from lyasched.policy.state import Decision, type_nodes, unslice
    idx = type_nodes(("t4", "a100", "t4", "a100"))["a100"]
    assert idx == (1, 3)
    d = Decision("j", 3, ((1, 2), (0, 1)))
    assert unslice(d, idx).placement == ((1, 1), (3, 2))
    assert unslice(Decision("j", 1, ((1, 1),)), idx).placement == ((3, 1),)
    same = Decision("j", 2, ((0, 2),))
    assert unslice(same, (0, 2)) is same
