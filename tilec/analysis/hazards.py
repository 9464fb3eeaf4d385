"""Shared-memory hazards of the copy pipeline, found by running its schedule.

The schedule the passes leave (double buffering, fragment pipelining) is correct only if
every read of a shared stage sees the copy that filled it, and no copy refills a stage another
warp may still be reading. Rather than trusting the passes, :func:`check_schedule` executes the
schedule: it walks the IR in program order, runs the K loop for concrete trip counts while
evaluating the scalar index arithmetic (each integer op by its definition's fold: constants,
add/sub/mul/floordiv/mod, comparisons; the loop's wrap-around stage counters), and follows each
access to each buffer stage.

Every thread runs the same program (the copies and barriers are not under divergent control
flow), so one trace stands for all warps, and a ``gpu.barrier`` orders what every thread did
before it with what any thread does after it. The data-movement family that owns a copy op
(``tilec/families/movements.py``) records its events and says when a copy is complete: for
cp.async (``tilec/families/cp_async.py``), a ``mode = async`` copy joins the commit group of
the next ``copy.commit`` and is complete only after a ``copy.wait {pending = P}`` that leaves
at most P younger groups in flight; a synchronous copy is complete when issued. The rules
checked here, per buffer stage, hold for every family:

- a copy is visible to the other warps only after a barrier that follows its completion; a
  read before that is a race (read-after-write);
- a copy may be issued only after a barrier that follows every earlier read of its stage,
  since cp.async writes whenever it lands (write-after-read), and only once the stage's
  previous copy is complete (two copies in flight land in either order);
- a copy still in flight when the kernel ends writes the shared memory of a finished block.

A violation raises :class:`HazardError`, a :class:`~tilec.errors.TileConfigError` naming both
accesses: op, buffer stage, loop iteration, and source location.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from tilec.analysis.folding import fold, folds_to_scalar
from tilec.errors import TileConfigError, located
from tilec.families.catalogue import op_definitions
from tilec.families.movements import FAMILY_OF_OP, STAGE_WRITERS
from tilec.families.products import LOAD_OPS, PRODUCT_OPS
from tilec.ir.core import Block, Kernel, Op, Value, defining_op
from tilec.ir.types import TileType

# Ops that read a shared stage: every operand that is a shared view is read.
READERS = (*LOAD_OPS, "tile.dot")


class HazardError(TileConfigError):
    """Two accesses to one shared buffer stage that the schedule does not order."""

    kind = "schedule error"

    def __init__(self, message: str, loc=None, source_line: str = "", hint: str = "",
                 first: Optional["Event"] = None, second: Optional["Event"] = None):
        self.first = first
        self.second = second
        super().__init__(message, loc, source_line, hint)


@dataclass(frozen=True)
class Event:
    """One executed op of the schedule.

    ``phase`` is "prologue" (before the K loop), "loop" or "after" (after it); ``iteration``
    the K loop's iteration for loop events. Shared accesses carry their ``buffer`` (the
    ``smem.alloc`` result) and ``stage``; copies their ``group`` (the index of the commit
    group they join: the number of commits before them) and evaluated tensor ``offsets``
    (None where unknown at compile time); waits their ``pending``.
    """

    op: Op
    phase: str
    iteration: Optional[int]
    position: int
    buffer: Optional[Value] = None
    stage: Optional[int] = None
    group: Optional[int] = None
    offsets: tuple[Optional[int], ...] = ()
    pending: Optional[int] = None
    commits_before: int = 0

    @property
    def buffer_name(self) -> str:
        return self.buffer.hint if self.buffer is not None and self.buffer.hint else "buffer"

    @property
    def is_write(self) -> bool:
        return self.op.name in STAGE_WRITERS

    @property
    def is_async(self) -> bool:
        """A write that its family completes after issue (cp.async: ``mode = async``)."""
        return self.is_write and not FAMILY_OF_OP[self.op.name].completes_on_issue(self.op)

    def where(self) -> str:
        if self.phase == "loop":
            return f"in K-loop iteration {self.iteration}"
        return "before the K loop" if self.phase == "prologue" else "after the K loop"

    def describe(self) -> str:
        """The access in words, e.g. ``frag.ldmatrix of operand A (k0 = 16) reading sA
        stage 2 in K-loop iteration 0, at file.py:9:20``."""
        family = FAMILY_OF_OP.get(self.op.name)
        what = family.describe(self) if family is not None else None
        if what is None and self.op.name in LOAD_OPS:
            what = (f"{self.op.name} of operand {self.op.attrs['operand']} "
                    f"(k0 = {self.op.attrs['k0']}) reading {self.buffer_name} stage {self.stage}")
        elif what is None:
            what = f"{self.op.name} reading {self.buffer_name} stage {self.stage}"
        at = f", at {self.op.loc}" if self.op.loc is not None else ""
        return f"{what} {self.where()}{at}"


@dataclass
class Trace:
    """The events of one simulated run, in program order."""

    events: list[Event] = field(default_factory=list)
    trip_count: int = 0
    loop: Optional[Op] = None
    values: dict[Value, Optional[int]] = field(default_factory=dict)  # last value of each


def main_loop(kernel: Kernel) -> Optional[Op]:
    """The top-level ``scf.for`` whose body touches shared memory (the K loop)."""
    for op in kernel.body.ops:
        if op.name == "scf.for" and any(inner.name in (*STAGE_WRITERS, *READERS)
                                        for inner in op.walk()):
            return op
    return None


class _Tracer:
    """The simulated run as a movement family's ``trace_op`` sees it
    (:class:`tilec.families.movement.Tracer`)."""

    def __init__(self, kernel: Kernel, trace: Trace):
        self.kernel = kernel
        self.trace = trace
        # Where the run is, and the families' counters ("commits": commit groups closed).
        self.state: dict = {"phase": "prologue", "iteration": None, "commits": 0}

    def value(self, v: Value) -> Optional[int]:
        return self.trace.values.get(v)

    def stage_of(self, view: Value, op: Op) -> tuple[Value, int]:
        kernel = self.kernel
        stage_op = defining_op(view)
        if stage_op is None or stage_op.name != "smem.stage":
            raise located(TileConfigError, f"{op.name} accesses a shared value that is not a "
                          "stage of a buffer (smem.stage)", op.loc, kernel.source_lines)
        stage = self.value(stage_op.operands[1])
        if stage is None:
            raise located(TileConfigError, f"{op.name}: the stage index of "
                          f"{stage_op.operands[0].hint} cannot be evaluated at compile time, "
                          "so its schedule cannot be checked", op.loc, kernel.source_lines)
        return stage_op.operands[0], stage

    def record(self, op: Op, **fields) -> None:
        events = self.trace.events
        events.append(Event(op, self.state["phase"], self.state["iteration"], len(events),
                            commits_before=self.state["commits"], **fields))


def simulate(kernel: Kernel, trip_count: int) -> Trace:
    """Run the schedule with the K loop taking ``trip_count`` iterations (its upper bound is
    bound accordingly when unknown at compile time) and record every event. The program is
    the grid's first (every program id 0): a split-K block's slice then starts at k = 0,
    and the schedule is the same for every block."""
    trace = Trace(trip_count=trip_count, loop=main_loop(kernel))
    tracer = _Tracer(kernel, trace)
    env = trace.values
    state = tracer.state
    value, stage_of, record = tracer.value, tracer.stage_of, tracer.record
    catalogue = op_definitions()

    def run_block(block: Block) -> list[Optional[int]]:
        for op in block.ops:
            name = op.name
            if name == "scf.yield":
                return [value(v) for v in op.operands]
            if name == "arith.wrap_inc":
                # As the backend emits it: a + 1, or 0 when that reaches the modulus.
                a = value(op.operands[0])
                env[op.result] = None if a is None else (
                    0 if a + 1 == op.attrs["modulus"] else a + 1)
            elif folds_to_scalar(op, catalogue):
                env[op.result] = fold(op, [value(v) for v in op.operands], catalogue)
            elif name == "tile.grid":
                for result in op.results:
                    env[result] = 0
            elif name in FAMILY_OF_OP:
                FAMILY_OF_OP[name].trace_op(op, tracer)
            elif name in READERS:
                for operand in op.operands:
                    if isinstance(operand.type, TileType) and operand.type.space == "smem":
                        buffer, stage = stage_of(operand, op)
                        record(op, buffer=buffer, stage=stage)
            elif name == "gpu.barrier":
                record(op)
            elif name in PRODUCT_OPS:
                record(op)
            elif name == "scf.for":
                run_loop(op)
        return []

    def run_loop(loop: Op) -> None:
        lb, ub, _ = (value(v) for v in loop.operands[:3])
        step = loop.attrs["step_const"]
        lb = 0 if lb is None else lb
        is_main = loop is trace.loop
        if ub is None or is_main:
            # The passes do not specialise the schedule on K, so every trip count must be
            # sound, even where K is a compile-time constant.
            trips = trip_count
            if ub is None:
                env[loop.operands[1]] = lb + trips * step  # K, as a launch would bind it
        else:
            trips = max(0, -(-(ub - lb) // step))
        body = loop.regions[0]
        carried = [value(v) for v in loop.operands[3:]]
        for it in range(trips):
            if is_main:
                state["phase"], state["iteration"] = "loop", it
            env[body.args[0]] = lb + it * step
            for arg, carried_value in zip(body.args[1:], carried):
                env[arg] = carried_value
            carried = run_block(body)
        for result, final in zip(loop.results, carried):
            env[result] = final
        if is_main:
            state["phase"], state["iteration"] = "after", None

    run_block(kernel.body)
    return trace


@dataclass
class _Write:
    event: Event
    completed_by: Optional[Event] = None  # the event that completed it (on issue: itself)

    @property
    def group(self) -> Optional[int]:
        return self.event.group


class _InFlight:
    """The writes of each buffer stage not yet visible to all threads
    (:class:`tilec.families.movement.Completions` for the families' ``observe``)."""

    def __init__(self) -> None:
        self.writes: dict[tuple[Value, int], list[_Write]] = {}
        self.last_completion: Optional[Event] = None

    def complete_writes(self, done: Callable[[_Write], bool], by: Event) -> None:
        """Mark every incomplete write that ``done`` accepts as completed by ``by``."""
        self.last_completion = by
        for writes in self.writes.values():
            for write in writes:
                if write.completed_by is None and done(write):
                    write.completed_by = by


def check_trace(kernel: Kernel, trace: Trace) -> None:
    """Raise :class:`HazardError` at the first unordered pair of accesses in the trace."""

    def fail(later: Event, earlier: Event, message: str, hint: str) -> None:
        text = (f"{message}\n  {earlier.describe()}\n  {later.describe()}")
        error = located(HazardError, text, later.op.loc, kernel.source_lines, hint)
        error.first, error.second = earlier, later
        raise error

    last_barrier = -1
    flight = _InFlight()
    in_flight = flight.writes
    last_read: dict[tuple[Value, int], Event] = {}
    ever_written: set[tuple[Value, int]] = set()
    for event in trace.events:
        name = event.op.name
        key = (event.buffer, event.stage)
        family = FAMILY_OF_OP.get(name)
        if name == "gpu.barrier":
            last_barrier = event.position
            for stage_key, writes in in_flight.items():
                in_flight[stage_key] = [w for w in writes if w.completed_by is None]
        elif event.is_write:
            read = last_read.get(key)
            if read is not None and read.position > last_barrier:
                fail(event, read, f"{event.buffer_name} stage {event.stage} is refilled while "
                     "another warp may still be reading it: no gpu.barrier between the read "
                     "and the copy", "put a gpu.barrier after the stage's last read and before "
                     "the copy that refills it")
            for write in in_flight.get(key, []):
                if write.completed_by is None:
                    fail(event, write.event, f"{event.buffer_name} stage {event.stage} is "
                         "copied into while an earlier copy into it is still in flight; the "
                         "two may land in either order", family.words.refill_hint)
            write = _Write(event, None if event.is_async else event)
            in_flight.setdefault(key, []).append(write)
            ever_written.add(key)
        elif family is not None:
            family.observe(event, flight)
        elif name in READERS:
            if key not in ever_written:
                alloc = defining_op(event.buffer)
                if alloc is not None:
                    alloc_event = Event(alloc, event.phase, event.iteration, -1)
                    fail(event, alloc_event, f"{event.buffer_name} stage {event.stage} is read "
                         "before any copy fills it", "issue the stage's copy (and wait for "
                         "it) before its first read")
            for write in in_flight.get(key, []):
                words = FAMILY_OF_OP[write.event.op.name].words
                if write.completed_by is None:
                    fail(event, write.event, f"{event.buffer_name} stage {event.stage} is read "
                         f"while the copy that fills it may still be in flight: "
                         f"{words.not_covered}", words.read_hint)
                if write.completed_by.position > last_barrier:
                    after = ("the copy that fills it" if write.completed_by is write.event else
                             f"the {words.completer} that completes its copy "
                             f"({write.completed_by.where()})")
                    fail(event, write.event, f"{event.buffer_name} stage {event.stage} is read "
                         f"without a gpu.barrier after {after}: other warps' parts of the "
                         "copy may not have landed", "put a gpu.barrier between the copy's "
                         "completion and the read")
            last_read[key] = event
    for writes in in_flight.values():
        for write in writes:
            if write.completed_by is None:
                words = FAMILY_OF_OP[write.event.op.name].words
                last = flight.last_completion
                end = last if last is not None else write.event
                fail(end, write.event, f"the kernel can finish with a copy into "
                     f"{write.event.buffer_name} stage {write.event.stage} still in flight "
                     f"(the last {words.completer} leaves it pending, {trace.trip_count} "
                     "K-loop iterations)", words.end_hint)


def trip_counts(stages: int) -> list[int]:
    """Trip counts to simulate: a long run whose steady state covers every stage twice,
    then the short ones where the prologue's copies outnumber the iterations."""
    long = 2 * stages + 2
    return [long] + [n for n in range(1, stages + 1) if n != long]


def schedule_stages(kernel: Kernel) -> int:
    if kernel.schedule.pipeline is not None:
        return kernel.schedule.stages
    return max(
        (op.attrs.get("stages", 1) for op in kernel.walk() if op.name == "smem.alloc"),
        default=1)


def check_schedule(kernel: Kernel, trip_count: Optional[int] = None) -> None:
    """Simulate the K loop for ``trip_count`` iterations (default: 2 * stages + 2, then every
    count up to ``stages``) and raise :class:`HazardError` on the first shared-memory race.
    A warp-specialized kernel (``kernel.schedule.roles``) runs as a producer and consumers
    ordered by mbarriers: :mod:`tilec.analysis.mbarriers` checks that protocol instead."""
    if kernel.schedule.roles is not None:
        from tilec.analysis.mbarriers import check_roles
        check_roles(kernel, trip_count, HazardError)
        return
    counts = [trip_count] if trip_count is not None else trip_counts(schedule_stages(kernel))
    for count in counts:
        check_trace(kernel, simulate(kernel, count))
