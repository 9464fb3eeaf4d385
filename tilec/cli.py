"""The ``tilec`` command line: compile a tile program to PTX, or run it and check the result.

    tilec compile samples/matmul.py --arch sm_90 -o matmul.ptx --dump-ir tiling
    tilec run samples/matmul.py --shape M=200,N=136,K=72
    tilec explain samples/matmul.py --stages 4 --swizzle off

Files are parsed, never imported. A file with several tile functions and no ``--kernel``:
``compile`` writes every kernel's PTX to stdout, each under a ``// ===== kernel NAME`` line
(``-o`` then needs ``--kernel``: one PTX module per file), and ``run`` runs and checks each.
Exit status: 0 success, 1 a failed check or an error in the program, 2 a bad command line.

This module only builds the parser and dispatches: each verb is a module of
:mod:`tilec.tools` with ``DESCRIPTION``, ``add_arguments(parser)`` (which sets the handler)
and ``run(args)``; the flags they share are in :mod:`tilec.tools.arguments`.
"""
from __future__ import annotations

import argparse
from typing import Optional, Sequence

from tilec.tools import bench, bisect, compile_command, explain_command, run_command, viz
from tilec.tools.arguments import run_handler

# (verb, its module, the one-line help `tilec --help` lists), in the order listed.
VERBS = (
    ("compile", compile_command, "write a kernel's PTX"),
    ("run", run_command, "run a kernel on random inputs and check the result"),
    ("explain", explain_command, "show how a kernel maps to the GPU (no GPU needed)"),
    ("bisect", bisect, "name the first pass whose IR computes a wrong result (CPU only)"),
    ("viz", viz, "draw bank maps and mma fragment ownership as PNGs (needs matplotlib)"),
    ("bench", bench, "time tilec's matmul against cuBLAS and Triton (needs a GPU)"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tilec", description="Compile tile-level matmul programs to PTX, and run them.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, summary in VERBS:
        module.add_arguments(commands.add_parser(name, help=summary,
                                                 description=module.DESCRIPTION))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_handler(build_parser().parse_args(argv), "tilec")
