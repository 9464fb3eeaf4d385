"""``tilec run``: run each kernel on random inputs and check the result.

    tilec run samples/matmul.py --shape M=200,N=136,K=72

On the GPU when there is one (the outputs then checked against the CPU interpreter and the
float64 reference), else in the CPU interpreter (checked against the float64 reference):
:func:`tilec.tools.checking.run_and_check`. Exit status 1 when a check fails.
"""
from __future__ import annotations

import argparse

from tilec.tools.arguments import (COMPILE_FLAGS, DEFAULT_SHAPE, PROBLEM_SHAPE, add_flags,
                                   add_program_arguments, compile_options, constants, scalars,
                                   select_functions, shapes)
from tilec.tools.checking import run_and_check
from tilec.tools.tuned import HELP as TUNED_HELP, with_tuned

DESCRIPTION = ("Run on random inputs (on the GPU, else in the CPU interpreter) and compare the "
               "outputs with a reference; exit status 1 when a check fails.")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``tilec run`` arguments, on ``parser``."""
    add_program_arguments(parser, "use")
    add_flags(parser, *COMPILE_FLAGS, "shape", "scalar", "seed", shape=PROBLEM_SHAPE)
    parser.add_argument("--cpu", action="store_true",
                        help="run in the CPU interpreter even when a GPU is present")
    parser.add_argument("--tuned", action="store_true", help=TUNED_HELP)
    add_flags(parser, "pack", "peel", "misaligned_copy", "misaligned_store")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from tilec.options import Options, target_arch
    from tilec.runtime import current_device
    from tilec.runtime.driver import gpu_unavailable_reason, has_gpu
    on_gpu = not args.cpu and has_gpu()
    if args.cpu:
        where = "CPU interpreter (--cpu)"
    elif on_gpu:
        device = current_device()
        where = f"GPU {device.ordinal}: {device.name} ({device.arch})"
    else:
        where = f"CPU interpreter (no GPU: {gpu_unavailable_reason()})"
    failed = False
    for fn in select_functions(args.file, args.kernel):
        consts, options = constants(fn, args), compile_options(args)
        sizes = shapes(fn, args, DEFAULT_SHAPE)
        values = scalars(fn, args)
        if args.tuned:
            # The target the kernel will run on: the GPU's, as run_and_check picks it.
            arch = options.get("arch") or (
                target_arch(current_device().compute_capability) if on_gpu else Options().arch)
            consts, options, note = with_tuned(fn, consts, options, sizes, arch)
            print(note, end="")
        failed |= not run_and_check(fn, str(args.file), consts, sizes, values,
                                    options, args.seed, on_gpu, where)
    return 1 if failed else 0
