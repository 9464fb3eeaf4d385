"""``tilec compile``: write a kernel's PTX, and the IR of the stages asked for.

    tilec compile samples/matmul.py --arch sm_90 -o matmul.ptx --dump-ir tiling

A file with several tile functions and no ``--kernel`` gives every kernel's PTX on stdout,
each under a ``// ===== kernel NAME`` line (``-o`` then needs ``--kernel``: one PTX module
per file). IR dumps go to stderr.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from tilec.compiler import LLVM_STAGES, Compiled
from tilec.ir.core import Kernel
from tilec.kernel import TileFunction, written_params
from tilec.options import Options
from tilec.families.products import family_of
from tilec.pipeline import pipeline
from tilec.tools.arguments import (COMPILE_FLAGS, CommandError, add_flags, add_program_arguments,
                                   compile_options, constants, select_functions, shapes)

DESCRIPTION = "Compile to PTX, written to OUT or stdout. IR dumps go to stderr."


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``tilec compile`` arguments, on ``parser``."""
    add_program_arguments(parser, "use")
    add_flags(parser, *COMPILE_FLAGS, "shape")
    add_flags(parser, "misaligned_copy", "misaligned_store")
    stages = ["all", "tile"] + [p.name for p in pipeline()] + [*LLVM_STAGES, "sass"]
    parser.add_argument("-o", "--output", metavar="OUT", type=Path,
                        help="write the PTX here instead of stdout")
    parser.add_argument("--annotate", action="store_true",
                        help="comment each op's PTX with its DSL line, IR op and pass")
    parser.add_argument("--dump-ir", metavar="STAGE", action="append", default=[],
                        choices=stages,
                        help=f"print a stage's IR to stderr: {', '.join(stages)}")
    parser.set_defaults(handler=run)
    return parser


def summary(compiled: Compiled) -> str:
    """One line about a compiled kernel: its tiling, launch shape and PTX size."""
    schedule = compiled.kernel.schedule
    plan = schedule.tiling
    rendered = compiled.rendered
    parts = [compiled.options.arch]
    if plan is not None:
        swapped = schedule.swap is not None and schedule.swap.swapped
        parts.append("tile " + "x".join(str(d) for d in plan.block)
                     + (f" of C.T (swapped: {schedule.swap.formula})" if swapped else ""))
        parts.append(f"warps {plan.warps[0]}x{plan.warps[1]}")
        if family_of(plan).f32_math == "tf32":  # not the default: say the products round
            parts.append("tf32 tensor cores")
    if schedule.roles is not None:
        roles = schedule.roles
        parts.append(f"{family_of(plan).name} fed by TMA, {roles.consumer_warpgroups} consumer "
                     f"warpgroup{'s' if roles.consumer_warpgroups > 1 else ''}"
                     + (f" of {roles.warpgroup_rows} rows" if roles.warpgroup_rows != 64
                        else "")
                     + (" (pingpong: a tile each, in turn)" if roles.pingpong else "")
                     + " + a producer"
                     + (f", {roles.blocks_per_sm} blocks per SM" if roles.blocks_per_sm > 1
                        else ""))
    parts.append(f"{rendered.threads} threads")
    stages = schedule.stages if schedule.pipeline is not None else compiled.options.stages
    parts.append(f"{stages} stages")
    parts.append(f"{rendered.smem_bytes / 1024:g} KiB shared memory")
    if schedule.splits > 1:
        parts.append(f"split-K {schedule.splits}")
    ptx = rendered.ptx
    parts.append(f"PTX {ptx.count(chr(10)):,} lines, {len(ptx.encode()) / 1024:.1f} KiB")
    return ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    functions = select_functions(args.file, args.kernel)
    if args.output is not None and len(functions) > 1:
        raise CommandError(f"{args.file} has several tile functions "
                           f"({', '.join(f.name for f in functions)}); -o writes one PTX "
                           "module: choose one with --kernel")
    stage_names = ["tile"] + [p.name for p in pipeline()]
    wanted = [s for s in stage_names if s in args.dump_ir or "all" in args.dump_ir]
    llvm_stages = [s for s in LLVM_STAGES if s in args.dump_ir
                   or "all" in args.dump_ir and getattr(args, "backend", None) == "llvm"]
    if llvm_stages and getattr(args, "backend", None) != "llvm":
        raise CommandError(f"--dump-ir {llvm_stages[0]}: the LLVM IR exists with --backend "
                           "llvm only")
    wanted += llvm_stages
    for fn in functions:
        consts = constants(fn, args)
        sizes = shapes(fn, args)
        compiled = fn.compile(keep_ir=bool(wanted), **compile_options(args), **consts, **sizes)
        for stage in wanted:
            if stage not in compiled.asm:
                raise CommandError(f"no IR after pass '{stage}': it is disabled")
            _dump(fn, stage, compiled.asm[stage], sys.stderr)
        if "sass" in args.dump_ir:
            from tilec.tools.sass import sass, sass_unavailable_reason
            reason = sass_unavailable_reason()
            if reason is not None:
                raise CommandError(f"--dump-ir sass: {reason}")
            _dump(fn, "sass", sass(compiled.ptx, compiled.options.arch), sys.stderr)
        _note_launch_packing(fn, consts, sizes, compile_options(args))
        if args.output is not None:
            args.output.write_text(compiled.ptx, encoding="utf-8")
            print(f"tilec: wrote {args.output}: {fn.name} for {summary(compiled)}",
                  file=sys.stderr)
        else:
            if len(functions) > 1:
                sys.stdout.write(f"// ===== kernel {fn.name}: {summary(compiled)}\n")
            sys.stdout.write(compiled.ptx)
    return 0


STAGE_TITLES = {"tile": "tile IR from the frontend", "llvm": "LLVM IR as emitted",
                "llvm-opt": "LLVM IR after LLVM's pipeline"}


def _dump(fn: TileFunction, stage: str, text: str, out: TextIO) -> None:
    what = STAGE_TITLES.get(stage, f"IR after pass '{stage}'")
    out.write(f"===== {fn.name}: {what} =====\n{text.rstrip()}\n\n")


def row_major_launch(kernel: Kernel, sizes: dict[str, int], options: dict[str, Any],
                     peel: Any = None):
    """(the operands a GPU launch packs, the spec it compiles for) on fresh row-major arrays
    of these sizes: what ``tilec run`` stages host arrays as; with ``peel``, of its whole
    tiles' launch."""
    from tilec.launch.packing import row_major_launch as plan
    given = Options(**options)
    return plan(kernel, sizes, given.pack, written_params(kernel), given.arch, given.backend,
                given.cluster, peel, given)


def _note_launch_packing(fn: TileFunction, consts, sizes, options) -> None:
    """With every shape symbol given, say on stderr when a launch of row-major arrays of
    those sizes packs or converts operands first: it then runs the kernel compiled for the
    packed arguments, not the one written here (``tilec explain --shape`` shows that one)."""
    if not set(fn.signature.symbols) <= set(sizes):
        return
    plan, _ = row_major_launch(fn.lower(**consts), sizes, options)
    if plan:
        print(f"tilec: note: a launch of row-major arrays of these sizes packs first "
              f"({'; '.join(plan.describe())}) and runs the kernel compiled for that: "
              "`tilec explain` with the same --shape shows it", file=sys.stderr)
