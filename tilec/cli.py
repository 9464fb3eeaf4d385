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
and ``run(args)``; the flags they share are in :mod:`tilec.tools.arguments`. A verb's module
is imported only when the command line names that verb (:class:`_Verbs`): the modules pull in
the compiler, numpy, the CUDA bindings or the benchmark harness, and a cold ``tilec compile``
should not wait for the others' imports.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import sys
from typing import Any, Iterator, Optional, Sequence

from tilec.tools.arguments import Parser, run_handler
from tilec.version import COMPILER_VERSION

# (verb, its module, the one-line help `tilec --help` lists), in the order listed.
VERBS = (
    ("compile", "tilec.tools.compile_command", "write a kernel's PTX"),
    ("run", "tilec.tools.run_command", "run a kernel on random inputs and check the result"),
    ("explain", "tilec.tools.explain_command",
     "show how a kernel maps to the GPU (no GPU needed)"),
    ("bisect", "tilec.tools.bisect",
     "name the first pass whose IR computes a wrong result (CPU only)"),
    ("viz", "tilec.tools.viz",
     "draw bank maps and mma fragment ownership as PNGs (needs matplotlib)"),
    ("bench", "tilec.tools.bench", "time tilec's matmul against cuBLAS and Triton (needs a GPU)"),
)


class _Verbs(argparse._SubParsersAction):
    """The subcommands, each filled in from its module (description and arguments) only when
    it is chosen: argparse calls this action with the verb before it parses the verb's own
    arguments (or prints its --help)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._modules: dict[str, str] = {}
        self._loaded: set[str] = set()

    def add_verb(self, name: str, module: str, summary: str) -> None:
        self.add_parser(name, help=summary)
        self._modules[name] = module

    def load(self, name: str) -> argparse.ArgumentParser:
        """The verb's parser, with its description and arguments."""
        parser = self.choices[name]
        if name not in self._loaded:
            module = importlib.import_module(self._modules[name])
            parser.description = module.DESCRIPTION
            module.add_arguments(parser)
            self._loaded.add(name)
        return parser

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Sequence[str], option_string: Optional[str] = None) -> None:
        self.load(values[0])
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="tilec", description="Compile tile-level matmul programs to PTX, and run them.")
    parser.add_argument("--version", action="version", version=f"tilec {COMPILER_VERSION}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                     action=_Verbs)
    for name, module, summary in VERBS:
        commands.add_verb(name, module, summary)
    return parser


@contextlib.contextmanager
def _lark_without_regex() -> Iterator[None]:
    """lark imports the third-party ``regex`` package, when it is installed, for two things
    tilec never asks of it (``Lark(regex=True)``, ``\\p{...}`` classes in a grammar): ~8 ms
    of a cold ``tilec compile``. While the verb's module (lark with it) loads in tilec's own
    process (:func:`main` without ``argv``), ``regex`` reads as not installed, so lark goes
    without it; afterwards it imports as usual. Nothing changes when either is loaded
    already, nor for a program that imports tilec."""
    if "regex" in sys.modules or "lark" in sys.modules:
        yield
        return
    sys.modules["regex"] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        yield
    finally:
        if "regex" in sys.modules and sys.modules["regex"] is None:
            del sys.modules["regex"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    if argv is not None:  # called from Python (tests, scripts): leave its collector alone
        return run_handler(build_parser().parse_args(argv), "tilec")
    # The process's own command line: it runs this one command and exits. Loading the
    # modules allocates tens of thousands of objects that live to the end, and the cyclic
    # collector, left on, traverses them ~90 times in a cold `tilec compile` and once more
    # at exit, finding nothing to free: ~15 ms of it. So it is off while the command line is
    # parsed (which imports the verb's module); the objects made so far are then set aside
    # (gc.freeze) for every later collection, the one at exit included. A compile stays
    # without it: its garbage is a few IR copies, freed with the process (the other verbs
    # run kernels, loops and benchmarks, and get it back).
    gc.disable()
    args = None
    try:
        with _lark_without_regex():
            args = build_parser().parse_args()
    finally:
        gc.freeze()
        if args is None or args.command != "compile":
            gc.enable()
    try:
        return run_handler(args, "tilec")
    finally:
        gc.freeze()
        gc.enable()
