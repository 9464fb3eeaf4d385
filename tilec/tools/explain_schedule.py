"""``tilec explain``'s pipeline schedule: the ops of a simulated run, each loop row's stage
index read off every iteration as a function of ``it`` (``sA[(it+2)%3]``), for the cp.async
pipelines (the hazard checker's trace, :mod:`tilec.analysis.hazards`) and for the
warp-specialized ones (the producer's and consumers' programs, :mod:`tilec.analysis.mbarriers`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from tilec.analysis.hazards import Event, Trace, simulate
from tilec.analysis.mbarriers import Step, programs
from tilec.families.products import LOAD_OPS, PRODUCT_OPS, family_named
from tilec.ir.core import Kernel, Op, Value, defining_op
from tilec.target.layout import DistributedLayout

# The fragment load of an 8-bit operand converted to a 16-bit product (frag.ldbytes).
BYTE_PAIR_READ = "ld.shared.u16"


@dataclass(frozen=True)
class ScheduleRow:
    """One op of the schedule: ``phase`` is "prologue", "loop" or "after"; ``target`` the
    buffer stage it touches (``sA[(it+2)%3]``) or ""; ``detail`` what it does."""

    phase: str
    op: str
    target: str
    detail: str


@dataclass(frozen=True)
class Schedule:
    stages: int
    pipeline_fragments: bool  # the next iteration's first fragments load in this one
    rows: tuple[ScheduleRow, ...]
    carried: tuple[str, ...]  # fragments the K loop carries from one iteration to the next


def schedule(kernel: Kernel, stages: int, pipeline_fragments: bool) -> Schedule:
    """The schedule as one simulated run shows it; loop rows come from every iteration of a
    run long enough to see each stage twice, so their stage indices are read off as
    functions of ``it`` rather than assumed."""
    trips = 2 * stages + 2
    if kernel.schedule.roles is not None:
        return _roles_schedule(kernel, stages, trips)
    trace = simulate(kernel, trips)
    loop = trace.loop
    lower = 0
    if loop is not None:
        lower = trace.values.get(loop.operands[0]) or 0
    step = loop.attrs["step_const"] if loop is not None else 1
    k_end = "the slice's end" if kernel.schedule.splits > 1 else "K"
    copy_k = {e.position: _k_iteration(e, lower, step) for e in trace.events if e.is_write}
    by_op: dict[Op, list[Event]] = {}
    for event in trace.events:
        by_op.setdefault(event.op, []).append(event)
    rows: list[ScheduleRow] = []
    seen: set[Op] = set()
    for event in trace.events:
        if event.phase == "loop":
            if event.op in seen:
                continue
            seen.add(event.op)
            events = [e for e in by_op[event.op] if e.phase == "loop"]
        else:
            events = [event]
        rows.append(_row(event.phase, events, trace, copy_k, stages, loop, k_end))
    carried = ()
    if loop is not None:
        carried = tuple(f"{arg.hint} = {_fragment_source(arg, loop)}"
                        for arg in loop.regions[0].args[1:] if _is_operand_fragment(arg))
    return Schedule(stages, pipeline_fragments, tuple(rows), carried)


def _roles_schedule(kernel: Kernel, stages: int, trips: int) -> Schedule:
    """A warp-specialized kernel's schedule as the mbarrier checker runs it
    (:mod:`tilec.analysis.mbarriers`): every thread's prologue, then the producer's and the
    consumers' K loops, each op's barrier, stages and parity read off every iteration."""
    rows: list[ScheduleRow] = []
    for role, steps in zip(("", "producer ", "consumers "), programs(kernel, trips)):
        by_op: dict[tuple, list[Step]] = {}
        for step in steps:
            phase = ("loop" if step.iteration is not None else
                     "prologue" if step.where.startswith("before") else "after")
            by_op.setdefault((phase, step.op), []).append(step)
        for (phase, op), group in by_op.items():
            rows.append(_roles_row(phase, role, group, stages))
    return Schedule(stages, False, tuple(rows), ())


def _roles_row(phase: str, role: str, group: list[Step], stages: int) -> ScheduleRow:
    s = group[0]
    views = dict.fromkeys(g.buffer for g in group if g.buffer is not None)
    target = ", ".join(f"{b.hint}[{_of_it([g.stage for g in group if g.buffer is b], stages)}]"
                       for b in views)
    bar = ("" if s.ring is None else
           f"{s.ring.hint}[{_of_it([g.index for g in group], stages)}]")
    if s.kind == "wait":
        parities = [g.parity for g in group]
        rounds = [(it // stages) % 2 for it in range(len(group))]
        parity = (f"(it/{stages})%2" if parities == rounds else f"1-(it/{stages})%2"
                  if parities == [1 - r for r in rounds] else _of_it(parities))
        return ScheduleRow(phase, role + "wait", bar, f"parity {parity}: until that phase "
                           "of the barrier has completed")
    if s.kind == "expect":
        return ScheduleRow(phase, role + "expect_tx", bar, f"one arrival, {s.bytes} "
                           "transaction bytes expected")
    if s.kind == "arrive":
        if s.arrivals > 1:
            return ScheduleRow(phase, role + "arrive", bar, "one arrival per consumer "
                               f"warpgroup on this barrier of each of the {s.arrivals} blocks "
                               "of the cluster: the stage is free again in all of them")
        return ScheduleRow(phase, role + "arrive", bar, "one arrival per consumer "
                           "warpgroup: the stage is free again")
    if s.kind == "load":
        blocks = s.op.attrs.get("multicast", 1)
        shared = (f"; this block loads 1/{blocks} of its rows and multicasts them to the "
                  f"{blocks} blocks of the cluster" if blocks > 1 else "")
        return ScheduleRow(phase, role + "tma.load", target, f"{s.op.attrs['tensor']} tile "
                           f"({s.bytes} B), completing on {bar}{shared}")
    if s.kind == "alloc":
        return ScheduleRow(phase, "mbar.alloc", s.ring.hint, f"{s.ring.type.shape[0]} "
                           f"barriers of {s.op.attrs['count']} arrival(s) a phase")
    if s.kind == "barrier":
        return ScheduleRow(phase, role + "barrier", "", "bar.sync 0: every thread of the block")
    return ScheduleRow(phase, role + s.op.name, target, "reads the stages in shared memory"
                       if s.kind == "read" else s.kind)


def _is_operand_fragment(value: Value) -> bool:
    layout = getattr(value.type, "layout", None)
    return isinstance(layout, DistributedLayout) and layout.operand in ("A", "B")


def _k_iteration(event: Event, lower: int, step: int) -> Optional[int]:
    """Which K iteration's tile a copy moves: its K offset (A's column, B's row) in steps."""
    role = defining_op(event.buffer).attrs["role"]
    k = event.offsets[1 if role == "A" else 0] if len(event.offsets) == 2 else None
    return None if k is None else (k - lower) // step


