"""The command-line arguments the tools share, and what they mean for a tile function.

Every verb (compile, run, explain, bisect, viz, bench) takes some of the same flags: the
program (FILE, ``--kernel``, ``--const``), the compile options (``--arch``, ``--stages``,
``--warps``, ``--swizzle``, ``--f32-math``, ``--raster-group``, ``--split-k``, ``--pack``,
``--misaligned-copy``, ``--misaligned-store``,
``--disable``, ``--verify``), the sizes (``--shape``) and the inputs (``--scalar``,
``--seed``). Each is written once in :data:`FLAGS`; a verb adds the ones it takes with
:func:`add_flags`, changing a help text or two where its meaning narrows.

Parsed arguments turn into a tile function's values here too: :func:`select_functions`,
:func:`constants`, :func:`shapes`, :func:`scalars` and :func:`compile_options` check what was
given against the program and raise :class:`CommandError` for what it does not have.

The NAME=VALUE flags (``--const``, ``--shape``, ``--scalar``) take one assignment or several:
``--const BM=64 --const BN=32``, ``--const BM=64,BN=32`` and ``--const BM=64 BN=32`` are the
same. The last is :class:`Parser`'s doing, not argparse's ``nargs="+"``, which would swallow
the FILE that follows (``--const BM=64 samples/matmul.py``).

This module is imported before the CLI knows which verb runs, so it imports nothing heavy at
module level: the compiler (:mod:`tilec.kernel`) and the pass list load when first used.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

from tilec.errors import TileError
from tilec.ir.types import I32
from tilec.options import (ARCHS, BACKENDS, BLOCKS_PER_SM, CLUSTER_SIZES, CONSUMER_MODES,
                           FP8_ACCUMULATIONS,
                           F32_MATH, LLVM_OPT_LEVELS, MAX_SPLIT_K, MISALIGNED_COPIES,
                           MISALIGNED_STORES, PACK_POLICIES, SWAP_PRODUCTS, TMA_SWIZZLES,
                           WARPGROUP_ROWS,
                           Options)

if TYPE_CHECKING:
    from tilec.kernel import TileFunction

# A small ragged shape: no dimension divides the 128x128x32 tiles, so edge masks are tested.
DEFAULT_SHAPE = {"M": 200, "N": 136, "K": 72}
DEFAULT_SYMBOL_SIZE = 96  # for shape symbols other than M, N and K

# The sm_90a schedule's flags (the warp-specialized wgmma kernels'), which every verb that
# compiles takes together.
HOPPER_FLAGS = ("blocks_per_sm", "persistent", "cluster", "cluster_n", "consumers",
                "warpgroup_rows", "stream_k", "fp8_accumulation", "tma_swizzle", "swap_product")
# The flags whose values are the Options fields of the same names.
OPTION_FLAGS = ("arch", "stages", "warps", "swizzle", "raster_group", "f32_math", "pack",
                "peel", "misaligned_copy", "misaligned_store", "split_k", *HOPPER_FLAGS, "backend",
                "llvm_opt")


class CommandError(Exception):
    """A mistake in what was asked (no such kernel, an unknown constant...): its message is
    printed, without a traceback, and the exit status is 1."""


# ------------------------------------------------------------------------- argument types

def number(text: str) -> Union[int, float]:
    try:
        return int(text)
    except ValueError:
        return float(text)


def assignments(kind: str, convert: Callable[[str], Any] = number,
                expected: str = "a number") -> Callable[[str], list[tuple[str, Any]]]:
    """An argparse type for ``NAME=VALUE[,NAME=VALUE...]``."""
    def parse(text: str) -> list[tuple[str, Any]]:
        pairs = []
        for item in text.split(","):
            name, equals, value = item.partition("=")
            name = name.strip()
            if not equals or not name.isidentifier():
                raise argparse.ArgumentTypeError(f"expected {kind} as NAME=VALUE, got {item!r}")
            try:
                pairs.append((name, convert(value.strip())))
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{kind} {name}: {value.strip()!r} is not {expected}") from None
        return pairs
    parse.__name__ = kind  # argparse names the type in its messages
    return parse


def size(text: str) -> int:
    """A --shape size: a non-negative integer that fits the kernel's 32-bit sizes."""
    value = int(text)
    if value < 0:
        raise ValueError(text)
    if value > SIZE_MAX:
        # Not a ValueError, which assignments() reports as "not a size": this one is.
        raise argparse.ArgumentTypeError(f"size {value} is larger than {SIZE_MAX}: sizes are "
                                         "32-bit in the kernel")
    return value


