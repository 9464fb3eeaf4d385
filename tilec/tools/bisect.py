"""Bisecting a wrong result to the pass that introduced it.

:func:`bisect` lowers a tile function, runs the pipeline keeping the IR after every pass, and
runs each stage on the CPU on the same random inputs (outputs start as NaN, so an element no
one writes shows up): the frontend's IR in the interpreter, the later stages in the reference
executor (:mod:`tilec.cpu.executor`), which follows what the GPU does with shared memory, cp.async
groups, ldmatrix and mma fragments. The frontend's run is checked against the float64
whole-tensor reference (:mod:`tilec.cpu.reference`) where that understands the program; each
later stage is checked against the frontend's run. The first stage that differs beyond the
tolerance, or fails to compile or run, is the pass to look at::

    tilec bisect samples/matmul.py --shape M=40,N=48,K=40 --const BM=32,BN=32,BK=16

Error measure: ``max |out - ref| / max |ref|`` over the written tensors, against the
tolerance ``tilec run`` uses for the tensors' dtypes (f16 2e-3, bf16 1e-2). A NaN where the
reference has a number is an infinite error.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from tilec.cpu import executor  # noqa: F401  (gives the lowered ops their semantics)
from tilec.errors import TileError
from tilec.cpu.interpreter import run_kernel
from tilec.ir.core import Kernel
from tilec.ir.ops import IRError
from tilec.ir.printer import print_kernel
from tilec.ir.types import BF16, F16, F32, I32, DType, ScalarType, TensorType
from tilec.ir.verifier import verify
from tilec.kernel import TileFunction, written_params
from tilec.options import Options, Spec
from tilec.pipeline import Pass, pipeline, run_pipeline
from tilec.runtime.arrays import from_bf16_bits, to_bf16_bits

__all__ = ["bisect", "BisectReport", "StageResult", "make_inputs", "launch_options", "main"]

FRONTEND_STAGE = "tile"


@dataclass
class StageResult:
    """One stage's run: ``stage`` is ``"tile"`` (the frontend's IR) or a pass name."""

    stage: str
    ir: str  # the stage's IR text; empty when the pass itself failed
    compared_with: str
    max_abs_error: float = float("nan")
    max_error: float = float("nan")  # max |out - ref| / max |ref|
    ok: bool = False
    failure: str = ""  # why the stage did not compile or run
    note: str = ""  # what else is worth knowing (verifier complaints, no float64 reference)

    @property
    def verdict(self) -> str:
        if self.failure:
            return "FAILED"
        return "ok" if self.ok else "DIFFERS"


@dataclass
class BisectReport:
    kernel: str
    shapes: dict[str, int]
    seed: int
    tolerance: float
    stages: list[StageResult] = field(default_factory=list)

    @property
    def first_bad(self) -> Optional[StageResult]:
        return next((s for s in self.stages if not s.ok), None)

    @property
    def last_good(self) -> Optional[StageResult]:
        """The stage just before the first bad one: the IR to compare it with."""
        bad = self.first_bad
        if bad is None:
            return self.stages[-1] if self.stages else None
        index = self.stages.index(bad)
        return self.stages[index - 1] if index > 0 else None

    def write_dumps(self, directory: Union[str, Path]) -> dict[str, Path]:
        """Write each stage's IR to ``directory``; returns the path of each stage's file."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths = {}
        for index, stage in enumerate(self.stages):
            if stage.ir:
                path = directory / f"{self.kernel}.{index}-{stage.stage}.ir"
                path.write_text(stage.ir, encoding="utf-8")
                paths[stage.stage] = path
        return paths

    def table(self) -> str:
        rows = [("stage", "compared with", "max abs err", "max error", "verdict")]
        for s in self.stages:
            rows.append((s.stage, s.compared_with, _number(s.max_abs_error),
                         _number(s.max_error), s.verdict))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                 for row in rows]
        for s in self.stages:
            for label, text in (("failed", s.failure), ("note", s.note)):
                if text:
                    lines.append(f"{s.stage}: {label}: {text}")
        return "\n".join(lines)


