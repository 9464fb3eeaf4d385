"""Timers: the median milliseconds of one call of a step, from device events (Triton's
``do_bench`` when it is there), warm-up excluded; and stepping through rotated input sets."""
from __future__ import annotations

import statistics
from typing import Callable

from tilec.benchmarking.array_libraries import Arrays

# do_bench's warm-up and repetition budgets, in milliseconds: (default, --quick).
WARMUP_MS = (50, 10)
REP_MS = (300, 50)
EVENT_ESTIMATE_CALLS = 5  # the event timer sizes its loops from this many calls
EVENT_MIN_REPS, EVENT_MAX_REPS = 10, 10000

Timer = Callable[[Callable[[], None]], float]  # the median ms of one call of its argument


def do_bench_timer(warmup_ms: float, rep_ms: float) -> Timer:
    from triton.testing import do_bench

    def timer(step: Callable[[], None]) -> float:
        return float(do_bench(step, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    return timer


def event_timer(arrays: Arrays, warmup_ms: float, rep_ms: float) -> Timer:
    """do_bench's method without Triton: a first call, a few to size the loops, warm-up
    calls for ``warmup_ms``, then each of ``rep_ms`` worth of calls between two events."""
    def timer(step: Callable[[], None]) -> float:
        step()  # module loads, allocations, handle creation: never timed
        start, end = arrays.event(), arrays.event()
        start.record()
        for _ in range(EVENT_ESTIMATE_CALLS):
            step()
        end.record()
        estimate = max(arrays.elapsed_ms(start, end) / EVENT_ESTIMATE_CALLS, 1e-4)
        for _ in range(max(1, round(warmup_ms / estimate))):
            step()
        reps = min(EVENT_MAX_REPS, max(EVENT_MIN_REPS, round(rep_ms / estimate)))
        pairs = [(arrays.event(), arrays.event()) for _ in range(reps)]
        for begin, finish in pairs:
            begin.record()
            step()
            finish.record()
        return statistics.median(arrays.elapsed_ms(begin, finish) for begin, finish in pairs)
    return timer


def make_timer(arrays: Arrays, quick: bool) -> tuple[Timer, str]:
    """do_bench when Triton and torch are there, else the event timer; and its name."""
    warmup, rep = WARMUP_MS[quick], REP_MS[quick]
    if arrays.name == "torch":
        try:
            return do_bench_timer(warmup, rep), "triton.testing.do_bench (median)"
        except ImportError:
            pass
    return event_timer(arrays, warmup, rep), f"{arrays.name} CUDA events (median)"


def rotating(run: Callable[[int], None], count: int) -> Callable[[], None]:
    """A step that runs on input set 0, 1, ..., count - 1, 0, ... on successive calls."""
    state = {"next": 0}

    def step() -> None:
        run(state["next"])
        state["next"] = (state["next"] + 1) % count
    return step