SIZE_MAX = 2**31 - 1  # the kernel computes with sizes in i32


def warps(text: str) -> tuple[int, int]:
    rows, x, cols = text.lower().partition("x")
    try:
        grid = (int(rows), int(cols))
    except ValueError:
        grid = (0, 0)
    if not x or min(grid) < 1:
        raise argparse.ArgumentTypeError(f"expected warps as MxN (e.g. 2x2), got {text!r}")
    return grid


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def split_k(text: str) -> int:
    value = positive(text)
    if value > MAX_SPLIT_K:
        raise argparse.ArgumentTypeError(f"split-K takes 1 to {MAX_SPLIT_K} slices, got {text}")
    return value


# ---------------------------------------------------------------------------------- flags

def _default_shape_text() -> str:
    return ",".join(f"{k}={v}" for k, v in DEFAULT_SHAPE.items())


def _pass_names() -> list[str]:
    from tilec.pipeline import pipeline
    return [p.name for p in pipeline()]


# name -> (the flag, argparse's keywords). A verb adds the ones it takes, in its own order.
FLAGS: dict[str, tuple[str, dict[str, Any]]] = {
    "const": ("--const", dict(
        metavar="NAME=VALUE", action="append", default=[], type=assignments("constant"),
        help="override compile-time constants, e.g. --const BM=64 BN=64 (or BM=64,BN=64)")),
    "arch": ("--arch", dict(
        choices=list(ARCHS), help="target (compile default: sm_80; run: the GPU's)")),
    "stages": ("--stages", dict(
        type=positive, metavar="N", help="shared-memory pipeline stages")),
    "warps": ("--warps", dict(type=warps, metavar="MxN", help="warp grid, e.g. 2x2")),
    "swizzle": ("--swizzle", dict(choices=("auto", "off"), help="shared-memory swizzle")),
    "f32_math": ("--f32-math", dict(
        choices=F32_MATH, help="products of f32 tiles: ffma (exact f32, the default) or tf32 "
        "(tensor cores, inputs rounded to tf32)")),
    "raster_group": ("--raster-group", dict(
        type=positive, metavar="N", help="rows of tiles per rasterisation group")),
    "split_k": ("--split-k", dict(
        type=split_k, metavar="S",
        help="blocks per output tile along K, each summing a slice (split-K)")),
    "blocks_per_sm": ("--blocks-per-sm", dict(
        type=int, choices=BLOCKS_PER_SM, metavar="N",
        help="sm_90a warp-specialized kernels: blocks resident per SM (2 overlaps one "
        "block's epilogue with another's products, at half the registers and shared memory)")),
    "persistent": ("--persistent", dict(
        action="store_true", default=None,
        help="sm_90a warp-specialized kernels: one block per SM looping over the output "
        "tiles, so one tile's epilogue overlaps the next one's loads")),
    "cluster": ("--cluster", dict(
        type=int, choices=CLUSTER_SIZES, metavar="N",
        help="sm_90a warp-specialized kernels: blocks per thread-block cluster along M (2 or "
        "4: the cluster loads its B tile once, each block a share of its rows multicast to "
        "all; swapped, B's tile is the product's A)")),
    "cluster_n": ("--cluster-n", dict(
        type=int, choices=CLUSTER_SIZES, metavar="N",
        help="sm_90a warp-specialized kernels: blocks per thread-block cluster along N (2 or "
        "4, beside --cluster's along M: the blocks of one M row of the cluster share A as "
        "those of one N column share B, e.g. --cluster 4 --cluster-n 2 for 4x2)")),
    "consumers": ("--consumers", dict(
        choices=CONSUMER_MODES, help="sm_90a persistent kernels: cooperative (the consumer "
        "warpgroups share each tile, the default) or pingpong (two warpgroups each own a "
        "tile of --warpgroup-rows rows and take turns on the tensor cores, one's epilogue "
        "under the other's "
        "products)")),
    "warpgroup_rows": ("--warpgroup-rows", dict(
        type=int, choices=WARPGROUP_ROWS, metavar="ROWS",
        help="sm_90a wgmma kernels: the rows of the block tile a consumer warpgroup owns: 64 "
        "(one m64 wgmma per k step, the default) or 128 (two, BN accumulators a thread: "
        "256x128 cooperative on two warpgroups, or pingpong with BM=128)")),
    "tma_swizzle": ("--tma-swizzle", dict(
        type=int, choices=TMA_SWIZZLES, metavar="BYTES",
        help="sm_90a wgmma kernels: the span of TMA's swizzle for the operand tiles, 128, 64 "
        "or 32 bytes (default 0: the swizzle pass chooses, the widest the tile's rows take)")),
    "stream_k": ("--stream-k", dict(
        action="store_true", default=None,
        help="sm_90a persistent cooperative kernels: stream-K (whole tiles, then the last "
        "waves' K steps shared evenly among the blocks; split tiles meet in a workspace)")),
    "fp8_accumulation": ("--fp8-accumulation", dict(
        choices=FP8_ACCUMULATIONS, help="sm_90a wgmma kernels on fp8 operands: fast (the sums "
        "stay in the tensor cores' accumulator, as cuBLAS's use_fast_accum=True; the default) "
        "or promoted (each K step's sums added into a separate f32 accumulator, as cuBLAS's "
        "default: more accurate, twice the accumulator registers)")),
    "swap_product": ("--swap-product", dict(
        choices=SWAP_PRODUCTS, help="sm_90a wgmma kernels: which products are computed as "
        "C.T = B.T @ A.T: auto (those converting 8-bit weights in the K loop, the default) "
        "or always (plain ones too: BM then runs along wgmma's n, any multiple of 8)")),
    "pack": ("--pack", dict(
        choices=PACK_POLICIES, help="copy matmul operands whose rows are not 16-byte aligned "
        "into aligned scratch at launch, and 8-bit weights converted in the K loop into "
        "16-bit scratch (default auto: when it pays; always for an 8-bit [K, N] weight)")),
    "peel": ("--peel", dict(
        action="store_true", default=None, help="run a grid axis's partial last tile (N = "
        "2056 in 128-wide tiles: the last 8 columns) as a second launch of 64-wide tiles, "
        "after the whole tiles' launch, where the program allows it")),
    "misaligned_copy": ("--misaligned-copy", dict(
        choices=MISALIGNED_COPIES, help="how copies read 16-bit operand rows too misaligned "
        "for cp.async (odd strides, left unpacked): elements (one a thread and access, the "
        "default), vectors (16-byte shared vectors loaded element by element) or words "
        "(the aligned 4-byte words covering each vector, shifted into place)")),
    "misaligned_store": ("--misaligned-store", dict(
        choices=MISALIGNED_STORES, help="how the epilogue stores 16-bit C rows that are only "
        "2-byte aligned: elements (each alone, the default), pairs (a 4-byte store of two "
        "neighbours where the row's address is 4-byte aligned at run time) or rows (mma.sync "
        "kernels: C's tile staged in shared memory, each warp storing whole rows)")),
    "backend": ("--backend", dict(
        choices=BACKENDS, help="what writes the PTX: ptx (tilec's own emitter, the default) "
        "or llvm (LLVM IR with NVVM intrinsics through LLVM's NVPTX target, via llvmlite)")),
    "llvm_opt": ("--llvm-opt", dict(
        type=int, choices=LLVM_OPT_LEVELS, metavar="N",
        help="--backend llvm: the level of LLVM's optimisation pipeline, 0 to 3 (default 3)")),
    "disable": ("--disable", dict(
        metavar="PASS", action="append", default=[], choices=_pass_names,  # see add_flags
        help="skip a pass")),
    "verify": ("--verify", dict(
        action="store_true", help="run the IR verifier after every pass")),
    # Sizes the compiler may specialise on (compile, explain); run and bisect override the
    # help and metavar: for them the sizes are the problem's, with DEFAULT_SHAPE's defaults.
    "shape": ("--shape", dict(
        metavar="M=4096", action="append", default=[], type=assignments("shape", size, "a size"),
        help="sizes the kernel will see, so the compiler can drop the edge masks of "
        "dimensions the tiles divide")),
    "scalar": ("--scalar", dict(
        metavar="NAME=VALUE", action="append", default=[], type=assignments("scalar"),
        help="a scalar argument's value (default 1)")),
    "seed": ("--seed", dict(type=int, default=0, help="random seed of the inputs")),
}