def _number(value: float) -> str:
    return "-" if np.isnan(value) else f"{value:.3g}"


# ----------------------------------------------------------------------------------------
# inputs and comparisons

def _loaded_params(kernel: Kernel) -> set[str]:
    views = {op.result: op.operands[0] for op in kernel.walk() if op.name == "tensor.transpose"}
    loaded = {op.operands[0] for op in kernel.walk() if op.name == "tile.load"}
    loaded |= {views[v] for v in list(loaded) if v in views}
    return {p.name for p, v in zip(kernel.params, kernel.body.args) if v in loaded}


def make_inputs(kernel: Kernel, shapes: dict[str, int], rng: np.random.Generator
                ) -> tuple[dict[str, np.ndarray], dict[str, Union[int, float]]]:
    """Random arguments for the frontend's ``kernel``: standard normal tensors for what it
    reads, NaN for what it only writes; f32 scalars in [0.5, 1.5), i32 scalars 1. bf16
    tensors are uint16 arrays of bf16 bits, as the interpreter takes them."""
    missing = [s for s in kernel.symbols if s not in shapes]
    if missing:
        raise ValueError(f"no size for shape symbol(s) {', '.join(missing)}")
    written, loaded = set(written_params(kernel)), _loaded_params(kernel)
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, Union[int, float]] = {}
    for param in kernel.params:
        if isinstance(param.type, ScalarType):
            if param.type.dtype == I32:
                scalars[param.name] = 1
            else:  # f16-representable, so exact in every float type
                scalars[param.name] = float(np.float16(rng.uniform(0.5, 1.5)))
            continue
        shape = tuple(shapes[d] if isinstance(d, str) else d for d in param.type.shape)
        if param.name in written and param.name not in loaded:
            values = np.full(shape, np.nan, dtype=np.float32)
        else:
            values = rng.standard_normal(shape, dtype=np.float32)
        arrays[param.name] = _as_dtype(values, param.type.dtype)
    return arrays, scalars


