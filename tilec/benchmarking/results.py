"""What a run produces: a measurement per contender and case, the reference figures, and
the report the table, the JSON and the plot are written from."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from tilec.benchmarking.cases import Case


@dataclass
class Measurement:
    """One contender on one case. ``status``: ok, FAIL (its check failed), n/a, error."""

    status: str
    ms: Optional[float] = None
    error: Optional[float] = None  # relative Frobenius error against float64
    tolerance: Optional[float] = None
    config: str = ""
    note: str = ""


@dataclass
class CaseResult:
    case: Case
    sets: int
    measurements: dict[str, Measurement]  # by contender name, in the contenders' order
    memory_bound_ms: Optional[float] = None  # tilec's bytes over the copy rate
    bound_bytes: int = 0  # what tilec moves at least: A, B and C in the dtype it writes
    compute_bound_ms: Optional[float] = None  # the flops over the mma.sync ceiling
    seconds: float = 0.0

    def timed_ms(self, name: str) -> Optional[float]:
        """The contender's median time, when it passed its check and was timed."""
        measured = self.measurements.get(name)
        if measured is None or measured.status != "ok" or not measured.ms:
            return None
        return measured.ms

    def tflops(self, name: str) -> Optional[float]:
        ms = self.timed_ms(name)
        return None if ms is None else self.case.flops / ms / 1e9

    def ratio(self, name: str, other: str) -> Optional[float]:
        mine, theirs = self.tflops(name), self.tflops(other)
        return mine / theirs if mine is not None and theirs else None

    def bound(self) -> Optional[tuple[float, str]]:
        """The roofline floor (ms, "mma" or "mem"): the larger of the two bounds."""
        if self.memory_bound_ms is None or self.compute_bound_ms is None:
            return None
        if self.memory_bound_ms > self.compute_bound_ms:
            return self.memory_bound_ms, "mem"
        return self.compute_bound_ms, "mma"

    def fraction_of_bound(self, name: str = "tilec") -> Optional[float]:
        ms, bound = self.timed_ms(name), self.bound()
        if ms is None or bound is None:
            return None
        return bound[0] / ms


@dataclass
class References:
    copy_gbps: Optional[float]  # device-to-device copy, bytes read + written: GB/s
    copy_bytes: int  # the size of the buffer copied
    mma_tflops: dict[str, float]  # the mma.sync ceiling by operand dtype
    mma_launch: str
    problems: list[str] = field(default_factory=list)  # figures that could not be measured


@dataclass
class Report:
    device: dict[str, Any]
    software: dict[str, Any]
    references: Optional[References]
    contenders: list[str]
    rows: list[CaseResult] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        if self.references is not None and self.references.problems:
            return False
        return all(m.status in ("ok", "n/a") for row in self.rows
                   for m in row.measurements.values())


def first_line(err: BaseException) -> str:
    """An exception as one line for a note or a problem: its type and its message's first."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
