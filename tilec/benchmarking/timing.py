"""The timer: the median milliseconds of one call of a step, from device events around
each call, warm-up excluded, each call starting on a cold and clean L2 cache; and stepping
through rotated input sets.

Why not ``triton.testing.do_bench``: it empties L2 before each call by writing a 256 MiB
buffer, which leaves L2 full of dirty lines that the timed call then has to write back to
DRAM. A memory-bound call pays for that in its own bandwidth: on an H100, 16x8192x8192 f16
measured 58 us under do_bench and 48 us in Nsight Compute (which flushes clean), for tilec
and cuBLAS alike. Reading a buffer several times the size of L2 instead evicts everything
(writing back what was dirty before the timed call starts) and leaves only clean lines.
"""
from __future__ import annotations

import statistics
from typing import Callable, Optional

from tilec.benchmarking.array_libraries import Arrays

# Warm-up and repetition budgets, in milliseconds of timed calls: (default, --quick).
WARMUP_MS = (50, 10)
REP_MS = (300, 50)
EVENT_ESTIMATE_CALLS = 5  # the timer sizes its loops from this many calls
EVENT_MIN_REPS, EVENT_MAX_REPS = 10, 10000
# The read-only flush reads this many times L2's size: enough that no line of the timed
# call's inputs or of earlier writes survives, whatever the replacement policy.
FLUSH_L2_FACTOR = 4
TIMER_NAME = "CUDA events around each call, after a read-only L2 flush (median)"

Timer = Callable[[Callable[[], None]], float]  # the median ms of one call of its argument


def event_timer(arrays: Arrays, warmup_ms: float, rep_ms: float,
                flush: Optional[Callable[[], None]] = None) -> Timer:
    """A first call, a few to size the loops, warm-up calls for ``warmup_ms``, then each of
    ``rep_ms`` worth of calls between two events. ``flush`` runs before every warm-up and
    timed call, outside the events."""
    before = flush or (lambda: None)

    def timer(step: Callable[[], None]) -> float:
        step()  # module loads, allocations, handle creation: never timed
        start, end = arrays.event(), arrays.event()
        start.record()
        for _ in range(EVENT_ESTIMATE_CALLS):
            step()
        end.record()
        estimate = max(arrays.elapsed_ms(start, end) / EVENT_ESTIMATE_CALLS, 1e-4)
        for _ in range(max(1, round(warmup_ms / estimate))):
            before()
            step()
        reps = min(EVENT_MAX_REPS, max(EVENT_MIN_REPS, round(rep_ms / estimate)))
        pairs = [(arrays.event(), arrays.event()) for _ in range(reps)]
        for begin, finish in pairs:
            before()
            begin.record()
            step()
            finish.record()
        return statistics.median(arrays.elapsed_ms(begin, finish) for begin, finish in pairs)
    return timer


def make_timer(arrays: Arrays, quick: bool) -> tuple[Timer, str]:
    """The benchmark's timer, flushing L2 by reading before each call, and its name."""
    flush = arrays.reader(FLUSH_L2_FACTOR * arrays.l2_bytes)
    return event_timer(arrays, WARMUP_MS[quick], REP_MS[quick], flush), TIMER_NAME


def rotating(run: Callable[[int], None], count: int) -> Callable[[], None]:
    """A step that runs on input set 0, 1, ..., count - 1, 0, ... on successive calls."""
    state = {"next": 0}

    def step() -> None:
        run(state["next"])
        state["next"] = (state["next"] + 1) % count
    return step