def _of_it(values: Sequence[Optional[int]], stages: Optional[int] = None) -> str:
    """Per-iteration values as an expression of ``it``: a constant, ``it+c``, or with
    ``stages`` the circular index ``(it+c)%S``."""
    if not values or any(v is None for v in values):
        return "?"
    if len(set(values)) == 1:
        return str(values[0])
    offset = values[0]
    if all(v == it + offset for it, v in enumerate(values)):
        return "it" if offset == 0 else f"it{offset:+d}"
    if stages:
        for c in range(stages):
            if all(v == (it + c) % stages for it, v in enumerate(values)):
                return f"it%{stages}" if c == 0 else f"(it+{c})%{stages}"
    return ",".join(str(v) for v in values[:8]) + ",..."


def _row(phase: str, events: list[Event], trace: Trace, copy_k: dict[int, Optional[int]],
         stages: int, loop: Optional[Op], k_end: str = "K") -> ScheduleRow:
    op = events[0].op
    name = op.name
    target = ""
    if events[0].buffer is not None:
        target = f"{events[0].buffer_name}[{_of_it([e.stage for e in events], stages)}]"
    if name == "copy.global_to_shared":
        role = defining_op(events[0].buffer).attrs["role"]
        k_it = _of_it([copy_k[e.position] for e in events])
        rank = op.operands[0].type.rank
        guard = f", only while k < {k_end}" if len(op.operands) > 2 + rank else ""
        short = "cp.async" if op.attrs["mode"] == "async" else "ld+st.shared"
        return ScheduleRow(phase, short, target, f"{role} tile of k-iteration {k_it}{guard}")
    if name == "copy.commit":
        groups = [e.commits_before for e in events]
        contents = [_group_k(trace, copy_k, g) for g in groups]
        if all(c is None for c in contents):
            return ScheduleRow(phase, "commit", "", "closes an empty group")
        return ScheduleRow(phase, "commit", "",
                           f"closes the group of k-iteration {_of_it(contents)}")
    if name == "copy.wait":
        pending = events[0].pending
        done = [_last_complete_k(trace, copy_k, e) for e in events]
        if all(e.commits_before - e.pending <= 0 for e in events):
            what = "nothing complete yet"
        elif pending == 0:
            what = "every copy issued so far complete"
        else:
            what = f"copies of k-iterations <= {_of_it(done)} complete"
        return ScheduleRow(phase, "wait", "", f"pending <= {pending}: {what}")
    if name == "gpu.barrier":
        return ScheduleRow(phase, "barrier", "", "bar.sync 0: every thread of the block")
    if name in LOAD_OPS:
        family = family_named(op.result.type.layout.kind)
        row = BYTE_PAIR_READ if name == family.byte_load_op else family.explain_text.load_row
        detail = f"{op.attrs['operand']} k0={op.attrs['k0']}"
        if loop is not None and phase == "loop" and op.result in loop.regions[0].ops[-1].operands:
            detail += ", carried into the next iteration"
        elif loop is not None and phase == "prologue" and op.result in loop.operands:
            detail += ", carried into iteration 0"
        return ScheduleRow(phase, row, target, detail)
    if name in PRODUCT_OPS:
        layout = op.result.type.layout
        family = family_named(layout.kind)
        text = family.explain_text
        sources = [_fragment_source(value, loop) for value in op.operands[:2]]
        return ScheduleRow(phase, text.product_row, "",
                           f"{', '.join(sources)}: {family.products_per_k_step(layout)} "
                           f"{text.product} per {text.issuer}")
    return ScheduleRow(phase, name, target, "")


