"""The data-movement family: one module per way of moving tiles from global into shared
memory and of learning that they have landed (cp.async groups today; TMA + mbarrier next).

A family owns, in one file:

- its IR ops (:attr:`MovementFamily.ops`), and the op names a software pipeline is built
  from (:attr:`MovementFamily.pipeline`, read by ``passes/double_buffer.py``);
- the hazard rules the race checker simulates for them (``tilec/analysis/hazards.py`` keeps
  the generic machinery: running the schedule, shared reads, CTA barriers, and the checks
  on every buffer stage): which of its ops fill a stage (:attr:`stage_writers`), the events
  they record (:meth:`trace_op`), whether a fill is complete when issued
  (:meth:`completes_on_issue`), which events complete earlier fills (:meth:`observe`), and
  the words the checker's messages use for them (:attr:`words`, :meth:`describe`);
- its PTX emitters (:meth:`emitters`, which the backend's op table takes in);
- the kernel parameters it adds after the shape symbols (:meth:`kernel_params`: a TMA
  tensor map is a 128-byte blob passed by value, ``backend/abi.py``);
- its ops' definitions with their CPU semantics (:meth:`op_defs`, joined into the op
  catalogue), which keep the family's writes in flight as its own state on the executor's
  block state, and what a CTA barrier (``gpu.barrier``, generic in
  ``tilec/cpu/executor.py``) makes visible of them (:meth:`visible_at_barrier`).

Families are listed in one registry, :data:`tilec.families.movements.MOVEMENT_FAMILIES`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol

from tilec.ir.core import Kernel, Op, Value
from tilec.ir.ops import OpDef

if TYPE_CHECKING:
    from tilec.backend.abi import AbiParam
    from tilec.cpu.executor import SharedWrite
    from tilec.backend.context import Context

Emitter = Callable[["Context", Op], None]


@dataclass(frozen=True)
class PipelineOps:
    """The ops an N-stage software pipeline is made of (``passes/double_buffer.py``): fill
    a stage, close the fills issued so far into one unit of completion, and wait until at
    most ``pending`` units are still in flight."""

    copy: str
    commit: str
    wait: str


@dataclass(frozen=True)
class CompletionWords:
    """How the race checker's messages name a family's completion mechanism."""

    completer: str  # the op that completes fills, e.g. "copy.wait"
    not_covered: str  # why a read of a fill in flight races
    read_hint: str  # what to do about it
    refill_hint: str  # what to do about a second fill of a stage with the first in flight
    end_hint: str  # what to do about a fill still in flight when the kernel ends


class Event(Protocol):
    """What the hooks read of one event the race checker recorded (its ``Event`` in
    ``tilec/analysis/hazards.py``, which sits above the families and has these fields)."""

    op: Op
    stage: Optional[int]  # the buffer stage a shared access touches
    group: Optional[int]  # a copy's commit group: the number of commits before it
    pending: Optional[int]  # a wait's pending count
    commits_before: int

    @property
    def buffer_name(self) -> str: ...


class Tracer(Protocol):
    """What :meth:`MovementFamily.trace_op` may use of the simulated run."""

    state: dict[str, Any]  # counters kept across the run ("commits": groups closed so far)

    def value(self, v: Value) -> Optional[int]: ...

    def stage_of(self, view: Value, op: Op) -> tuple[Value, int]: ...

    def record(self, op: Op, **fields: Any) -> None: ...


class Completions(Protocol):
    """What :meth:`MovementFamily.observe` may do to the checker's fills in flight."""

    def complete_writes(self, done: Callable[[Event], bool], by: Event) -> None: ...


class MovementFamily(ABC):
    """One data-movement family; subclasses provide every hook (a test checks it)."""

    name: str
    ops: frozenset[str]  # the IR op names it owns (and emits)
    pipeline: PipelineOps
    stage_writers: frozenset[str]  # its ops that fill a shared buffer stage
    words: CompletionWords

    @abstractmethod
    def emitters(self) -> Mapping[str, Emitter]:
        """The PTX emitter of each of :attr:`ops`."""

    @abstractmethod
    def pipelined_copy_attrs(self, copy: Op) -> dict[str, Any]:
        """The attributes a synchronous copy of tiling's output takes once it fills a stage
        of this family's pipeline (e.g. which copies may go asynchronous)."""

    @abstractmethod
    def trace_op(self, op: Op, tracer: Tracer) -> None:
        """Record the hazard events of one of :attr:`ops` as the schedule executes it."""

    @abstractmethod
    def completes_on_issue(self, op: Op) -> bool:
        """Whether a stage fill is complete (for its own thread) when it is issued."""

    @abstractmethod
    def observe(self, event: Event, checker: Completions) -> None:
        """Apply a non-writing event of this family to the fills in flight."""

    @abstractmethod
    def describe(self, event: Event) -> Optional[str]:
        """The event in words for a hazard message; None for the generic wording."""

    @abstractmethod
    def op_defs(self) -> tuple[OpDef, ...]:
        """The definitions of :attr:`ops` (type rule, traits) with their CPU semantics
        (``evaluate``). These keep the family's writes in flight as its state in the thread
        block: ``tilec.cpu.executor.block_state(state).movement_state(self, new)``."""

    @abstractmethod
    def visible_at_barrier(self, state: Any) -> list["SharedWrite"]:
        """The writes a CTA barrier (``gpu.barrier``, bar.sync) makes visible to the whole
        block, taken out of the family's block ``state``: those complete for the threads
        that issued them (a synchronous copy; an async one its wait has completed)."""

    def store_emitters(self) -> Mapping[str, Emitter]:
        """Emitters of ``tile.store`` ops a pass routed through this family, by their
        ``via`` attribute (the TMA store: ``{"tma": ...}``); none by default."""
        return {}

    @abstractmethod
    def kernel_params(self, kernel: Kernel) -> tuple["AbiParam", ...]:
        """The parameters a kernel using this family takes after its shape symbols."""
