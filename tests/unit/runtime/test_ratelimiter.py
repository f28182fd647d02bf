from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from runtime.ratelimit import TokenBucket
from runtime.ratelimiter import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    default_controller_rate_limiter,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@given(n=st.integers(0, 200))
def test_exponential_is_base_times_two_to_failures_capped(n: int) -> None:
    rl = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [rl.when("x") for _ in range(n + 1)]
    for i, d in enumerate(delays):
        assert d == min(0.005 * 2**i, 1000.0) if i <= 62 else d == 1000.0
    assert rl.num_requeues("x") == n + 1
    assert rl.when("other") == 0.005
    rl.forget("x")
    assert rl.num_requeues("x") == 0
    assert rl.when("x") == 0.005


def test_exponential_reaches_cap_at_18_failures() -> None:
    rl = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [rl.when("x") for _ in range(20)]
    assert delays[17] == 0.005 * 2**17  # 655.36 s
    assert delays[18] == 1000.0


def test_fast_slow() -> None:
    rl = ItemFastSlowRateLimiter(0.01, 5.0, 2)
    assert [rl.when("a") for _ in range(4)] == [0.01, 0.01, 5.0, 5.0]


@given(burst=st.integers(1, 200), qps=st.floats(0.5, 100))
def test_bucket_burst_then_qps(burst: int, qps: float) -> None:
    clock = FakeClock()
    b = TokenBucket(qps, burst, clock=clock)
    for _ in range(burst):
        assert b.reserve() == 0.0
    # the next ones queue up at 1/qps spacing
    for i in range(1, 5):
        assert abs(b.reserve() - i / qps) < 1e-9
    clock.t += 100 + 5 / qps  # refill, never above burst
    assert b.tokens() <= burst


def test_try_accept_refills_with_time() -> None:
    clock = FakeClock()
    b = TokenBucket(10, 1, clock=clock)
    assert b.try_accept()
    assert not b.try_accept()
    clock.t += 0.1
    assert b.try_accept()


def test_default_controller_limiter_is_max_of_item_and_bucket() -> None:
    clock = FakeClock()
    rl = MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0), BucketRateLimiter(10, 100, clock)
    )
    # within the burst the per-item backoff dominates
    assert rl.when("a") == 0.005
    assert rl.when("a") == 0.01
    for i in range(98):
        rl.when(f"k{i}")
    # bucket exhausted: 10 qps means the next waits 0.1 s, more than the item's 5 ms
    assert abs(rl.when("fresh") - 0.1) < 1e-9
    assert rl.num_requeues("a") == 2
    rl.forget("a")
    assert rl.num_requeues("a") == 0
    d = default_controller_rate_limiter()
    assert d.when("z") == 0.005
