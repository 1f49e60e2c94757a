import math

import pytest

from lyasched.costmodel.cost import ClusterSpec, CostModel, Link, Profile, ring_allreduce_time


def prof(**kw):
    base = dict(model="m", alpha=0.01, beta=0.001, params=25_000_000, mem_base=1e9, mem_per_sample=50e6)
    base.update(kw)
    return Profile(**base)


def test_ring_allreduce_zero_for_one_gpu():
    assert ring_allreduce_time(1e9, 1, Link(1e9, 1e-3)) == 0.0


def test_ring_allreduce_formula():
    # 2(g-1)/g * bytes / bw + 2(g-1) * lat
    t = ring_allreduce_time(4e9, 4, Link(1e9, 1e-3))
    assert t == pytest.approx(2 * 3 / 4 * 4 + 6e-3)


def test_inter_node_slower_than_intra():
    cm = CostModel(ClusterSpec(nodes=2, gpus_per_node=4))
    p = prof()
    assert cm.iter_time(p, 256, 4, spans_nodes=True) > cm.iter_time(p, 256, 4, spans_nodes=False)


def test_run_time_one_gpu_has_no_comm():
    cm = CostModel(ClusterSpec(nodes=1, gpus_per_node=4))
    p = prof()
    assert cm.run_time(p, 128, 100, 1) == pytest.approx(100 * (0.01 + 0.001 * 128))


def test_allowed_counts_respect_divisibility_and_memory():
    cm = CostModel(ClusterSpec(nodes=2, gpus_per_node=4, gpu_mem=1e9 + 50e6 * 40))
    p = prof()
    # B=96: local batch must be <= 40 for memory, g must divide 96
    assert cm.allowed_counts(p, 96) == [3, 4, 6, 8]
    assert not cm.allowed(p, 96, 5)
    assert cm.allowed_counts(p, 2) == [1, 2]


def test_scaling_has_an_optimum():
    # a communication-heavy model stops getting faster with more GPUs
    cm = CostModel(ClusterSpec(nodes=4, gpus_per_node=4, inter=Link(1e9, 1e-4)))
    p = prof(params=50_000_000, alpha=0.005, beta=0.0002)
    times = {g: cm.iter_time(p, 64, g, spans_nodes=g > 4) for g in (1, 2, 4, 8, 16)}
    best = min(times, key=times.get)
    assert best in (2, 4)
    assert math.isfinite(times[16]) and times[16] > times[best]
