"""The mbarrier protocol of warp-specialized kernels, checked by running it.

A kernel with ``kernel.schedule.roles`` (``passes/warp_specialize.py``) is three programs: the
ops before ``ws.producer``, which every thread runs (the barriers' initialisation, one CTA
barrier); the ``ws.producer`` region, which the producer's elected thread runs; and the ops
after it, which each consumer warpgroup runs on its own. Nothing but the mbarriers
(``tilec/families/tma.py``) orders the last two, so :func:`check_roles` does not trust the pass:
it evaluates each program's index arithmetic for a K loop of a given trip count (each integer
op by its definition's fold in the op catalogue, as ``hazards.py`` does) into a list of steps,
then interleaves the producer and one copy of the consumer program per warpgroup as the
hardware may, modelling each barrier as the hardware does:

- ``mbar.alloc {count}``: barriers with ``count`` pending arrivals, no transaction bytes and no
  completed phase;
- ``mbar.arrive_expect_tx {bytes}``: one arrival, ``bytes`` more pending; ``tma.load``: its
  box's bytes (``Box.of(op).bytes``) complete on the barrier; ``mbar.arrive``: one arrival per
  warpgroup (each consumer program is one warpgroup). A phase completes when no arrival and
  no byte is pending; the count is then re-armed;
- ``mbar.wait %bar, %i, %parity`` passes once ``phases % 2 != parity`` (try_wait.parity; a fresh
  barrier has phases = 0, so a wait for parity 1 passes at once).

Ordering is tracked with vector clocks: an arrival or a load releases what its program has
seen into the barrier's phase, a wait acquires every phase the barrier has completed, and a
TMA write is known to a program only once it acquired the phase the load completed on. Rules
(each violation raises the caller's ``HazardError``, located, naming both accesses with op,
buffer stage, role, K-loop iteration and source location):

(a) a read of a stage (``wgmma.mma`` after the fragments pass, ``tile.dot`` before) must follow
    every fill of that stage: the load's phase acquired by a wait of the reader (a missing
    ``mbar.wait full``, a wrong parity or stage, a read before any fill);
(b) a fill (``tma.load``, or a generic write) must follow every earlier read of its stage: the
    producer's wait on the empty barrier phase completed by the readers' arrivals after the
    read; and every earlier fill (two fills in flight land in either order);
(c) in the producer's program order, the loads completing on a barrier between one
    ``arrive_expect_tx`` and the barrier's next phase move exactly the expected bytes (too
    many: the phase never completes; too few: it completes before the rest land);
(d) a wait that no remaining op can complete is a deadlock, reported with the barrier's state
    (phases, arrivals of ``count``, bytes pending) and what the other programs wait for; an
    arrival into a phase whose arrivals are all in but whose bytes are not is an error too;
(e) every load must be acquired by some program before the programs end: a block must not
    exit with TMA writing its shared memory;
(f) async-proxy accesses (TMA writes, wgmma reads) of a stage that a generic-proxy op wrote
    (``copy.global_to_shared``, a later epilogue's stores) need the writer's
    ``fence.proxy_async`` after the write and ordered before the access;
(g) a barrier is used only after its ``mbar.alloc`` is published by a ``gpu.barrier``.

Why two schedules suffice. In a sound ring every phase of every barrier receives exactly its
``count`` arrivals before any arrival of its next phase can be issued (each arrival of round
r + 1 waits, through the other barrier, for the phase of round r), so which phase an arrival
joins and which phase a wait acquires are the same in every interleaving: the happens-before
relation is fixed, and one run's vector clocks decide every pair of accesses. Broken protocols
make that assignment depend on timing in two ways, each exposed by one extreme schedule:

1. *consumers ahead* (each consumer runs as far as the barriers let it; the producer only when
   every consumer is blocked): waits happen when the barriers have completed the fewest
   phases, so a wait with the wrong parity or on the wrong stage passes before the fill it
   should follow (a), and a producer that does not wait for the empty phase refills a stage
   the consumers already read (b);
2. *producer ahead, late arrivals* (the producer runs whenever it can; consumers read as early
   and arrive as late as allowed): a phase completed by fewer arrivals than the readers of a
   round (an empty barrier's count too small) lets the producer refill while a reader has read
   and not arrived (b), and a consumer that reads without waiting sees the fill in flight (a).

Both schedules run for every trip count (:func:`trip_counts`); each is a legal interleaving,
so what either finds is real: a wait that blocks forever in one is a possible hang (d). Where
the two disagree (a wrong count races in one and hangs in the other), the race is reported,
since it names the accesses. Byte counts (c) do not depend on timing, so they are read off the
producer's program order, which is also what makes a load's bytes land on the phase its
expect_tx opened whenever they land: loads are counted when issued.

Not claimed: a wait that passes on an earlier phase of its own stage (a constant parity) reads a
fill it already read, which is no race under happens-before; it shows as the refill race, hang or
unwaited load (b, d, e) it leads to. The product op's reads end when it does: with
``in_flight = 1`` a stage's wgmma group runs on past it, until the next product (or
``wgmma.wait``) waits for it, and the pipeline hands that stage back only after that wait; the
checker orders the reads by the product op, so a hand-back moved before that wait is not
caught here (the CPU executor computes each product at once, so it cannot see it either).
A ``gpu.barrier`` after the split is taken as the consumer warpgroups meeting (the producer
warpgroup has exited).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from tilec.analysis.folding import fold, folds_to_scalar
from tilec.errors import TileConfigError, located
from tilec.families.catalogue import op_definitions
from tilec.families.movements import STAGE_WRITERS
from tilec.families.products import FAMILIES, LOAD_OPS, PRODUCT_OPS, family_of
from tilec.families.tma import (ALLOC, ARRIVE, EXPECT, FAMILY as TMA, PRODUCER, WAIT,
                                arrive_peers)
from tilec.families.tma_boxes import LOAD, Box
from tilec.ir.core import Kernel, Op, Value, defining_op
from tilec.ir.types import TileType

FENCE = "fence.proxy_async"  # fence.proxy.async: generic-proxy writes before async-proxy use
READERS = frozenset({*LOAD_OPS, "tile.dot", *PRODUCT_OPS})  # each shared-view operand is read
# Reads through the async proxy: products whose family reads shared memory itself (wgmma).
ASYNC_READERS = frozenset(f.product_op for f in FAMILIES if f.load_op is None)
ASYNC_WRITERS = frozenset({LOAD})
GENERIC_WRITERS = STAGE_WRITERS - ASYNC_WRITERS


def trip_counts(ring: int) -> list[int]:
    """A run of two whole rounds and one more, then every count up to one past the ring."""
    return [2 * ring + 1] + list(range(1, ring + 2))


@dataclass(frozen=True)
class Step:
    """One executed op of a program: ``kind`` is wait, expect, arrive, load, read, write,
    fence, barrier or alloc; barrier ops carry their ``ring`` (the mbar.alloc result) and
    ``index``, shared accesses their ``buffer`` and ``stage``."""

    op: Op
    kind: str
    iteration: Optional[int]
    where: str
    ring: Optional[Value] = None
    index: Optional[int] = None
    parity: Optional[int] = None
    bytes: int = 0
    buffer: Optional[Value] = None
    stage: Optional[int] = None
    async_proxy: bool = False
    arrivals: int = 1  # an arrive's: one per block filling the stage (peers run this program)

    @property
    def bar(self) -> str:
        return f"{_name(self.ring)}[{self.index}]"


def _name(value: Optional[Value]) -> str:
    return (value.hint if value is not None and value.hint else "buffer")


@dataclass(eq=False)
class Access:
    """A step as one program ran it: ``key``/``tick`` place it in the vector clocks (a load's
    write has a key of its own); ``phase``: the phase of its barrier a load completes on."""

    step: Step
    who: str
    key: tuple = ()
    tick: int = 0
    pc: int = -1
    phase: Optional[int] = None
    fenced_by: Optional["Access"] = None

    @property
    def op(self) -> Op:
        return self.step.op

    @property
    def stage(self) -> Optional[int]:
        return self.step.stage

    @property
    def iteration(self) -> Optional[int]:
        return self.step.iteration

    def describe(self) -> str:
        s = self.step
        name = s.op.name
        if s.kind == "load":
            phase = "" if self.phase is None else f" phase {self.phase}"
            what = (f"{name} of {s.op.attrs['tensor']} by {self.who} into {_name(s.buffer)} "
                    f"stage {s.stage} ({s.bytes} bytes, completing on {s.bar}{phase})")
        elif s.kind in ("read", "write"):
            verb = "reading" if s.kind == "read" else "writing"
            what = (f"{name} of {self.who} {verb} {_name(s.buffer)} stage {s.stage}"
                    + ("" if s.async_proxy or s.kind == "read" else " (generic proxy)"))
        elif s.kind == "wait":
            what = f"{name} of {self.who} on {s.bar} for parity {s.parity}"
        elif s.kind == "expect":
            what = f"{name} of {self.who} on {s.bar} ({s.bytes} bytes)"
        elif s.kind == "arrive":
            what = f"{name} of {self.who} on {s.bar}"
        else:
            what = f"{name} of {self.who}"
        at = f", at {s.op.loc}" if s.op.loc is not None else ""
        return f"{what} {s.where}{at}"


def hb(access: Access, clock: dict) -> bool:
    """Whether ``access`` happens before a point that has seen ``clock``."""
    return clock.get(access.key, 0) >= access.tick


def join(into: dict, other: dict) -> None:
    for key, tick in other.items():
        if into.get(key, 0) < tick:
            into[key] = tick


# -- the programs ---------------------------------------------------------------------------

def _tracked(op: Op) -> bool:
    return op.name in (WAIT, EXPECT, LOAD, ARRIVE, FENCE) or op.name in READERS \
        or op.name in GENERIC_WRITERS


def program(kernel: Kernel, ops: list[Op], env: dict, trips: int) -> list[Step]:
    """The steps of ``ops`` with every K loop (a loop holding barrier ops or shared accesses)
    taking ``trips`` iterations; ``env`` holds the values computed so far, updated."""
    builder = _Program(kernel, env, trips)
    builder.run_block(ops)
    return builder.steps


class _Program:
    """The steps one role's ops take, the scalars they compute folded as they go."""

    def __init__(self, kernel: Kernel, env: dict, trips: int) -> None:
        self.kernel = kernel
        self.env = env
        self.trips = trips
        self.catalogue = op_definitions()
        self.async_dot = family_of(kernel.schedule.tiling).load_op is None
        self.steps: list[Step] = []
        self.iteration: Optional[int] = None
        self.where = "before the K loop"
        # The ops that make steps, by name (the shared readers and writers aside).
        self.handlers = {WAIT: self._wait, EXPECT: self._arrival, ARRIVE: self._arrival,
                         LOAD: self._load, ALLOC: self._alloc, FENCE: self._fence,
                         "gpu.barrier": self._fence, "scf.for": self.run_loop}

    def known(self, v: Value, op: Op, what: str) -> int:
        value = self.env.get(v)
        if value is None:
            raise located(TileConfigError, f"{op.name}: {what} cannot be evaluated at compile "
                          "time, so its barrier protocol cannot be checked", op.loc,
                          self.kernel.source_lines)
        return value

    def add(self, op: Op, kind: str, **fields) -> None:
        self.steps.append(Step(op, kind, self.iteration, self.where, **fields))

    def barrier(self, op: Op, ring: Value, index: Value) -> dict:
        i = self.known(index, op, f"the barrier index into {_name(ring)}")
        size = ring.type.shape[0]
        if not 0 <= i < size:
            raise located(TileConfigError, f"{op.name}: barrier {i} of {_name(ring)}, a ring "
                          f"of {size}", op.loc, self.kernel.source_lines)
        return {"ring": ring, "index": i}

    def shared(self, op: Op, view: Value) -> dict:
        stage_op = defining_op(view)
        if stage_op is None or stage_op.name != "smem.stage":
            raise located(TileConfigError, f"{op.name} accesses a shared value that is not a "
                          "stage of a buffer (smem.stage)", op.loc, self.kernel.source_lines)
        return {"buffer": stage_op.operands[0],
                "stage": self.known(stage_op.operands[1], op, "the stage index")}

    def run_block(self, block_ops: list[Op]) -> list:
        """Run the ops; a block ending in ``scf.yield`` returns the yielded values."""
        env = self.env
        for op in block_ops:
            name = op.name
            if name == "scf.yield":
                return [env.get(v) for v in op.operands]
            if name == "arith.wrap_inc":
                a = env.get(op.operands[0])
                env[op.result] = None if a is None else (
                    0 if a + 1 == op.attrs["modulus"] else a + 1)
            elif folds_to_scalar(op, self.catalogue):
                env[op.result] = fold(op, [env.get(v) for v in op.operands], self.catalogue)
            elif name == "tile.grid":
                env.update((r, 0) for r in op.results)  # the first program of the grid
            elif name in self.handlers:
                self.handlers[name](op)
            elif name in READERS or name in GENERIC_WRITERS:
                self._access(op)
        return []

    def _wait(self, op: Op) -> None:
        parity = self.known(op.operands[2], op, "the phase parity")
        if parity not in (0, 1):
            raise located(TileConfigError, f"{op.name} for parity {parity}: a phase "
                          "parity is 0 or 1", op.loc, self.kernel.source_lines)
        self.add(op, "wait", parity=parity, **self.barrier(op, *op.operands[:2]))

    def _arrival(self, op: Op) -> None:
        # A predicated arrival happens only where its predicate holds.
        if op.name == ARRIVE and len(op.operands) > 2 \
                and not self.known(op.operands[2], op, "the arrival's predicate"):
            return
        # A cluster's arrival: this block's warpgroup and, as the peers run the same
        # program, each peer's of its M row and N column on this block's barrier.
        self.add(op, "expect" if op.name == EXPECT else "arrive",
                 bytes=op.attrs.get("bytes", 0), arrivals=1 + len(arrive_peers(op)),
                 **self.barrier(op, *op.operands[:2]))

    def _load(self, op: Op) -> None:
        view = op.operands[3]
        self.add(op, "load", bytes=Box.of(op).bytes(view.type.dtype.bytes), async_proxy=True,
                 **self.barrier(op, *op.operands[4:6]), **self.shared(op, view))

    def _alloc(self, op: Op) -> None:
        self.add(op, "alloc", ring=op.result)

    def _fence(self, op: Op) -> None:
        self.add(op, "fence" if op.name == FENCE else "barrier")

    def _access(self, op: Op) -> None:
        kind = "read" if op.name in READERS else "write"
        is_async = op.name in ASYNC_READERS or (op.name == "tile.dot" and self.async_dot)
        for v in op.operands:
            if isinstance(v.type, TileType) and v.type.space == "smem":
                self.add(op, kind, async_proxy=kind == "read" and is_async,
                         **self.shared(op, v))

    def run_loop(self, loop: Op) -> None:
        """A loop's iterations: a K loop's ``trips`` of them (the outermost one's numbered in
        the steps), any other's as its bounds say."""
        env = self.env
        lb, ub = env.get(loop.operands[0]), env.get(loop.operands[1])
        step = loop.attrs["step_const"]
        lb = 0 if lb is None else lb
        is_k = any(_tracked(op) for op in loop.walk())
        n = self.trips if ub is None or is_k else max(0, -(-(ub - lb) // step))
        if ub is None:
            env[loop.operands[1]] = lb + n * step  # K, as a launch would bind it
        outer = is_k and self.iteration is None
        body = loop.regions[0]
        carried = [env.get(v) for v in loop.operands[3:]]
        for it in range(n):
            if outer:
                self.iteration, self.where = it, f"in K-loop iteration {it}"
            env[body.args[0]] = lb + it * step
            env.update(zip(body.args[1:], carried))
            carried = self.run_block(body.ops)
        env.update(zip(loop.results, carried))
        if outer:
            self.iteration, self.where = None, "after the K loop"


# -- running them together ------------------------------------------------------------------

@dataclass
class _Barrier:
    name: str
    count: int
    alloc: Access
    pending: int
    tx: int = 0
    phases: int = 0
    release: dict = field(default_factory=dict)  # what the current phase's arrivals saw
    completed: dict = field(default_factory=dict)  # what every completed phase released
    last: Optional[Access] = None  # the latest arrival or load on it


@dataclass(eq=False)
class _Proc:
    who: str
    steps: list[Step]
    key: tuple
    consumer: bool = False
    pc: int = 0
    clock: dict = field(default_factory=dict)
    last_wait: dict = field(default_factory=dict)  # (ring, index) -> (Access, phases seen)
    unfenced: list = field(default_factory=list)  # its generic writes since its last fence
    done: list = field(default_factory=list)  # what it ran

    @property
    def next(self) -> Optional[Step]:
        return self.steps[self.pc] if self.pc < len(self.steps) else None


SCHEDULES = ("the consumers running ahead of the producer",
             "the producer running ahead and the consumers arriving late")


class _Run:
    def __init__(self, kernel: Kernel, programs: tuple[list, list, list], trips: int,
                 schedule: str, error: type) -> None:
        self.kernel, self.trips, self.schedule, self.error = kernel, trips, schedule, error
        prologue, producer, consumer = programs
        self.block = _Proc("every thread", prologue, ("block",))
        self.producer = _Proc("the producer", producer, ("producer",))
        self.consumers = [_Proc(f"consumer warpgroup {w}", consumer, ("consumer", w), True)
                          for w in range(kernel.schedule.roles.tile_warpgroups)]
        self.bars: dict[tuple, _Barrier] = {}
        self.fills: dict[tuple, list[Access]] = {}
        self.reads: dict[tuple, list[Access]] = {}
        self.loads: list[Access] = []
        self.published: dict = {}  # the block's clock at its last gpu.barrier

    def fail(self, rule: str, message: str, first: Access, second: Access, hint: str = "",
             more: tuple[Access, ...] = (), at: Optional[Access] = None) -> None:
        shown = dict.fromkeys((first, second, *more))  # an access named once
        lines = "".join(f"\n  {a.describe()}" for a in shown)
        text = (f"{message} (a run of {self.trips} K-loop iterations, {self.schedule})"
                f"{lines}")
        at = at or second
        error = located(self.error, text, at.op.loc, self.kernel.source_lines, hint)
        error.first, error.second, error.rule = first, second, rule
        raise error

    # -- the schedule
    def run(self) -> None:
        while self.block.next is not None:
            if not self.runnable(self.block):
                self.deadlock([self.block])
            self.execute(self.block)
        procs = [self.producer, *self.consumers]
        for proc in procs:
            proc.clock = {**self.published, proc.key: 0}
        while True:
            proc = next((p for p in self.order() if self.runnable(p)), None)
            if proc is None:
                break
            if proc.next.kind == "barrier" and proc.consumer:
                self.meet()
            else:
                self.execute(proc)
        blocked = [p for p in procs if p.next is not None]
        if blocked:
            self.deadlock(blocked)
        self.check_end()

    def order(self) -> list[_Proc]:
        if self.schedule == SCHEDULES[0]:
            return [*self.consumers, self.producer]
        late = [c for c in self.consumers if c.next is not None and c.next.kind == "arrive"]
        return [self.producer, *(c for c in self.consumers if c not in late), *late]

    def runnable(self, proc: _Proc) -> bool:
        step = proc.next
        if step is None:
            return False
        if step.kind == "wait":
            return self.bars[(step.ring, step.index)].phases % 2 != step.parity
        if step.kind == "barrier" and proc.consumer:  # the consumer warpgroups meet
            return all(c.next is not None and c.next.kind == "barrier" for c in self.consumers)
        return True

    def meet(self) -> None:
        clock: dict = {}
        for c in self.consumers:
            self.execute(c)
            join(clock, c.clock)
        for c in self.consumers:
            join(c.clock, clock)

    # -- one step
    def execute(self, proc: _Proc) -> None:
        step = proc.next
        proc.clock[proc.key] = proc.clock.get(proc.key, 0) + 1
        access = Access(step, proc.who, proc.key, proc.clock[proc.key], proc.pc)
        kind = step.kind
        if step.ring is not None and kind != "alloc":
            bar = self.bars[(step.ring, step.index)]
            if not hb(bar.alloc, proc.clock):
                self.fail("g", f"{bar.name} is used before a gpu.barrier publishes its "
                          "initialisation", bar.alloc, access, "put a gpu.barrier between "
                          "mbar.alloc and the barriers' first use")
        if kind == "alloc":
            count = step.op.attrs["count"]
            for i in range(step.ring.type.shape[0]):
                self.bars[(step.ring, i)] = _Barrier(f"{_name(step.ring)}[{i}]", count, access,
                                                     count)
        elif kind == "barrier":
            if proc is self.producer:
                self.fail("d", "a gpu.barrier in the producer region: only its elected thread runs "
                          "it, and the consumers never meet it", access, access)
            if proc is self.block:
                self.published = dict(proc.clock)
        elif kind == "wait":
            join(proc.clock, bar.completed)
            proc.last_wait[(step.ring, step.index)] = (access, bar.phases)
        elif kind in ("expect", "arrive"):
            for _ in range(step.arrivals):
                self.arrive(bar, access, proc.clock, step.bytes)
        elif kind == "load":
            self.load(proc, access, bar)
        elif kind == "read":
            self.read(proc, access)
        elif kind == "write":
            self.fill(proc, access)
            proc.unfenced.append(access)
        elif kind == "fence":
            for write in proc.unfenced:
                write.fenced_by = access
            proc.unfenced = []
        proc.done.append(access)
        proc.pc += 1

    def arrive(self, bar: _Barrier, access: Access, clock: dict, nbytes: int) -> None:
        if bar.pending == 0:
            self.fail("d", f"{bar.name} gets more than its count of {bar.count} arrivals in one "
                      f"phase (its {bar.tx} transaction bytes are still pending)", bar.last,
                      access, "arrive once per phase per arriving party")
        bar.pending -= 1
        bar.tx += nbytes
        join(bar.release, clock)
        bar.last = access
        self.complete(bar)

    def complete(self, bar: _Barrier) -> None:
        if bar.pending == 0 and bar.tx == 0:
            join(bar.completed, bar.release)
            bar.release, bar.pending = {}, bar.count
            bar.phases += 1

    def load(self, proc: _Proc, access: Access, bar: _Barrier) -> None:
        write = Access(access.step, proc.who, ("load", len(self.loads)), 1, access.pc,
                       phase=bar.phases)
        self.fill(proc, write)
        self.loads.append(write)
        clock = {**proc.clock, write.key: 1}
        bar.tx -= access.step.bytes
        join(bar.release, clock)
        bar.last = write
        self.complete(bar)

    # -- the rules
    def fill(self, proc: _Proc, write: Access) -> None:
        """(b) and (f) for a write: every earlier read and fill of its stage is ordered
        before it."""
        step = write.step
        key = (step.buffer, step.stage)
        where = f"{_name(step.buffer)} stage {step.stage}"
        for read in reversed(self.reads.get(key, [])):
            if not hb(read, proc.clock):
                reader = next(p for p in (self.producer, *self.consumers) if p.who == read.who)
                arrive = next((s for s in reader.steps[read.pc + 1:] if s.kind == "arrive"),
                              None)
                after = (f"{read.who} never arrives on a barrier after it" if arrive is None
                         else f"no wait on {arrive.bar} for the phase {read.who}'s arrival "
                         f"after the read ({arrive.where}) completes orders the read before "
                         "the refill")
                self.fail("b", f"{where} is refilled while {read.who} may still be reading it: "
                          f"{after}{self.last_wait_note(proc, arrive)}", read, write,
                          TMA.words.refill_hint)
        for earlier in reversed(self.fills.get(key, [])):
            if not hb(earlier, proc.clock):
                self.fail("b", f"{where} is filled again while its previous fill may still be in "
                          "flight: the two may land in either order", earlier, write,
                          TMA.words.refill_hint)
        if step.kind == "load":
            self.check_fences(proc, write, key)
        self.fills.setdefault(key, []).append(write)

    def read(self, proc: _Proc, read: Access) -> None:
        """(a) and (f) for a read: every fill of its stage is ordered before it."""
        step = read.step
        key = (step.buffer, step.stage)
        where = f"{_name(step.buffer)} stage {step.stage}"
        fills = self.fills.get(key, [])
        if not fills:
            planned = next((Access(s, "the producer") for s in self.producer.steps
                            if s.kind == "load" and (s.buffer, s.stage) == key), None)
            first = planned or Access(Step(defining_op(step.buffer), "alloc", None,
                                           "before the K loop"), "every thread")
            self.fail("a", f"{where} is read before any tma.load fills it: no completed wait on "
                      "its full barrier orders a fill before the read"
                      f"{self.last_wait_note(proc, planned and planned.step)}", first, read,
                      TMA.words.read_hint)
        for fill in reversed(fills):
            if not hb(fill, proc.clock):
                if fill.step.kind == "load":
                    self.fail("a", f"{where} is read before the tma.load that fills it is made "
                              f"visible: no completed wait on {fill.step.bar} for phase "
                              f"{fill.phase} (parity {fill.phase % 2}), the phase the load "
                              "completes on, orders it before the read"
                              f"{self.last_wait_note(proc, fill.step)}", fill, read,
                              TMA.words.read_hint)
                self.fail("a", f"{where} is read while nothing orders {fill.who}'s write of it "
                          "before the read", fill, read, "order the write before the read "
                          "through a barrier")
        if step.async_proxy:
            self.check_fences(proc, read, key)
        self.reads.setdefault(key, []).append(read)

    def check_fences(self, proc: _Proc, access: Access, key: tuple) -> None:
        """(f): a generic-proxy write before an async-proxy access, fenced by its writer."""
        for write in self.fills.get(key, []):
            if write.step.async_proxy or not hb(write, proc.clock):
                continue
            if write.fenced_by is None or not hb(write.fenced_by, proc.clock):
                self.fail("f", f"{_name(write.step.buffer)} stage {write.stage} is written through "
                          f"the generic proxy and then accessed through the async proxy "
                          f"({access.op.name}) with no {FENCE} by the writer ordered between "
                          "them", write, access, f"issue {FENCE} (fence.proxy.async) after "
                          "the generic writes, before the barrier or arrival that orders them "
                          "before the async-proxy access")

    def last_wait_note(self, proc: _Proc, step: Optional[Step]) -> str:
        if step is None or step.ring is None:
            return ""
        seen = proc.last_wait.get((step.ring, step.index))
        if seen is None:
            return f"; {proc.who} has not waited on {step.bar}"
        wait, phases = seen
        return (f"; {proc.who}'s last wait on {step.bar} ({wait.step.where}, parity "
                f"{wait.step.parity}) passed with {phases} phase(s) of it completed")

    def deadlock(self, blocked: list[_Proc]) -> None:
        notes = []
        waits = []
        for proc in blocked:
            step = proc.next
            waits.append(Access(step, proc.who, pc=proc.pc))
            if step.kind == "wait":
                bar = self.bars[(step.ring, step.index)]
                notes.append(f"{proc.who} waits for {bar.name}'s phase {bar.phases} (parity "
                             f"{step.parity}) to complete: {bar.count - bar.pending} of "
                             f"{bar.count} arrivals and {bar.tx} bytes still to land")
            else:
                notes.append(f"{proc.who} waits at a gpu.barrier for the other warpgroups")
        finished = [p for p in (self.producer, *self.consumers) if p.next is None]
        if len(waits) == 1:
            step = waits[0].step
            ring = step.ring
            touched = [a for p in finished for a in p.done
                       if a.step.ring is ring and a.step.index == step.index]
            waits.insert(0, touched[-1] if touched else (
                self.bars[(ring, step.index)].alloc if ring is not None else waits[0]))
        done = f"; {', '.join(p.who for p in finished)} finished" if finished else ""
        self.fail("d", "deadlock: no remaining op can complete these waits ("
                  + "; ".join(notes) + done + ")", waits[0], waits[1],
                  "check the waits' parities and stages and each barrier's count against the "
                  "arrivals of one phase", more=tuple(waits[2:]), at=waits[-1])

    def check_end(self) -> None:
        """(e): every load acquired by some program before the programs end."""
        procs = (self.producer, *self.consumers)
        for load in self.loads:
            if not any(hb(load, p.clock) for p in procs):
                waits = [a for p in self.consumers for a in p.done
                         if a.step.kind == "wait" and a.step.ring is load.step.ring]
                last = (waits or [a for p in self.consumers for a in p.done] or [load])[-1]
                self.fail("e", f"the block can finish with the tma.load into "
                          f"{_name(load.step.buffer)} stage {load.stage} in flight: no wait on "
                          f"{load.step.bar} for phase {load.phase} acquires it",
                          load, last, TMA.words.end_hint)


def check_transactions(kernel: Kernel, steps: list[Step], error: type) -> None:
    """(c): per barrier, in the producer's program order, the loads completing in the phase an
    expect_tx opens move the expected bytes."""
    phases: dict[tuple, dict] = {}

    def close(group: dict) -> None:
        expected = sum(s.bytes for s in group["expects"])
        moved = sum(s.bytes for s in group["loads"])
        if group["loads"] and expected != moved:
            expect, loads = group["expects"][0], group["loads"]
            effect = ("the phase never completes" if expected > moved else
                      f"the phase completes before the last {moved - expected} bytes land, "
                      "which a consumer may then read in flight and the next phase counts")
            accesses = [Access(s, "the producer") for s in (expect, *loads)]
            text = (f"{expect.bar} expects {expected} transaction bytes in the phase its "
                    f"{EXPECT} opens, but the tma.loads completing on it move {moved}: "
                    f"{effect}" + "".join(f"\n  {a.describe()}" for a in accesses))
            err = located(error, text, expect.op.loc, kernel.source_lines,
                          "expect the bytes of every box the phase's loads move")
            err.first, err.second, err.rule = accesses[0], accesses[-1], "c"
            raise err

    for step in steps:
        key = (step.ring, step.index)
        group = phases.get(key)
        if step.kind in ("expect", "arrive"):
            count = defining_op(step.ring).attrs["count"]
            if group is not None and group["arrivals"] == count:
                close(group)
                group = None
            if group is None:
                group = phases[key] = {"expects": [], "loads": [], "arrivals": 0}
            group["arrivals"] += step.arrivals
            if step.kind == "expect":
                group["expects"].append(step)
        elif step.kind == "load":
            if group is None or not group["expects"]:
                load = Access(step, "the producer")
                err = located(error, f"{step.bar} gets the bytes of a tma.load in a phase no "
                              f"{EXPECT} opened before it\n  {load.describe()}", step.op.loc,
                              kernel.source_lines, f"issue {EXPECT} before the phase's loads")
                err.first = err.second = load
                err.rule = "c"
                raise err
            group["loads"].append(step)
    for group in phases.values():
        close(group)


def programs(kernel: Kernel, trips: int) -> tuple[list[Step], list[Step], list[Step]]:
    """The steps of every thread's prologue, the producer region and the consumers' program."""
    top = kernel.body.ops
    split = next((i for i, op in enumerate(top) if op.name == PRODUCER), None)
    if split is None:
        raise located(TileConfigError, "the schedule has roles but no ws.producer region",
                      None, kernel.source_lines)
    env: dict = {}
    prologue = program(kernel, top[:split], env, trips)
    producer = program(kernel, top[split].regions[0].ops, dict(env), trips)
    consumer = program(kernel, top[split + 1:], dict(env), trips)
    return prologue, producer, consumer


def check_roles(kernel: Kernel, trip_count: Optional[int] = None,
                error: type = TileConfigError) -> None:
    """Run the warp-specialized schedule for ``trip_count`` K-loop iterations (default:
    :func:`trip_counts` of the ring) under both schedules, raising ``error`` (hazards.py
    passes its HazardError: this module sits below it) on the first violation."""
    counts = [trip_count] if trip_count is not None else trip_counts(kernel.schedule.roles.ring)
    for trips in counts:
        steps = programs(kernel, trips)
        check_transactions(kernel, steps[1], error)
        found = []
        for schedule in SCHEDULES:
            try:
                _Run(kernel, steps, trips, schedule, error).run()
            except error as err:
                found.append(err)
        if found:  # a race says more than a hang it leads to in the other schedule
            raise min(found, key=lambda err: err.rule == "d")
