"""The ``tilec`` command line: compile a tile program to PTX, or run it and check the result.

    tilec compile samples/matmul.py --arch sm_90 -o matmul.ptx --dump-ir tiling
    tilec run samples/matmul.py --shape M=200,N=136,K=72
    tilec explain samples/matmul.py --stages 4 --swizzle off

Files are parsed, never imported. A file with several tile functions and no ``--kernel``:
``compile`` writes every kernel's PTX to stdout, each under a ``// ===== kernel NAME`` line
(``-o`` then needs ``--kernel``: one PTX module per file), and ``run`` runs and checks each.
Exit status: 0 success, 1 a failed check or an error in the program, 2 a bad command line.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence, TextIO, Union

import numpy as np

from tilec.errors import TileError
from tilec.ir.core import Kernel
from tilec.ir.types import BF16, F16, F32, I32, DType, TensorType
from tilec.kernel import TileFunction, load_file, written_params
from tilec.options import ARCHS, F32_MATH, MAX_SPLIT_K, PACK_POLICIES, target_arch
from tilec.families.products import family_of
from tilec.pipeline import pipeline

# A small ragged shape: no dimension divides the 128x128x32 tiles, so edge masks are tested.
DEFAULT_SHAPE = {"M": 200, "N": 136, "K": 72}
DEFAULT_SYMBOL_SIZE = 96  # for shape symbols other than M, N and K
# Relative Frobenius error allowed against a reference, by the tensors' dtypes (the loosest
# wins; f32 tensors take f16's): f16 rounds at 2^-11 and bf16 at 2^-8, and K-long f32 sums stay
# far below either.
# Relative Frobenius error allowed per input dtype (others: f16's). f32 products on tf32
# tensor cores (--f32-math tf32) stay near 3e-4 on random inputs, inside f16's 2e-3.
TOLERANCE = {F16: 2e-3, BF16: 1e-2}


class CommandError(Exception):
    """A mistake in what was asked (no such kernel, an unknown constant...): its message is
    printed, without a traceback, and the exit status is 1."""


# ------------------------------------------------------------------------- argument types

def _number(text: str) -> Union[int, float]:
    try:
        return int(text)
    except ValueError:
        return float(text)


def _assignments(kind: str, convert=_number, expected: str = "a number"):
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


def _size(text: str) -> int:
    size = int(text)
    if size < 0:
        raise ValueError(text)
    return size


def _warps(text: str) -> tuple[int, int]:
    rows, x, cols = text.lower().partition("x")
    try:
        warps = (int(rows), int(cols))
    except ValueError:
        warps = (0, 0)
    if not x or min(warps) < 1:
        raise argparse.ArgumentTypeError(f"expected warps as MxN (e.g. 2x2), got {text!r}")
    return warps


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _split_k(text: str) -> int:
    value = _positive(text)
    if value > MAX_SPLIT_K:
        raise argparse.ArgumentTypeError(f"split-K takes 1 to {MAX_SPLIT_K} slices, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tilec", description="Compile tile-level matmul programs to PTX, and run them.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("file", metavar="FILE", type=Path, help="a .py or .tile file")
    common.add_argument("--kernel", metavar="NAME",
                        help="the tile function to use (default: every one in FILE)")
    common.add_argument("--const", metavar="NAME=VALUE", action="append", default=[],
                        type=_assignments("constant"),
                        help="override a compile-time constant, e.g. --const BM=64")
    common.add_argument("--arch", choices=list(ARCHS),
                        help="target (compile default: sm_80; run: the GPU's)")
    common.add_argument("--stages", type=_positive, metavar="N",
                        help="shared-memory pipeline stages")
    common.add_argument("--warps", type=_warps, metavar="MxN", help="warp grid, e.g. 2x2")
    common.add_argument("--swizzle", choices=("auto", "off"), help="shared-memory swizzle")
    common.add_argument("--f32-math", choices=F32_MATH,
                        help="products of f32 tiles: ffma (exact f32, the default) or tf32 "
                             "(tensor cores, inputs rounded to tf32)")
    common.add_argument("--raster-group", type=_positive, metavar="N",
                        help="rows of tiles per rasterisation group")
    common.add_argument("--split-k", type=_split_k, metavar="S",
                        help="blocks per output tile along K, each summing a slice (split-K)")
    common.add_argument("--disable", metavar="PASS", action="append", default=[],
                        choices=[p.name for p in pipeline()], help="skip a pass")
    common.add_argument("--verify", action="store_true",
                        help="run the IR verifier after every pass")

    stages = ["all", "tile"] + [p.name for p in pipeline()] + ["sass"]
    compile_cmd = commands.add_parser(
        "compile", parents=[common], help="write a kernel's PTX",
        description="Compile to PTX, written to OUT or stdout. IR dumps go to stderr.")
    compile_cmd.add_argument("--shape", metavar="M=4096", action="append", default=[],
                             type=_assignments("shape", _size, "a size"),
                             help="sizes the kernel will see, so the compiler can drop the "
                             "edge masks of dimensions the tiles divide")
    compile_cmd.add_argument("-o", "--output", metavar="OUT", type=Path,
                             help="write the PTX here instead of stdout")
    compile_cmd.add_argument("--annotate", action="store_true",
                             help="comment each op's PTX with its DSL line, IR op and pass")
    compile_cmd.add_argument("--dump-ir", metavar="STAGE", action="append", default=[],
                             choices=stages,
                             help=f"print a stage's IR to stderr: {', '.join(stages)}")
    compile_cmd.set_defaults(handler=cmd_compile)

    run_cmd = commands.add_parser(
        "run", parents=[common], help="run a kernel on random inputs and check the result",
        description="Run on random inputs (on the GPU, else in the CPU interpreter) and "
        "compare the outputs with a reference; exit status 1 when a check fails.")
    run_cmd.add_argument("--shape", metavar="M=..,N=..,K=..", action="append", default=[],
                         type=_assignments("shape", _size, "a size"),
                         help=f"problem size (default: "
                         f"{','.join(f'{k}={v}' for k, v in DEFAULT_SHAPE.items())})")
    run_cmd.add_argument("--scalar", metavar="NAME=VALUE", action="append", default=[],
                         type=_assignments("scalar"),
                         help="a scalar argument's value (default 1)")
    run_cmd.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    run_cmd.add_argument("--cpu", action="store_true",
                         help="run in the CPU interpreter even when a GPU is present")
    _add_pack_argument(run_cmd)
    run_cmd.set_defaults(handler=cmd_run)

    explain_cmd = commands.add_parser(
        "explain", parents=[common], help="show how a kernel maps to the GPU (no GPU needed)",
        description="Print the tile hierarchy, the copy pipeline's schedule, the shared-memory "
        "plan, bank conflicts of every shared access, and registers (ptxas's report when it "
        "is on PATH); exit status 1 when the schedule has a shared-memory race.")
    explain_cmd.add_argument("--shape", metavar="M=4096", action="append", default=[],
                             type=_assignments("shape", _size, "a size"),
                             help="sizes the kernel will see (as for compile)")
    explain_cmd.add_argument("--no-ptxas", action="store_true",
                             help="skip ptxas's register and spill report")
    _add_pack_argument(explain_cmd)
    explain_cmd.set_defaults(handler=cmd_explain)

    from tilec.tools import bisect
    bisect.add_arguments(commands.add_parser(
        "bisect", help="name the first pass whose IR computes a wrong result (CPU only)",
        description=bisect.DESCRIPTION))

    from tilec.tools import viz
    viz.add_arguments(commands.add_parser(
        "viz", help="draw bank maps and mma fragment ownership as PNGs (needs matplotlib)",
        description="Draw the bank maps of a kernel's shared operand tiles (linear and "
        "swizzled) and the mma.m16n8k16 fragment layout, as PNG files."))

    from tilec.tools import bench
    bench.add_arguments(commands.add_parser(
        "bench", help="time tilec's matmul against cuBLAS and Triton (needs a GPU)",
        description=bench.DESCRIPTION))
    return parser


def _add_pack_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pack", choices=PACK_POLICIES,
                        help="copy matmul operands whose rows are not 16-byte aligned into "
                        "aligned scratch at launch (default auto: when large enough to pay)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_handler(build_parser().parse_args(argv), "tilec")


def run_handler(args: argparse.Namespace, prog: str) -> int:
    """Run a parsed command; program errors print as the user should see them, exit 1."""
    try:
        return args.handler(args)
    except TileError as err:
        print(err.render(), file=sys.stderr)
    except CommandError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
    except _runtime_errors() as err:
        print(f"{prog}: {type(err).__name__}: {err}", file=sys.stderr)
    return 1


def add_kernel_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """FILE, --kernel, --const, --stages and --warps, as the viz and bisect commands take
    them (``verb`` completes --kernel's help: "the tile function to <verb>")."""
    parser.add_argument("file", metavar="FILE", type=Path, help="a .py or .tile file")
    parser.add_argument("--kernel", metavar="NAME",
                        help=f"the tile function to {verb} (default: every one in FILE)")
    parser.add_argument("--const", metavar="NAME=VALUE", action="append", default=[],
                        type=_assignments("constant"),
                        help="override a compile-time constant, e.g. --const BM=64")
    parser.add_argument("--stages", type=_positive, metavar="N",
                        help="shared-memory pipeline stages")
    parser.add_argument("--warps", type=_warps, metavar="MxN", help="warp grid, e.g. 2x2")


def _runtime_errors() -> tuple[type[Exception], ...]:
    """Failures of the driver or the interpreter: reported, not dumped as tracebacks."""
    from tilec.cpu.interpreter import InterpreterError
    from tilec.runtime.driver import CudaError, GpuUnavailableError
    return (CudaError, GpuUnavailableError, InterpreterError)


# ------------------------------------------------------------------------------ shared

def _merged(groups: list[list[tuple[str, Any]]]) -> dict[str, Any]:
    return {name: value for group in groups for name, value in group}


def _select(path: Path, name: Optional[str]) -> list[TileFunction]:
    functions = load_file(path)
    if not functions:
        raise CommandError(f"{path} has no tile functions (functions decorated with @tile)")
    if name is None:
        return list(functions.values())
    if name not in functions:
        raise CommandError(f"{path} has no tile function '{name}'; it has: "
                           f"{', '.join(functions)}")
    return [functions[name]]


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The compile options given on the command line; the others keep Options' defaults."""
    options = {"arch": args.arch, "stages": args.stages, "warps": args.warps,
               "swizzle": args.swizzle, "raster_group": args.raster_group,
               "f32_math": args.f32_math, "pack": getattr(args, "pack", None),
               "split_k": args.split_k}
    options = {name: value for name, value in options.items() if value is not None}
    if args.disable:
        options["disable"] = tuple(args.disable)
    if args.verify:
        options["verify"] = True
    if getattr(args, "annotate", False):
        options["annotate"] = True
    return options


def _checked(fn: TileFunction, what: str, given: dict[str, Any], known: Sequence[str]) -> None:
    unknown = [name for name in given if name not in known]
    if unknown:
        listed = ", ".join(known) if known else "none"
        raise CommandError(f"kernel '{fn.name}' has no {what} {', '.join(unknown)} "
                           f"(its {what}s: {listed})")


def _consts(fn: TileFunction, args: argparse.Namespace) -> dict[str, Any]:
    consts = _merged(args.const)
    _checked(fn, "constant", consts, list(fn.signature.consts))
    return consts


def _shapes(fn: TileFunction, args: argparse.Namespace,
            defaults: Optional[dict[str, int]] = None) -> dict[str, int]:
    """The --shape sizes; with ``defaults``, a size for every shape symbol."""
    given = _merged(args.shape)
    _checked(fn, "shape symbol", given, fn.signature.symbols)
    if defaults is None:
        return given
    sizes = {s: defaults.get(s, DEFAULT_SYMBOL_SIZE) for s in fn.signature.symbols}
    sizes.update(given)
    return sizes


def summary(compiled) -> str:
    """One line about a compiled kernel: its tiling, launch shape and PTX size."""
    schedule = compiled.kernel.schedule
    plan = schedule.tiling
    rendered = compiled.rendered
    parts = [compiled.options.arch]
    if plan is not None:
        parts.append("tile " + "x".join(str(d) for d in plan.block))
        parts.append(f"warps {plan.warps[0]}x{plan.warps[1]}")
        if family_of(plan).f32_math == "tf32":  # not the default: say the products round
            parts.append("tf32 tensor cores")
    parts.append(f"{rendered.threads} threads")
    stages = schedule.stages if schedule.pipeline is not None else compiled.options.stages
    parts.append(f"{stages} stages")
    parts.append(f"{rendered.smem_bytes / 1024:g} KiB shared memory")
    if schedule.splits > 1:
        parts.append(f"split-K {schedule.splits}")
    ptx = rendered.ptx
    parts.append(f"PTX {ptx.count(chr(10)):,} lines, {len(ptx.encode()) / 1024:.1f} KiB")
    return ", ".join(parts)


# ----------------------------------------------------------------------------- compile

def cmd_compile(args: argparse.Namespace) -> int:
    functions = _select(args.file, args.kernel)
    if args.output is not None and len(functions) > 1:
        raise CommandError(f"{args.file} has several tile functions "
                           f"({', '.join(f.name for f in functions)}); -o writes one PTX "
                           "module: choose one with --kernel")
    stage_names = ["tile"] + [p.name for p in pipeline()]
    wanted = [s for s in stage_names if s in args.dump_ir or "all" in args.dump_ir]
    for fn in functions:
        consts = _consts(fn, args)
        shapes = _shapes(fn, args)
        compiled = fn.compile(keep_ir=bool(wanted), **_options(args), **consts, **shapes)
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
        if args.output is not None:
            args.output.write_text(compiled.ptx, encoding="utf-8")
            print(f"tilec: wrote {args.output}: {fn.name} for {summary(compiled)}",
                  file=sys.stderr)
        else:
            if len(functions) > 1:
                sys.stdout.write(f"// ===== kernel {fn.name}: {summary(compiled)}\n")
            sys.stdout.write(compiled.ptx)
    return 0


def _dump(fn: TileFunction, stage: str, text: str, out: TextIO) -> None:
    what = "tile IR from the frontend" if stage == "tile" else f"IR after pass '{stage}'"
    out.write(f"===== {fn.name}: {what} =====\n{text.rstrip()}\n\n")


# ----------------------------------------------------------------------------- explain

def cmd_explain(args: argparse.Namespace) -> int:
    from tilec.tools.explain import explain, render_explanation
    sound = True
    for index, fn in enumerate(_select(args.file, args.kernel)):
        consts, shapes, options = _consts(fn, args), _shapes(fn, args), _options(args)
        packing = None
        if set(fn.signature.symbols) <= set(shapes):  # the launch's layout facts are known
            plan, spec = _row_major_launch(fn.lower(**consts), shapes, options)
            compiled = fn.compile(spec=spec, **options, **consts)
            packing = plan.describe()
        else:
            compiled = fn.compile(**options, **consts, **shapes)
        explanation = explain(compiled, ptxas=not args.no_ptxas, packing=packing)
        sys.stdout.write(("\n" if index else "") + render_explanation(explanation))
        sound &= not explanation.hazard
    return 0 if sound else 1


def _row_major_launch(kernel: Kernel, sizes: dict[str, int], options: dict[str, Any]):
    """(the operands a GPU launch packs, the spec it compiles for) on fresh row-major arrays
    of these sizes: what ``run`` stages host arrays as."""
    from tilec.options import Options
    from tilec.launch.packing import row_major_launch
    policy = options.get("pack", Options.pack)
    return row_major_launch(kernel, sizes, policy, written_params(kernel))


# --------------------------------------------------------------------------------- run

def cmd_run(args: argparse.Namespace) -> int:
    from tilec.runtime.driver import gpu_unavailable_reason, has_gpu
    on_gpu = not args.cpu and has_gpu()
    if args.cpu:
        where = "CPU interpreter (--cpu)"
    elif on_gpu:
        from tilec.runtime import current_device
        device = current_device()
        where = f"GPU {device.ordinal}: {device.name} ({device.arch})"
    else:
        where = f"CPU interpreter (no GPU: {gpu_unavailable_reason()})"
    failed = False
    for fn in _select(args.file, args.kernel):
        failed |= not run_and_check(fn, args, on_gpu, where)
    return 1 if failed else 0


def run_and_check(fn: TileFunction, args: argparse.Namespace, on_gpu: bool,
                  where: str) -> bool:
    """Run one kernel on random inputs and compare its outputs; True when every check
    passes (or nothing could be checked)."""
    consts = _consts(fn, args)
    sizes = _shapes(fn, args, DEFAULT_SHAPE)
    scalars = _scalars(fn, args)
    kernel = fn.lower(**consts)
    written = written_params(kernel)
    arrays = _inputs(kernel, sizes, written, np.random.default_rng(args.seed), on_gpu)
    before = {name: _float64(array, _dtype(kernel, name)) for name, array in arrays.items()}

    options = _options(args)
    if on_gpu:
        from tilec.runtime import current_device
        options.setdefault("arch", target_arch(current_device().compute_capability))
    packing, spec = _row_major_launch(kernel, sizes, options)
    compiled = fn.compile(spec=spec, **options, **consts)
    print(f"{fn.name} from {args.file}")
    print(f"  shapes    {_describe_args(kernel, arrays, scalars)}")
    print(f"  compiled  {summary(compiled)}")
    if on_gpu:
        for line in packing.describe():
            print(f"  packed    {line}")

    values = {**{name: array.copy() for name, array in arrays.items()}, **scalars}
    start = time.perf_counter()
    if on_gpu:
        fn(**values, device="gpu", **options, **consts)
    else:
        from tilec.cpu.interpreter import run_kernel
        run_kernel(kernel, values)
    print(f"  ran on    {where} in {time.perf_counter() - start:.2f} s")

    references = _references(kernel, arrays, before, scalars, on_gpu)
    tolerance = max(TOLERANCE.get(p.type.dtype, TOLERANCE[F16]) for p in kernel.params
                    if isinstance(p.type, TensorType))
    passed = True
    for label, outputs in references:
        if isinstance(outputs, str):
            print(f"  check     vs {label}: not available ({outputs})")
            continue
        for name in written:
            out = _float64(values[name], _dtype(kernel, name))
            max_abs, rel = errors(out, outputs[name])
            ok = rel <= tolerance  # False for NaN: unwritten (poisoned) outputs fail
            passed &= ok
            nans = int(np.count_nonzero(np.isnan(out)))
            note = f", {nans} NaN elements (outputs start as NaN)" if nans else ""
            print(f"  check     {name} vs {label}: max abs err {max_abs:.3g}, rel Frobenius "
                  f"err {rel:.3g} (tolerance {tolerance:g}){note} {'ok' if ok else 'FAILED'}")
    if all(isinstance(outputs, str) for _, outputs in references):
        print("UNCHECKED: no reference could be computed for this kernel")
        return True
    print("PASS" if passed else "FAIL")
    return passed


def _references(kernel: Kernel, arrays: dict[str, np.ndarray], before: dict[str, np.ndarray],
                scalars: dict[str, Any], on_gpu: bool) -> list[tuple[str, Any]]:
    """(label, outputs by name, or the reason there are none) for each reference."""
    from tilec.cpu.reference import Unsupported, reference
    references: list[tuple[str, Any]] = []
    if on_gpu:
        # The interpreter follows the GPU's numerics tile by tile: the closest comparison.
        from tilec.cpu.interpreter import run_kernel
        values = {**{name: array.copy() for name, array in arrays.items()}, **scalars}
        run_kernel(kernel, values)
        references.append(("CPU interpreter", {
            name: _float64(values[name], _dtype(kernel, name)) for name in arrays}))
    try:
        references.append(("float64 reference", reference(kernel, before, scalars)))
    except Unsupported as why:
        references.append(("float64 reference", str(why)))
    return references


def errors(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(max abs error, relative Frobenius error); NaN anywhere in ``out`` gives NaN."""
    with np.errstate(invalid="ignore"):
        diff = out - ref
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    norm = float(np.linalg.norm(ref))
    rel = float(np.linalg.norm(diff)) / norm if norm > 0 else float(np.linalg.norm(diff))
    return max_abs, rel


def _scalars(fn: TileFunction, args: argparse.Namespace) -> dict[str, Union[int, float]]:
    params = [p for p in fn.signature.params if p.kind == "scalar"]
    given = _merged(args.scalar)
    _checked(fn, "scalar parameter", given, [p.name for p in params])
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


def _dtype(kernel: Kernel, name: str) -> DType:
    return next(p.type.dtype for p in kernel.params if p.name == name)


def _loaded_params(kernel: Kernel) -> set[str]:
    views = {op.result: op.operands[0] for op in kernel.walk() if op.name == "tensor.transpose"}
    loaded = {op.operands[0] for op in kernel.walk() if op.name == "tile.load"}
    loaded |= {views[v] for v in list(loaded) if v in views}
    return {p.name for p, v in zip(kernel.params, kernel.body.args) if v in loaded}


def _inputs(kernel: Kernel, sizes: dict[str, int], written: list[str],
            rng: np.random.Generator, on_gpu: bool) -> dict[str, np.ndarray]:
    """Random tensors for what the kernel reads; NaN for what it only writes, so that an
    element the kernel fails to write shows up in the check."""
    loaded = _loaded_params(kernel)
    arrays = {}
    for param in kernel.params:
        if not isinstance(param.type, TensorType):
            continue
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in param.type.shape)
        if param.name in written and param.name not in loaded:
            values = np.full(shape, np.nan, dtype=np.float32)
        else:
            values = rng.standard_normal(shape, dtype=np.float32)
        arrays[param.name] = _as_dtype(values, param.type.dtype, param.name, on_gpu)
    return arrays


def _as_dtype(values: np.ndarray, dtype: DType, name: str, on_gpu: bool) -> np.ndarray:
    if dtype == F16:
        return values.astype(np.float16)
    if dtype == F32:
        return values
    from tilec.runtime.arrays import to_bf16_bits
    bits = to_bf16_bits(values)
    try:
        import ml_dtypes
    except ImportError:
        if on_gpu:
            raise CommandError(f"'{name}' is bf16: passing bf16 host arrays to the GPU needs "
                               "ml_dtypes (python -m pip install ml-dtypes)") from None
        return bits  # the interpreter takes raw bf16 bits
    return bits.view(ml_dtypes.bfloat16)


def _float64(array: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype == BF16:
        from tilec.runtime.arrays import from_bf16_bits
        return from_bf16_bits(array).astype(np.float64)
    return np.asarray(array, dtype=np.float64)


def _describe_args(kernel: Kernel, arrays: dict[str, np.ndarray],
                   scalars: dict[str, Any]) -> str:
    parts = []
    for param in kernel.params:
        if param.name in arrays:
            dims = ",".join(str(d) for d in arrays[param.name].shape)
            parts.append(f"{param.name} {param.type.dtype}[{dims}]")
        else:
            parts.append(f"{param.name}={scalars[param.name]:g}")
    return ", ".join(parts)
