"""The builder's running views: made once per start, found again by identity, in the snapshot's order."""

import random

import pytest

from lyasched.policy.snapshot import ClusterSnapshot, RunningObs, SlotStateBuilder
from lyasched.policy.state import Capabilities


def _obs(i: int) -> RunningObs:
    return RunningObs(f"j{i}", ((i % 7, 1 + i % 3),), float(i), 100.0 + i, 500.0 if i % 2 else float("inf"), 0.0, f"u{i % 4}")


def test_running_views_are_kept_per_start_and_follow_the_snapshot_order():
    rng = random.Random(3)
    builder = SlotStateBuilder(Capabilities())
    fresh = SlotStateBuilder(Capabilities())
    running: list[RunningObs] = []
    seen: dict[str, object] = {}  # job id -> the view first made of it
    nxt = 0
    for slot in range(3200):  # enough starts that the builder drops the views of jobs gone
        while len(running) > 40:
            running.pop(rng.randrange(len(running)))
        for _ in range(rng.randint(0, 3)):
            running.insert(rng.randrange(len(running) + 1), _obs(nxt))
            nxt += 1
        snap = ClusterSnapshot(now=30.0 * slot, slot_len=30.0, nodes=(), free=(), gpus_per_node=8, waiting=(),
                               running=tuple(running))
        views = builder.build(snap).running
        assert [v.job_id for v in views] == [o.job_id for o in running]
        for o, v in zip(running, views):
            if seen.setdefault(o.job_id, v) is v:  # the same object while the job runs
                assert v == fresh.running_job(o, o.start_time, 30.0)  # what a fresh builder makes of it
            else:
                raise AssertionError(f"{o.job_id}: a new view while it runs")
    assert nxt > 4096 + 4 * len(running)


def test_builders_sharing_observations_each_keep_their_own_views():
    """Two builders over the same observations, in turns, each snapshot a different subset in a
    different order: each shows its own view (here a liar's job scaled by one builder's trust
    book only), never the other's, and finds the jobs new to it whatever their position."""
    from lyasched.estimates.trust import TrustBook

    book = TrustBook()
    for _ in range(3):
        book.observe("u1", 1.0, 100.0)  # user u1's jobs run 100x their claim
    rng = random.Random(5)
    trusting, plain = SlotStateBuilder(Capabilities()), SlotStateBuilder(Capabilities())
    first: dict[tuple[int, str], object] = {}  # (builder, job id) -> the view first shown
    seen: dict[int, set[str]] = {0: set(), 1: set()}
    pool = [_obs(i) for i in range(60)]
    for slot in range(400):
        k = slot % 2
        builder = (trusting, plain)[k]
        running = rng.sample(pool, rng.randint(1, 25))
        if rng.random() < 0.5:
            running.sort(key=lambda o: o.start_time)
        snap = ClusterSnapshot(now=60.0 + 0.1 * slot, slot_len=30.0, nodes=(), free=(), gpus_per_node=8, waiting=(),
                               running=tuple(running), trust=book if k == 0 else None)
        assert builder._find_unseen(snap.running) == [o for o in running if o.job_id not in seen[k]]
        views = builder.build(snap).running
        seen[k].update(o.job_id for o in running)
        for o, v in zip(running, views, strict=True):
            assert first.setdefault((k, o.job_id), v) is v  # the same object while the job runs
            assert v.job_id == o.job_id
            scaled = v.predicted_end - o.start_time > o.predicted_run  # 100x, at most its time limit
            assert scaled == (k == 0 and o.user == "u1"), (k, o)


def test_made_is_the_constructor_and_refuses_a_field_left_out_or_unknown():
    from lyasched.policy.snapshot import made

    o = _obs(3)
    m = made(RunningObs, job_id=o.job_id, placement=o.placement, start_time=o.start_time, predicted_run=o.predicted_run,
             time_limit=o.time_limit, attained_before=o.attained_before, user=o.user)
    assert m == o and type(m) is RunningObs and vars(m) == vars(o) and hash(m) == hash(o)
    with pytest.raises(TypeError, match="user"):
        made(RunningObs, job_id="x", placement=(), start_time=0.0, predicted_run=1.0, time_limit=1.0, attained_before=0.0)
    with pytest.raises(TypeError, match="users"):
        made(RunningObs, job_id="x", placement=(), start_time=0.0, predicted_run=1.0, time_limit=1.0, attained_before=0.0,
             user="", users="")