# The compile options every verb that compiles a named program takes.
COMPILE_FLAGS = ("arch", "stages", "warps", "swizzle", "f32_math", "raster_group", "split_k",
                 *HOPPER_FLAGS, "backend", "llvm_opt", "disable", "verify")
# The --shape help of the verbs that run the program on sizes of their own choosing.
PROBLEM_SHAPE = dict(metavar="M=..,N=..,K=..",
                     help=f"problem size (default: {_default_shape_text()})")


def add_flags(parser: argparse.ArgumentParser, *names: str,
              **changes: dict[str, Any]) -> None:
    """Add the flags of :data:`FLAGS` named ``names``; ``changes[name]`` replaces some of a
    flag's keywords (its help, metavar...)."""
    for name in names:
        flag, keywords = FLAGS[name]
        keywords = {**keywords, **changes.get(name, {})}
        if callable(keywords.get("choices")):  # computed when the flag is added (the passes)
            keywords["choices"] = keywords["choices"]()
        parser.add_argument(flag, **keywords)


# The flags taking NAME=VALUE assignments, which a Parser lets take several in a row.
ASSIGNMENT_FLAGS = tuple(FLAGS[name][0] for name in ("const", "shape", "scalar"))
_ASSIGNMENT = re.compile(r"[^\W\d]\w*=")  # NAME=..., NAME an identifier