def _fragment_source(value: Value, loop: Optional[Op]) -> str:
    """``A k0=16`` for a fragment a fragment load (ldmatrix, lds) loads; ``A k0=0 (carried)``
    for one the loop carries, named by the load that loads it in the previous iteration."""
    producer = defining_op(value)
    if producer is not None and producer.name == "frag.cvt":  # converted after its load
        return _fragment_source(producer.operands[0], loop) + " converted"
    if producer is not None and producer.name in LOAD_OPS:
        return f"{producer.attrs['operand']} k0={producer.attrs['k0']}"
    if loop is not None and value in loop.regions[0].args:
        index = loop.regions[0].args.index(value) - 1
        carried = defining_op(loop.regions[0].ops[-1].operands[index])
        if carried is not None and carried.name in LOAD_OPS:
            return f"{carried.attrs['operand']} k0={carried.attrs['k0']} (carried)"
    return value.hint


def _group_k(trace: Trace, copy_k: dict[int, Optional[int]], group: int) -> Optional[int]:
    ks = [copy_k[e.position] for e in trace.events if e.is_write and e.group == group]
    return max((k for k in ks if k is not None), default=None)


def _last_complete_k(trace: Trace, copy_k: dict[int, Optional[int]],
                     wait: Event) -> Optional[int]:
    done_below = wait.commits_before - wait.pending
    ks = [copy_k[e.position] for e in trace.events
          if e.is_write and e.group is not None and e.group < done_below]
    return max((k for k in ks if k is not None), default=None)