def _as_dtype(values: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype == BF16:
        return to_bf16_bits(values)
    return values.astype({F16: np.float16, F32: np.float32}[dtype])


def _float64(array: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype == BF16:
        return from_bf16_bits(array).astype(np.float64)
    return np.asarray(array, dtype=np.float64)


def _errors(out: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> tuple[float, float]:
    """(max abs error, max abs error / max |ref|) over the tensors of ``ref``; NaN in both
    (an element no one writes, in both runs) agrees, NaN in one is an infinite error."""
    worst, scale = 0.0, 0.0
    for name, expected in ref.items():
        got = out[name]
        both_nan = np.isnan(got) & np.isnan(expected)
        with np.errstate(invalid="ignore"):
            diff = np.where(both_nan, 0.0, np.abs(got - expected))
        diff = np.where(np.isnan(diff), np.inf, diff)
        if diff.size:
            worst = max(worst, float(diff.max()))
        finite = np.abs(expected[np.isfinite(expected)])
        if finite.size:
            scale = max(scale, float(finite.max()))
    return worst, worst / scale if scale > 0 else worst


def _tolerance(kernel: Kernel) -> float:
    from tilec.cli import TOLERANCE  # one rule for `tilec run` and `tilec bisect`
    dtypes = [p.type.dtype for p in kernel.params if isinstance(p.type, TensorType)]
    return max((TOLERANCE.get(d, TOLERANCE[F16]) for d in dtypes), default=TOLERANCE[F16])


def launch_options(shapes: dict[str, int], **option_args: Any) -> Options:
    """Options as ``TileFunction.compile`` makes them for these sizes: the symbols' largest
    power-of-two divisors go into the spec, so edge masks are dropped where a launch of
    these sizes would drop them."""
    from tilec.launch.binding import divisibility
    return Options(**option_args, spec=Spec(divisible=divisibility(shapes)))


# ----------------------------------------------------------------------------------------
# bisecting

def _run(kernel: Kernel, arrays: dict[str, np.ndarray], scalars: dict[str, Any],
         written: list[str]) -> dict[str, np.ndarray]:
    values = {**{name: array.copy() for name, array in arrays.items()}, **scalars}
    run_kernel(kernel, values)
    dtypes = {p.name: p.type.dtype for p in kernel.params}
    return {name: _float64(values[name], dtypes[name]) for name in written}


def _stages(kernel: Kernel, options: Options, passes: Optional[Sequence[Pass]]
            ) -> tuple[list[tuple[str, Kernel, str]], Optional[tuple[str, str]]]:
    """The IR after each pass as (name, kernel, text), and (pass, message) for a pass that
    failed (raised, or broke the IR when ``options.verify``)."""
    kept: list[tuple[str, Kernel]] = []
    running: list[str] = []

    def keep(p: Pass) -> Pass:
        def run(k: Kernel, o: Options) -> Kernel:
            running.append(p.name)
            out = p.run(k, o)
            kept.append((p.name, out))
            return out
        return Pass(p.name, run, p.requires, p.doc)

    failed = None
    chosen = list(pipeline() if passes is None else passes)
    try:
        run_pipeline(kernel, options, [keep(p) for p in chosen])
    except Exception as err:  # noqa: BLE001 - a broken pass may fail in any way
        if not running:  # the pass list itself is wrong (disable names...): not a stage
            raise
        failed = (running[-1], f"{type(err).__name__}: {err}")
        kept = [(name, k) for name, k in kept if name != running[-1]]
    return [(name, k, print_kernel(k)) for name, k in kept], failed


def bisect(function: Union[TileFunction, Kernel], consts: Optional[dict[str, Any]] = None,
           options: Optional[Options] = None, shapes: Optional[dict[str, int]] = None,
           seed: int = 0, passes: Optional[Sequence[Pass]] = None) -> BisectReport:
    """Run every stage of ``function`` (compiled with ``consts`` and ``options``; default:
    :func:`launch_options` for ``shapes``) on the same inputs and find the first one whose
    outputs are wrong. ``passes`` replaces the pipeline (a pass list with a planted bug, a
    user's pass). ``shapes`` binds every shape symbol."""
    if isinstance(function, Kernel):
        if consts:
            raise ValueError("consts are folded when a tile function is lowered; pass the "
                             "TileFunction, not a Kernel")
        kernel = function
    else:
        kernel = function.lower(**(consts or {}))
    shapes = dict(shapes or {})
    options = options if options is not None else launch_options(shapes)
    arrays, scalars = make_inputs(kernel, shapes, np.random.default_rng(seed))
    written = written_params(kernel)
    report = BisectReport(kernel.name, shapes, seed, _tolerance(kernel))

    frontend = StageResult(FRONTEND_STAGE, print_kernel(kernel), "float64 reference")
    report.stages.append(frontend)
    try:
        expected = _run(kernel, arrays, scalars, written)
    except Exception as err:  # noqa: BLE001 - a bisect reports every failure as a stage
        frontend.failure = f"{type(err).__name__}: {err}"
        return report
    _check_frontend(frontend, kernel, arrays, scalars, expected, report.tolerance)

    stages, failed = _stages(kernel, options, passes)
    for name, stage_kernel, text in stages:
        result = StageResult(name, text, f"{FRONTEND_STAGE} (interpreter)")
        report.stages.append(result)
        try:
            verify(stage_kernel, after=name)
        except IRError as err:
            result.note = f"verifier: {err}"
        try:
            got = _run(stage_kernel, arrays, scalars, written)
        except Exception as err:  # noqa: BLE001 - broken IR fails in many ways; report it
            result.failure = f"{type(err).__name__}: {err}"
            continue
        result.max_abs_error, result.max_error = _errors(got, expected)
        result.ok = result.max_error <= report.tolerance
    if failed is not None:
        report.stages.append(StageResult(failed[0], "", "-", failure=failed[1]))
    return report


def _check_frontend(result: StageResult, kernel: Kernel, arrays: dict[str, np.ndarray],
                    scalars: dict[str, Any], outputs: dict[str, np.ndarray],
                    tolerance: float) -> None:
    from tilec.cpu.reference import Unsupported, reference
    dtypes = {p.name: p.type.dtype for p in kernel.params}
    before = {name: _float64(array, dtypes[name]) for name, array in arrays.items()}
    try:
        exact = reference(kernel, before, scalars)
    except Unsupported as why:
        # Nothing to check the frontend's run against: later stages are still compared
        # with it, so a pass that changes the result is still found.
        result.compared_with = "-"
        result.ok = True
        result.note = f"no float64 reference ({why})"
        return
    result.max_abs_error, result.max_error = _errors(outputs, exact)
    result.ok = result.max_error <= tolerance


# ----------------------------------------------------------------------------------------
# command line

DESCRIPTION = ("Run the IR after every pass on the CPU (the frontend's in the interpreter, "
               "later stages in the reference executor) on the same random inputs, and name "
               "the first stage whose result is wrong. Exit status 1 when one is.")


def build_parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog="tilec bisect", description=DESCRIPTION))


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``tilec bisect`` arguments, on ``parser`` (a subcommand's, or :func:`main`'s)."""
    from tilec.cli import DEFAULT_SHAPE, _assignments, _size, add_kernel_arguments
    add_kernel_arguments(parser, "bisect")
    parser.add_argument("--swizzle", choices=("auto", "off"), help="shared-memory swizzle")
    parser.add_argument("--shape", metavar="M=..,N=..,K=..", action="append", default=[],
                        type=_assignments("shape", _size, "a size"),
                        help=f"problem size (default: "
                        f"{','.join(f'{k}={v}' for k, v in DEFAULT_SHAPE.items())}); the "
                        "executor is slow: small shapes and tiles bisect fastest")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    parser.add_argument("--dump-dir", metavar="DIR", type=Path,
                        help="where to write each stage's IR (default: a new temporary "
                        "directory)")
    parser.set_defaults(handler=run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``tilec bisect FILE ...``: 0 when every stage agrees, 1 when one does not (or an
    error), 2 for a bad command line."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse has printed the message or the help
        return int(exit_.code or 0)
    return run(args)


def run(args: argparse.Namespace) -> int:
    from tilec.cli import DEFAULT_SHAPE, CommandError, _consts, _select, _shapes
    status = 0
    dump_dir = args.dump_dir
    try:
        for fn in _select(args.file, args.kernel):
            consts = _consts(fn, args)
            shapes = _shapes(fn, args, DEFAULT_SHAPE)
            option_args = {"stages": args.stages, "warps": args.warps, "swizzle": args.swizzle}
            options = launch_options(shapes, **{k: v for k, v in option_args.items()
                                                if v is not None})
            report = bisect(fn, consts, options, shapes, args.seed)
            if dump_dir is None:
                dump_dir = Path(tempfile.mkdtemp(prefix="tilec-bisect-"))
            status = max(status, _print_report(report, args.file, dump_dir))
    except TileError as err:
        print(err.render(), file=sys.stderr)
        return 1
    except (CommandError, ValueError) as err:
        print(f"tilec: error: {err}", file=sys.stderr)
        return 1
    return status


def _print_report(report: BisectReport, path: Path, dump_dir: Path) -> int:
    sizes = ", ".join(f"{k}={v}" for k, v in report.shapes.items())
    print(f"{report.kernel} from {path}: {sizes}, seed {report.seed}, tolerance "
          f"{report.tolerance:g} on max |error| / max |reference|")
    print(report.table())
    dumps = report.write_dumps(dump_dir)
    bad = report.first_bad
    if bad is None:
        print(f"all stages agree (IR of each stage in {dump_dir})")
        return 0
    what = "failed" if bad.failure else "differs"
    print(f"first bad stage: {bad.stage} ({what})")
    if bad.stage in dumps:
        print(f"  its IR:        {dumps[bad.stage]}")
    good = report.last_good
    if good is not None and good.stage in dumps:
        print(f"  last good IR:  {dumps[good.stage]}")
    return 1