def split_assignments(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--const A=1 B=2`` written ``--const A=1 --const B=2`` (for every flag of
    :data:`ASSIGNMENT_FLAGS`): the words after such a flag's value that look like NAME=VALUE
    each get the flag again. Words after ``--`` are left alone."""
    out: list[str] = []
    flag: Optional[str] = None  # the assignment flag whose values are being read
    for index, word in enumerate(argv):
        if word == "--":
            return out + list(argv[index:])
        if flag is not None and out[-1] != flag and _ASSIGNMENT.match(word):
            out.append(flag)
        elif flag is None or out[-1] != flag:
            named = word.partition("=")[0] if word.startswith("--") else word  # --const=A=1
            flag = named if named in ASSIGNMENT_FLAGS else None
        out.append(word)
    return out


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose NAME=VALUE flags take several assignments in a row
    (:func:`split_assignments`); subcommands' parsers are of the same class."""

    def parse_known_args(self, args: Optional[Sequence[str]] = None,
                         namespace: Optional[argparse.Namespace] = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        if args is None:
            args = sys.argv[1:]
        return super().parse_known_args(split_assignments(args), namespace)


def add_program_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """FILE, --kernel and --const (``verb`` completes --kernel's help: "the tile function to
    <verb>")."""
    parser.add_argument("file", metavar="FILE", type=Path, help="a .py or .tile file")
    parser.add_argument("--kernel", metavar="NAME",
                        help=f"the tile function to {verb} (default: every one in FILE)")
    add_flags(parser, "const")


# ------------------------------------------------------------------- values of a program

def merged(groups: list[list[tuple[str, Any]]]) -> dict[str, Any]:
    """One dict from repeated ``NAME=VALUE,...`` flags; a later value wins."""
    return {name: value for group in groups for name, value in group}


def select_functions(path: Path, name: Optional[str]) -> list[TileFunction]:
    """The tile functions of ``path``: the one named, or every one."""
    from tilec.kernel import load_file
    functions = load_file(path)
    if not functions:
        raise CommandError(f"{path} has no tile functions (functions decorated with @tile)")
    if name is None:
        return list(functions.values())
    if name not in functions:
        raise CommandError(f"{path} has no tile function '{name}'; it has: "
                           f"{', '.join(functions)}")
    return [functions[name]]


def check_known(fn: TileFunction, what: str, given: dict[str, Any],
                known: Sequence[str]) -> None:
    unknown = [name for name in given if name not in known]
    if unknown:
        listed = ", ".join(known) if known else "none"
        raise CommandError(f"kernel '{fn.name}' has no {what} {', '.join(unknown)} "
                           f"(its {what}s: {listed})")


def constants(fn: TileFunction, args: argparse.Namespace) -> dict[str, Any]:
    consts = merged(args.const)
    check_known(fn, "constant", consts, list(fn.signature.consts))
    return consts


def shapes(fn: TileFunction, args: argparse.Namespace,
           defaults: Optional[dict[str, int]] = None) -> dict[str, int]:
    """The --shape sizes; with ``defaults``, a size for every shape symbol."""
    given = merged(args.shape)
    check_known(fn, "shape symbol", given, fn.signature.symbols)
    if defaults is None:
        return given
    sizes = {s: defaults.get(s, DEFAULT_SYMBOL_SIZE) for s in fn.signature.symbols}
    sizes.update(given)
    return sizes


def scalars(fn: TileFunction, args: argparse.Namespace) -> dict[str, Union[int, float]]:
    """Every scalar parameter's value: --scalar's, else 1."""
    params = [p for p in fn.signature.params if p.kind == "scalar"]
    given = merged(args.scalar)
    check_known(fn, "scalar parameter", given, [p.name for p in params])
    values: dict[str, Union[int, float]] = {}
    for param in params:
        value = given.get(param.name, 1)
        if param.dtype == I32:
            if not float(value).is_integer():
                raise CommandError(f"scalar '{param.name}' is i32, got {value}")
            values[param.name] = int(value)
        else:
            values[param.name] = float(value)
    return values


def compile_options(args: argparse.Namespace, complete: bool = True) -> dict[str, Any]:
    """The compile options given on the command line, whichever of them the verb takes; the
    others keep Options' defaults. ``complete``: they are all the options the verb compiles
    with, so flags that cannot go together (``--consumers pingpong`` without
    ``--persistent``) are a usage error here, not a traceback later; the bench completes
    them with tuned configurations first."""
    options = {name: getattr(args, name, None) for name in OPTION_FLAGS}
    options = {name: value for name, value in options.items() if value is not None}
    if getattr(args, "disable", None):
        options["disable"] = tuple(args.disable)
    if getattr(args, "verify", False):
        options["verify"] = True
    if getattr(args, "annotate", False):
        options["annotate"] = True
    if complete:
        try:
            Options(**options)
        except ValueError as err:
            raise CommandError(str(err)) from None
    return options


# ------------------------------------------------------------------------------- running

def run_handler(args: argparse.Namespace, prog: str) -> int:
    """Run a parsed command (its ``handler``); program errors print as the user should see
    them, with exit status 1."""
    try:
        return args.handler(args)
    except (TileError, CommandError) as err:
        print(error_message(err, prog), file=sys.stderr)
    except _runtime_errors() as err:
        print(f"{prog}: {type(err).__name__}: {err}", file=sys.stderr)
    return 1


def error_message(err: Union[TileError, CommandError, OSError], prog: str = "tilec") -> str:
    """How an error is printed: at its place in the program (``file:line:col: error: ...``
    and the caret), or, when it has no place (a missing file, a bad request), after
    ``prog:`` as argparse prints its errors."""
    if isinstance(err, TileError):
        return err.render() if err.loc else f"{prog}: {err.render()}"
    return f"{prog}: error: {err}"


def _runtime_errors() -> tuple[type[Exception], ...]:
    """Failures of the driver or the interpreter: reported, not dumped as tracebacks."""
    from tilec.cpu.interpreter import InterpreterError
    from tilec.runtime.driver import CudaError, GpuUnavailableError
    return (CudaError, GpuUnavailableError, InterpreterError)
