"""EventCorrelator: spam filter, aggregation of similar events, repeat counting, and the
bounds of its caches, driven by a fake clock (no sleeps)."""

from __future__ import annotations

import pytest

from runtime.eventcorrelator import (
    COMBINED_PREFIX,
    MAX_MESSAGE,
    EventCorrelator,
    Occurrence,
    Write,
)
from runtime.lru import LRU


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def occ(message: str = "0 free GPUs on node-3", *, name: str = "w",
        reason: str = "FailedScheduling", type_: str = "Warning",
        source: str = "ctl/host") -> Occurrence:
    return Occurrence(source, ("v1", "Pod", "ns", name, f"uid-{name}"), type_, reason, message)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def correlator(clock: FakeClock, **kw: float) -> EventCorrelator:
    return EventCorrelator(clock=clock, **kw)  # type: ignore[arg-type]


def written(c: EventCorrelator, o: Occurrence) -> Write:
    w = c.correlate(o, "2026-01-01T00:00:00Z")
    assert w is not None, "dropped by the spam filter"
    return w


def test_exact_repeats_patch_one_event_with_a_growing_count(clock: FakeClock) -> None:
    c = correlator(clock)
    ws = [written(c, occ()) for _ in range(3)]
    assert [w.count for w in ws] == [1, 2, 3]
    assert len({w.name for w in ws}) == 1
    assert ws[0].name.startswith("w.")
    assert all(w.message == "0 free GPUs on node-3" and not w.combined for w in ws)


def test_beyond_max_distinct_messages_they_fold_into_one_combined_event(clock: FakeClock) -> None:
    c = correlator(clock, aggregate_max_events=10)
    singles = [written(c, occ(f"0 free GPUs on node-{i}")) for i in range(10)]
    assert len({w.name for w in singles}) == 10
    assert all(w.count == 1 and not w.combined for w in singles)

    first = written(c, occ("0 free GPUs on node-10"))
    assert first.combined and first.count == 1
    assert first.name not in {w.name for w in singles}
    assert first.message == COMBINED_PREFIX + "0 free GPUs on node-10"
    second = written(c, occ("0 free GPUs on node-11"))
    assert (second.name, second.count) == (first.name, 2)
    assert second.message == COMBINED_PREFIX + "0 free GPUs on node-11"
    # Once combined, even an earlier message goes to the combined Event.
    again = written(c, occ("0 free GPUs on node-0"))
    assert (again.name, again.count, again.combined) == (first.name, 3, True)


def test_only_same_object_type_reason_and_source_are_similar(clock: FakeClock) -> None:
    c = correlator(clock, aggregate_max_events=2)
    for i in range(2):
        written(c, occ(f"m{i}"))
    assert written(c, occ("m2")).combined
    assert not written(c, occ("m3", reason="Unschedulable")).combined
    assert not written(c, occ("m3", type_="Normal")).combined
    assert not written(c, occ("m3", name="other")).combined
    assert not written(c, occ("m3", source="other/host")).combined


def test_a_group_starts_over_after_the_interval_without_a_similar_event(clock: FakeClock) -> None:
    c = correlator(clock, aggregate_max_events=2, aggregate_interval=600)
    written(c, occ("m0"))
    clock.now += 599  # each gap below the interval keeps the group
    written(c, occ("m1"))
    clock.now += 599
    assert written(c, occ("m2")).combined
    clock.now += 601  # a longer quiet spell: the next message is an Event of its own
    fresh = written(c, occ("m3"))
    assert not fresh.combined and fresh.count == 1


def test_a_repeat_keeps_counting_after_the_group_started_over(clock: FakeClock) -> None:
    c = correlator(clock, aggregate_max_events=2)
    for i in range(3):
        combined = written(c, occ(f"m{i}"))
    clock.now += 601
    for i in range(3):
        again = written(c, occ(f"n{i}"))
    assert again.combined and again.name == combined.name and again.count == 2


def test_spam_bucket_allows_a_burst_then_refills_slowly(clock: FakeClock) -> None:
    c = correlator(clock, spam_burst=25, spam_qps=1 / 300)
    assert all(c.correlate(occ(), "t") is not None for _ in range(25))
    assert c.correlate(occ(), "t") is None
    assert c.correlate(occ("another message"), "t") is None  # the bucket is per object
    assert c.correlate(occ(name="other"), "t") is not None
    clock.now += 299
    assert c.correlate(occ(), "t") is None
    clock.now += 2  # one token per 300 s
    w = c.correlate(occ(), "t")
    assert w is not None and w.count == 26  # the dropped ones were not counted
    assert c.correlate(occ(), "t") is None


def test_spam_is_per_source(clock: FakeClock) -> None:
    c = correlator(clock, spam_burst=1)
    assert c.correlate(occ(), "t") is not None
    assert c.correlate(occ(), "t") is None
    assert c.correlate(occ(source="kubelet/n1"), "t") is not None


def test_caches_are_bounded_and_an_evicted_entry_starts_fresh(clock: FakeClock) -> None:
    c = correlator(clock, cache_size=2, spam_burst=1)
    a = written(c, occ(name="a"))
    assert c.correlate(occ(name="a"), "t") is None
    written(c, occ(name="b"))
    written(c, occ(name="c"))  # pushes a out of every cache
    again = written(c, occ(name="a"))  # a fresh bucket, and a new Event
    assert again.count == 1 and again.name != a.name


def test_first_timestamp_is_the_first_occurrences(clock: FakeClock) -> None:
    c = correlator(clock)
    first = c.correlate(occ(), "T1")
    assert first == Write(first.name, "0 free GPUs on node-3", 1, "T1", False)  # type: ignore[union-attr]
    c.correlate(occ(), "T2")
    w = c.correlate(occ(), "T3")
    assert w is not None and w.first_timestamp == "T1" and w.count == 3


def test_combined_message_is_cut_to_the_api_limit(clock: FakeClock) -> None:
    c = correlator(clock, aggregate_max_events=1)
    written(c, occ("x" * MAX_MESSAGE))
    w = written(c, occ("y" * MAX_MESSAGE))
    assert w.combined and len(w.message) == MAX_MESSAGE and w.message.startswith(COMBINED_PREFIX)


def test_names_are_unique_even_within_one_nanosecond(clock: FakeClock) -> None:
    c = correlator(clock)
    names = {written(c, occ(f"m{i}", name="n")).name for i in range(10)}
    assert len(names) == 10


@pytest.mark.parametrize("kw", [{"aggregate_max_events": 0}, {"aggregate_interval": 0},
                                {"spam_burst": 0}, {"spam_qps": 0}, {"cache_size": 0}])
def test_nonsense_limits_are_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        EventCorrelator(**kw)  # type: ignore[arg-type]


def test_lru_holds_at_most_size_and_get_counts_as_use() -> None:
    lru: LRU[str, int] = LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1
    lru.put("c", 3)  # b is the least recently used now
    assert "b" not in lru and "a" in lru and "c" in lru and len(lru) == 2
