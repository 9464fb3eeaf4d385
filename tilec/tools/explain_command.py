"""``tilec explain``: print :func:`tilec.tools.explain.explain`'s view of each kernel.

    tilec explain samples/matmul.py --stages 4 --swizzle off

Given a size for every shape symbol, the kernel is compiled for the launch ``tilec run``
would make on row-major arrays of those sizes, the operands it packs are listed, and so are
its blocks and how they fall into waves on the SMs.
"""
from __future__ import annotations

import argparse
import sys

from tilec.options import Options
from tilec.tools.arguments import (COMPILE_FLAGS, add_flags, add_program_arguments,
                                   compile_options, constants, select_functions, shapes)
from tilec.launch.binding import grid_size
from tilec.tools.compile_command import row_major_launch
from tilec.tools.tuned import HELP as TUNED_HELP, with_tuned

DESCRIPTION = ("Print the tile hierarchy, the copy pipeline's schedule, the shared-memory "
               "plan, bank conflicts of every shared access, and registers (ptxas's report "
               "when it is on PATH); exit status 1 when the schedule has a shared-memory race.")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``tilec explain`` arguments, on ``parser``."""
    add_program_arguments(parser, "use")
    add_flags(parser, *COMPILE_FLAGS, "shape",
              shape={"help": "sizes the kernel will see (as for compile)"})
    parser.add_argument("--no-ptxas", action="store_true",
                        help="skip ptxas's register and spill report")
    parser.add_argument("--tuned", action="store_true", help=TUNED_HELP)
    add_flags(parser, "pack", "peel", "misaligned_copy", "misaligned_store")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from tilec.tools.explain import explain, render_explanation
    sound = True
    for index, fn in enumerate(select_functions(args.file, args.kernel)):
        consts, sizes, options = constants(fn, args), shapes(fn, args), compile_options(args)
        note = ""
        if args.tuned:
            arch = options.get("arch", Options().arch)
            consts, options, note = with_tuned(fn, consts, options, sizes, arch)
        packing, in_place, tile_axes, peel = None, (), None, ""
        if set(fn.signature.symbols) <= set(sizes):  # the launch's layout facts are known
            lowered = fn.lower(**consts)
            peel, cut = _peeled(lowered, sizes) if options.get("peel") else ("", None)
            plan, spec = row_major_launch(lowered, sizes, options, cut)
            compiled = fn.compile(spec=spec, **options, **consts)
            packing, in_place = plan.describe(), plan.in_place
            part = sizes if cut is None else {**sizes, cut.site.symbol: cut.main}
            tile_axes = grid_size(lowered, part)
        else:
            compiled = fn.compile(**options, **consts, **sizes)
        explanation = explain(compiled, ptxas=not args.no_ptxas, packing=packing,
                              in_place=in_place, tile_axes=tile_axes, peel=peel)
        sys.stdout.write(("\n" if index else "") + note + render_explanation(explanation))
        sound &= not explanation.hazard
    return 0 if sound else 1


def _peeled(lowered, sizes: dict[str, int]):
    """Under --peel: where a launch at ``sizes`` is cut (or why it is not), in words, and
    the cut (a Peel) or None; the rest of the explanation is then the whole tiles' part."""
    from tilec.launch.peeling import peel_sites, plan_peel
    sites, why = peel_sites(lowered)
    if not sites:
        return f"not peeled: the program cannot be ({why})", None
    peel = plan_peel(sites, sizes)
    if peel is None:
        return ("not peeled: no grid axis ends in a partial tile that narrower tiles would "
                "take", None)
    return f"{peel.describe()}; the rest of this explanation is the whole tiles' launch", peel
