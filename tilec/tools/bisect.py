"""Bisecting a wrong result to the pass that introduced it.

:func:`bisect` lowers a tile function, runs the pipeline keeping the IR after every pass, and
runs each stage on the CPU on the same random inputs (outputs start as NaN, so an element no
one writes shows up): the frontend's IR in the interpreter, the later stages in the lowered-IR
executor (:mod:`tilec.cpu.executor`), which follows what the GPU does with shared memory,
cp.async groups, ldmatrix and mma fragments. The frontend's run is checked against the float64
whole-tensor reference (:mod:`tilec.cpu.reference`) where that understands the program; each
later stage is checked against the frontend's run. The first stage that differs beyond the
tolerance, or fails to compile or run, is the pass to look at::

    tilec bisect samples/matmul.py --shape M=40,N=48,K=40 --const BM=32,BN=32,BK=16

Error measure: ``tilec run``'s (:mod:`tilec.tools.checking`): the relative Frobenius error
``||out - ref|| / ||ref||`` of each written tensor, the largest over them, against the
tolerance for the tensors' dtypes (f16 2e-3, bf16 1e-2). A NaN in an output (an element no one
wrote) makes the error NaN, which fails.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from tilec.errors import TileError
from tilec.families.catalogue import op_catalogue
from tilec.ir.core import Kernel
from tilec.ir.ops import IRError
from tilec.ir.printer import print_kernel
from tilec.ir.verifier import verify
from tilec.kernel import TileFunction, written_params
from tilec.options import Options, Spec
from tilec.pipeline import Pass, pipeline, run_pipeline
from tilec.tools import arguments
from tilec.tools.arguments import DEFAULT_SHAPE, PROBLEM_SHAPE, CommandError
from tilec.tools.checking import (Arrays, Scalars, as_float64, dtype_of, random_arguments,
                                  run_on_cpu, tolerance_for, unpoisoned, within_tolerance,
                                  worst_errors)

__all__ = ["bisect", "BisectReport", "StageResult", "make_inputs", "launch_options", "main"]

FRONTEND_STAGE = "tile"


@dataclass
class StageResult:
    """One stage's run: ``stage`` is ``"tile"`` (the frontend's IR) or a pass name."""

    stage: str
    ir: str  # the stage's IR text; empty when the pass itself failed
    compared_with: str
    max_abs_error: float = float("nan")
    rel_error: float = float("nan")  # relative Frobenius error, the largest over the outputs
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
        rows = [("stage", "compared with", "max abs err", "rel error", "verdict")]
        for s in self.stages:
            rows.append((s.stage, s.compared_with, _number(s.max_abs_error),
                         _number(s.rel_error), s.verdict))
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
# inputs

def make_inputs(kernel: Kernel, shapes: dict[str, int], rng: np.random.Generator
                ) -> tuple[Arrays, Scalars]:
    """Random arguments for the frontend's ``kernel`` (:func:`~tilec.tools.checking.
    random_arguments`): standard normal tensors for what it reads, NaN for what it only
    writes; f32 scalars in [0.5, 1.5), i32 scalars 1; bf16 tensors as uint16 bits."""
    return random_arguments(kernel, shapes, rng)


def launch_options(shapes: dict[str, int], **option_args: Any) -> Options:
    """Options as ``TileFunction.compile`` makes them for these sizes: the symbols' largest
    power-of-two divisors go into the spec, so edge masks are dropped where a launch of
    these sizes would drop them."""
    from tilec.launch.binding import divisibility
    return Options(**option_args, spec=Spec(divisible=divisibility(shapes)))


# ----------------------------------------------------------------------------------------
# bisecting

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
    report = BisectReport(kernel.name, shapes, seed, tolerance_for(kernel))

    frontend = StageResult(FRONTEND_STAGE, print_kernel(kernel), "float64 reference")
    report.stages.append(frontend)
    try:
        expected = run_on_cpu(kernel, arrays, scalars, written, options.f32_math)
    except Exception as err:  # noqa: BLE001 - a bisect reports every failure as a stage
        frontend.failure = f"{type(err).__name__}: {err}"
        return report
    _check_frontend(frontend, kernel, arrays, scalars, expected, report.tolerance)

    stages, failed = _stages(kernel, options, passes)
    for name, stage_kernel, text in stages:
        result = StageResult(name, text, f"{FRONTEND_STAGE} (interpreter)")
        report.stages.append(result)
        try:
            verify(stage_kernel, after=name, ops=op_catalogue())
        except IRError as err:
            result.note = f"verifier: {err}"
        try:
            got = run_on_cpu(stage_kernel, arrays, scalars, written, options.f32_math)
        except Exception as err:  # noqa: BLE001 - broken IR fails in many ways; report it
            result.failure = f"{type(err).__name__}: {err}"
            continue
        result.max_abs_error, result.rel_error = worst_errors(got, expected)
        result.ok = within_tolerance(result.rel_error, report.tolerance)
    if failed is not None:
        report.stages.append(StageResult(failed[0], "", "-", failure=failed[1]))
    return report


def _check_frontend(result: StageResult, kernel: Kernel, arrays: Arrays, scalars: Scalars,
                    outputs: Arrays, tolerance: float) -> None:
    from tilec.cpu.reference import Unsupported, reference
    before = {name: as_float64(array, dtype_of(kernel, name))
              for name, array in unpoisoned(kernel, arrays).items()}
    try:
        exact = reference(kernel, before, scalars)
    except Unsupported as why:
        # Nothing to check the frontend's run against: later stages are still compared
        # with it, so a pass that changes the result is still found. A NaN left in its
        # outputs would make every later comparison NaN: it fails here, where it arose.
        unwritten = sum(int(np.count_nonzero(np.isnan(out))) for out in outputs.values())
        result.compared_with = "-"
        result.ok = not unwritten
        result.note = f"no float64 reference ({why})"
        if unwritten:
            result.note += f"; {unwritten} NaN elements in the outputs (outputs start as NaN)"
        return
    result.max_abs_error, result.rel_error = worst_errors(outputs, exact)
    result.ok = within_tolerance(result.rel_error, tolerance)


# ----------------------------------------------------------------------------------------
# command line

DESCRIPTION = ("Run the IR after every pass on the CPU (the frontend's in the interpreter, "
               "later stages in the lowered-IR executor) on the same random inputs, and name "
               "the first stage whose result is wrong. Exit status 1 when one is.")


def build_parser() -> argparse.ArgumentParser:
    return add_arguments(arguments.Parser(prog="tilec bisect", description=DESCRIPTION))


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``tilec bisect`` arguments, on ``parser`` (a subcommand's, or :func:`main`'s)."""
    arguments.add_program_arguments(parser, "bisect")
    shape = {**PROBLEM_SHAPE, "help": PROBLEM_SHAPE["help"] + "; the executor is slow: small "
             "shapes and tiles bisect fastest"}
    # raster_group too: it decides the tile loop's arithmetic (a cluster's groups of M
    # tiles, a persistent block's walk), which the stages compute like any other.
    arguments.add_flags(parser, "arch", "stages", "warps", "swizzle", "f32_math",
                        "raster_group", "split_k", *arguments.HOPPER_FLAGS, "shape", "seed",
                        shape=shape,
                        arch={"help": "target whose numerics the stages follow (default: "
                              "sm_80)"})
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
    status = 0
    dump_dir = args.dump_dir
    try:
        for fn in arguments.select_functions(args.file, args.kernel):
            consts = arguments.constants(fn, args)
            sizes = arguments.shapes(fn, args, DEFAULT_SHAPE)
            options = launch_options(sizes, **arguments.compile_options(args))
            report = bisect(fn, consts, options, sizes, args.seed)
            if dump_dir is None:
                dump_dir = Path(tempfile.mkdtemp(prefix="tilec-bisect-"))
            status = max(status, _print_report(report, args.file, dump_dir))
    except (TileError, CommandError) as err:
        print(arguments.error_message(err), file=sys.stderr)
        return 1
    except ValueError as err:
        print(f"tilec: error: {err}", file=sys.stderr)
        return 1
    return status


def _print_report(report: BisectReport, path: Path, dump_dir: Path) -> int:
    sizes = ", ".join(f"{k}={v}" for k, v in report.shapes.items())
    print(f"{report.kernel} from {path}: {sizes}, seed {report.seed}, tolerance "
          f"{report.tolerance:g} on the relative Frobenius error")
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
