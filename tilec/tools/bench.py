"""``tilec bench``: tilec's matmul against cuBLAS and Triton, timed in one process and run.

Contenders: tilec (``samples/matmul.py``, its A and B retyped for each dtype; C is f32),
cuBLAS through ``torch.matmul`` (else ``cupy.matmul``; C in the inputs' dtype, f32 products
with TF32 off) and a Triton matmul (when Triton is installed; C is f32). The ``tf32`` dtype
(``--dtypes tf32``, not in the default sweep) is f32 operands with TF32 tensor-core math for
every contender: tilec with ``f32_math="tf32"``, cuBLAS with TF32 allowed for those products
only, Triton's default (TF32) f32 dot. For every case each contender is checked before it
is timed: its outputs poisoned with NaN, one launch per input set, then the relative
Frobenius error against a float64 product of the same inputs (first and last set; every
other set must hold no NaN), within 2e-3 for f16 and tf32, 1e-2 for bf16 and 1e-4 for f32.
A contender that fails is reported as FAIL and never timed or compared. Times are medians of
CUDA events around each call (through torch or cupy), warm-up excluded, each call after a
read-only pass over 4x the L2 cache (so it starts cold, with no dirty lines of earlier work
to write back; ``tilec/benchmarking/timing.py`` says why not do_bench's flush), inputs
rotated among enough sets to exceed 3x the L2 cache.

Batched rows (``--sizes BtxMxNxK``; the default sweep ends with 32x1024x1024x1024 and
8x4095x4097x128 in f16): Bt products C[b] = A[b] @ B[b] of 3-D arrays, tilec running
``samples/bmm.py`` against cuBLAS through ``torch.bmm`` (``torch.matmul`` of 3-D tensors);
the Triton kernel is 2-D and sits them out (n/a, said under the table).

Printed first, measured in the same run: the device-to-device copy bandwidth and the ceiling
of the mma.sync path (a register-only loop of ``mma.sync.m16n8k16``); each case is then set
against its roofline bound (the larger of the mma time and the memory time of A, B and C)::

    tilec bench                                  # the default sweep, f16 bf16 f32
    tilec bench --sizes 4096 16x8192x8192 --dtypes f16 --json out.json --plot out.png
    tilec bench --autotune --quick
    tilec bench --epilogue bias_gelu             # f16 GEMM + bias + GELU, 4096^3
    tilec bench --sizes 4096 --variant st4='--stages 4'   # a tilec[st4] column beside tilec

``--variant NAME=FLAGS`` (repeatable) adds tilec columns compiled with flags of their own
over the command line's, timed in the same run on the same inputs, each with its speed-up
over the tilec column.

With ``--epilogue bias_gelu`` the rows are C = gelu(A @ B + bias), f16
(``samples/gemm_gelu.py``), against torch.matmul followed by torch's epilogue (the unfused
pair) and Triton with the epilogue fused (``tilec/benchmarking/epilogue.py``).

With ``--w8a16`` the rows are weight-only quantization, C = (A @ W.T) * scale with f16 A, int8
W [N, K] and per-channel f32 scales (``samples/w8a16.py``, default sizes 16x8192x8192,
512x8192x8192 and 4096), against torch dequantizing W to f16 then torch.matmul
(``tilec/benchmarking/w8a16.py``).

Exit status: 0 when every contender passed its check, 1 when one failed or raised, 2 for a
bad command line or a machine that cannot run it (no GPU, neither torch nor cupy).
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from tilec.tools import arguments
from tilec.tools.arguments import CommandError

# The parts live in tilec/benchmarking/ (its __init__ lists them); every name the tests and
# benchmarks/ use stays importable from here. run() looks its parts up in this
# module, so patching tilec.tools.bench.<name> (as the CPU tests do) reaches the command; the parts
# themselves look each other up in their own modules.
from tilec.benchmarking.array_libraries import (
    FALLBACK_L2_BYTES,
    Arrays,
    CupyArrays,
    TorchArrays,
    open_arrays,
)
from tilec.benchmarking.cases import (
    BENCH_TOLERANCE,
    DEFAULT_BATCHED_SIZES,
    DEFAULT_DTYPES,
    DEFAULT_SIZES,
    DTYPES,
    ITEMSIZE,
    L2_FACTOR,
    MAX_SETS,
    MIN_SETS,
    SKINNY_RATIO,
    TILEC_DTYPES,
    TWO_D_DTYPES,
    Case,
    Size,
    parse_sizes,
    rotation_sets,
    size_text,
    sweep,
)
from tilec.benchmarking.ceilings import (
    COPY_MIN_BYTES,
    MMA_BLOCKS_PER_SM,
    MMA_CHAINS,
    MMA_ENTRY,
    MMA_FLOP,
    MMA_SEED,
    MMA_TARGET_MS,
    MMA_TRIPS,
    MMA_UNROLL,
    MMA_WARPS,
    copy_bandwidth,
    measure_references,
    mma_ceiling,
    mma_loop_ptx,
)
from tilec.benchmarking.check_and_time import measure, progress_line, run_case, run_sweep
from tilec.benchmarking.contenders import (
    SAMPLE,
    Contender,
    CublasContender,
    LlvmTilecContender,
    Run,
    TilecContender,
    TritonContender,
    VariantTilecContender,
    describe_compiled,
    sample_kernel,
)
from tilec.benchmarking.tuning import C_DTYPES, autotune_space
from tilec.benchmarking.epilogue import (
    EPILOGUE_DTYPES,
    EPILOGUES,
    EpilogueCase,
    epilogue_cases,
    epilogue_contenders,
    run_epilogue_case,
)
from tilec.benchmarking.json_report import report_json
from tilec.benchmarking.w8a16 import W8A16Case, run_w8a16_case, w8a16_cases, w8a16_contenders
from tilec.benchmarking.plot import (
    CONTENDER_COLORS,
    DTYPE_STYLES,
    MATPLOTLIB_MISSING,
    require_matplotlib,
    write_plot,
)
from tilec.benchmarking.results import CaseResult, Measurement, References, Report
from tilec.benchmarking.table import format_notes, format_references, format_table
from tilec.benchmarking.timing import (
    EVENT_ESTIMATE_CALLS,
    EVENT_MAX_REPS,
    EVENT_MIN_REPS,
    FLUSH_L2_FACTOR,
    REP_MS,
    TIMER_NAME,
    WARMUP_MS,
    Timer,
    event_timer,
    make_timer,
    rotating,
)
from tilec.benchmarking.triton_kernel import TRITON_CONFIG, triton_matmul

__all__ = [
    "DESCRIPTION", "add_arguments", "main", "run",
    # array_libraries
    "FALLBACK_L2_BYTES", "Arrays", "CupyArrays", "TorchArrays", "open_arrays",
    # cases
    "BENCH_TOLERANCE", "DEFAULT_BATCHED_SIZES", "DEFAULT_DTYPES", "DEFAULT_SIZES", "DTYPES",
    "ITEMSIZE", "L2_FACTOR", "MAX_SETS", "MIN_SETS", "SKINNY_RATIO", "TILEC_DTYPES", "Case",
    "Size", "parse_sizes", "rotation_sets", "size_text", "sweep",
    # ceilings
    "COPY_MIN_BYTES", "MMA_BLOCKS_PER_SM", "MMA_CHAINS", "MMA_ENTRY", "MMA_FLOP", "MMA_SEED",
    "MMA_TARGET_MS", "MMA_TRIPS", "MMA_UNROLL", "MMA_WARPS", "copy_bandwidth",
    "measure_references", "mma_ceiling", "mma_loop_ptx",
    # check_and_time
    "measure", "progress_line", "run_case", "run_sweep",
    # contenders
    "SAMPLE", "Contender", "CublasContender", "Run", "TilecContender", "TritonContender",
    "autotune_space", "describe_compiled", "sample_kernel",
    # epilogue
    "EPILOGUE_DTYPES", "EPILOGUES", "EpilogueCase", "epilogue_cases", "epilogue_contenders",
    "run_epilogue_case",
    # w8a16
    "W8A16Case", "run_w8a16_case", "w8a16_cases", "w8a16_contenders",
    # json_report, plot, results, table
    "report_json", "CONTENDER_COLORS", "DTYPE_STYLES", "MATPLOTLIB_MISSING",
    "require_matplotlib", "write_plot", "CaseResult", "Measurement", "References", "Report",
    "format_notes", "format_references", "format_table",
    # timing
    "EVENT_ESTIMATE_CALLS", "EVENT_MAX_REPS", "EVENT_MIN_REPS", "FLUSH_L2_FACTOR", "REP_MS",
    "TIMER_NAME", "WARMUP_MS", "Timer", "event_timer", "make_timer", "rotating",
    # triton_kernel
    "TRITON_CONFIG", "triton_matmul",
]

DESCRIPTION = ("Time tilec's matmul against cuBLAS and Triton on this GPU: checked outputs, "
               "median device-event times over rotated inputs, and the copy bandwidth and "
               "mma.sync ceiling measured in the same run.")


def add_arguments(parser: argparse.ArgumentParser, default_sizes: Optional[Sequence[str]] = None,
                  default_dtypes: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The ``tilec bench`` arguments, on ``parser`` (a subcommand's, or :func:`main`'s).
    ``default_sizes`` and ``default_dtypes`` replace the default sweep."""
    shown_sizes = default_sizes or [size_text(size) for size in DEFAULT_SIZES]
    parser.add_argument("--sizes", nargs="+", type=parse_sizes, metavar="SIZE",
                        help="N for N^3, MxNxK, or BtxMxNxK for Bt batched products; "
                        "commas or spaces between (default: "
                        f"{', '.join(shown_sizes)}, then f16 batched "
                        f"{', '.join(size_text(size) for size in DEFAULT_BATCHED_SIZES)})")
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, metavar="DTYPE",
                        help=f"operand dtypes among {', '.join(DTYPES)}; tf32: f32 operands "
                        "with TF32 tensor-core math for every contender (default: "
                        f"{', '.join(default_dtypes or DEFAULT_DTYPES)})")
    # The compile flags of the other verbs, said of the tilec contender.
    arguments.add_flags(
        parser, "const", "arch", "stages", "warps", "swizzle", "raster_group", "split_k",
        "f32_math", "pack", "peel", "misaligned_copy", "misaligned_store",
        *arguments.HOPPER_FLAGS,
        "backend", "llvm_opt", "disable",
        disable={"help": "skip a pass in tilec's kernels (every row; --variant NAME='--disable "
                 "PASS' times both in one run)"},
        backend={"help": "llvm: add a column for tilec's kernels compiled through LLVM "
                 "(backend='llvm') beside its own PTX backend's, with the ratio of the two"},
        const={"help": "tilec constants, e.g. --const BM=128 BN=64 (or BM=128,BN=64)"},
        arch={"help": "tilec's target (default: the GPU's, sm_90a on an H100 or H200; "
              "sm_90 to compare with the mma.sync path)"},
        stages={"help": "tilec's shared-memory pipeline stages"},
        warps={"help": "tilec's warp grid, e.g. 2x4"},
        swizzle={"help": "tilec's shared swizzle"},
        split_k={"help": "tilec's blocks per output tile along K (split-K)"},
        f32_math={"help": "tilec's math for the f32 rows (default ffma; checked with the tf32 "
                  "tolerance when tf32); the tf32 rows always use tf32"},
        pack={"help": "tilec's packing of misaligned operands at launch (default auto)"},
        misaligned_copy={"help": "how tilec's copies read operand rows too misaligned for "
                         "cp.async, left unpacked: elements, vectors or words (default: the "
                         "tuned config's, else elements)"},
        misaligned_store={"help": "how tilec's epilogue stores 16-bit C rows that are only "
                          "2-byte aligned: elements, pairs or rows (default: the tuned config's, "
                          "else elements)"})
    parser.add_argument("--c-dtype", choices=C_DTYPES, default="inputs",
                        help="what tilec and Triton write C as for f16/bf16 products: "
                        "'inputs' (their dtype, as torch.matmul writes it; the default) or "
                        "'f32' (twice cuBLAS's bytes)")
    parser.add_argument("--epilogue", choices=sorted(EPILOGUES),
                        help="time a fused epilogue instead of the bare product: bias_gelu, "
                        "C = gelu(A @ B + bias) in f16 (samples/gemm_gelu.py) against "
                        "torch.matmul then torch's epilogue, and Triton with it fused "
                        "(default size: 4096)")
    parser.add_argument("--w8a16", action="store_true",
                        help="time weight-only quantization instead of the bare product: "
                        "C = (A @ W.T) * scale, f16 A, int8 W [N, K], f32 per-channel scales "
                        "(samples/w8a16.py) against torch dequantizing W then torch.matmul "
                        "(default sizes: 16x8192x8192, 512x8192x8192, 4096)")
    parser.add_argument("--variant", action="append", default=[], type=parse_variant,
                        metavar="NAME=FLAGS",
                        help="another tilec column, tilec[NAME], compiled with FLAGS (tilec's "
                        "compile flags, --arch and --disable PASS among them, quoted as one "
                        "word) over "
                        "the command line's, timed in the same run on the same inputs: e.g. "
                        "--variant st4='--stages 4' --variant noswz='--disable swizzle'; "
                        "repeatable")
    parser.add_argument("--autotune", action="store_true",
                        help="autotune tilec over a small space per shape (cached on disk)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--no-triton", action="store_true",
                        help="time tilec and cuBLAS only: Triton's first call on each shape "
                        "compiles its kernel, seconds a row, which a run comparing tilec "
                        "variants can spare")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every number here")
    parser.add_argument("--plot", type=Path, metavar="FILE.png",
                        help="draw TFLOP/s against size (needs matplotlib)")
    parser.set_defaults(handler=run)
    if default_sizes is not None:
        parser.set_defaults(sizes=[parse_sizes(size) for size in default_sizes])
    if default_dtypes is not None:
        parser.set_defaults(dtypes=list(default_dtypes))
    return parser


def main(argv: Optional[Sequence[str]] = None, *, prog: str = "tilec bench",
         default_sizes: Optional[Sequence[str]] = None,
         default_dtypes: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` and run (benchmarks/bench_matmul.py keeps its 4096 f16 default through
    ``default_sizes`` and ``default_dtypes``)."""
    parser = add_arguments(arguments.Parser(prog=prog, description=DESCRIPTION),
                           default_sizes, default_dtypes)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse has printed the message or the help
        return int(exit_.code or 0)
    return arguments.run_handler(args, prog)


def _tilec_settings(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The constants and options for tilec; unknown constants are a CommandError."""
    consts = arguments.merged(args.const)
    known = sample_kernel("f16").signature.consts
    unknown = [name for name in consts if name not in known]
    if unknown:
        raise CommandError(f"the matmul sample has no constant {', '.join(unknown)} "
                           f"(its constants: {', '.join(known)})")
    return consts, arguments.compile_options(args, complete=False)


# The flags a --variant takes: the constants and every compile flag (--arch and --disable
# among them) but the backend's, which has a column of its own (--backend llvm), and
# --verify; and the bench's launch flags.
VARIANT_FLAGS = ("const", *(name for name in arguments.COMPILE_FLAGS
                            if name not in ("backend", "llvm_opt", "verify")),
                 "pack", "peel", "misaligned_copy", "misaligned_store")
VARIANT_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``NAME=FLAGS`` as (NAME, FLAGS split as a shell would)."""
    name, equals, flags = text.partition("=")
    if not equals or not VARIANT_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"expected NAME=FLAGS, NAME of letters, digits and _ . + -, not {text!r}")
    try:
        return name, shlex.split(flags)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{name}: {err}") from None


class _VariantParser(arguments.Parser):
    """A variant's flags, whose mistakes are the bench's usage errors, named by variant."""

    def error(self, message: str):  # argparse's hook; it must not return
        raise CommandError(f"{self.prog}: {message}")


def _variant_contenders(args: argparse.Namespace, consts: dict[str, Any],
                        options: dict[str, Any]) -> list[VariantTilecContender]:
    """A contender per --variant: the command line's tilec settings, then its own flags."""
    names = [name for name, _ in args.variant]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise CommandError(f"--variant {repeated[0]} is given twice: name each variant once")
    if args.variant and (args.autotune or getattr(args, "epilogue", None)
                         or getattr(args, "w8a16", False)):
        raise CommandError("--variant adds columns to the matmul rows, each with its own "
                           "configuration: not with --autotune, --epilogue or --w8a16")
    variants = []
    for name, flags in args.variant:
        parser = _VariantParser(prog=f"--variant {name}", add_help=False)
        arguments.add_flags(parser, *VARIANT_FLAGS)
        variant_consts, variant_options = _tilec_settings(parser.parse_args(flags))
        variants.append(VariantTilecContender(name, {**consts, **variant_consts},
                                              {**options, **variant_options}))
    return variants


def _check_sweep_args(args: argparse.Namespace) -> None:
    """Batched sizes take the dtypes whose references have a batched form (torch.bmm):
    torch._int_mm and torch._scaled_mm, the i8 and f8e4m3 rows' cuBLAS, take matrices."""
    two_d = [dtype for dtype in args.dtypes or () if dtype in TWO_D_DTYPES]
    batched = [size for group in args.sizes or () for size in group if len(size) == 4]
    if two_d and batched:
        raise CommandError(f"the {', '.join(two_d)} rows are 2-D products MxNxK (their "
                           "cuBLAS references, torch._int_mm and torch._scaled_mm, take "
                           f"matrices), not {'x'.join(map(str, batched[0]))}; batched sizes "
                           "take f16, bf16, f32 or tf32")


def _check_epilogue_args(args: argparse.Namespace) -> None:
    """The epilogue rows are f16 and run the tuned configurations."""
    if args.dtypes and list(args.dtypes) != list(EPILOGUE_DTYPES):
        raise CommandError(f"--epilogue rows are {', '.join(EPILOGUE_DTYPES)} only, not "
                           f"{', '.join(args.dtypes)}")
    if args.autotune:
        raise CommandError("--epilogue rows run the matmul rows' tuned configurations; "
                           "--autotune is for the matmul rows")
    batched = [size for group in args.sizes or () for size in group if len(size) != 3]
    if batched:
        raise CommandError(f"--epilogue rows are 2-D products MxNxK, not "
                           f"{'x'.join(map(str, batched[0]))}")


def _check_w8a16_args(args: argparse.Namespace) -> None:
    """The w8a16 rows are f16 activations, one kind of row at a time, no autotuning."""
    if getattr(args, "epilogue", None) is not None:
        raise CommandError("--w8a16 and --epilogue are different rows: give one")
    if args.dtypes and list(args.dtypes) != ["f16"]:
        raise CommandError(f"--w8a16 rows have f16 activations only, not "
                           f"{', '.join(args.dtypes)}")
    if args.autotune:
        raise CommandError("--w8a16 rows run the sample's configurations (--const overrides); "
                           "--autotune is for the matmul rows")


def bench_contenders(args: argparse.Namespace, arrays: Arrays, consts: dict[str, Any],
                     options: dict[str, Any]) -> list[Contender]:
    """The run's columns: tilec (and its variants, and the llvm backend's kernels under
    ``--backend llvm``, the tilec column staying the PTX backend's), cuBLAS, and Triton where
    it is installed and not ``--no-triton``; or the epilogue's or w8a16's own contenders.
    ``options`` loses the backend's keys."""
    llvm = {key: options.pop(key) for key in ("backend", "llvm_opt") if key in options}
    installed = _triton_version() is not None
    if not installed:
        print("tilec bench: Triton is not installed; timing tilec and cuBLAS only",
              file=sys.stderr)
    triton = installed and not args.no_triton
    epilogue = getattr(args, "epilogue", None)
    if epilogue is not None:
        contenders = epilogue_contenders(arrays, consts, options, triton)
    elif getattr(args, "w8a16", False):
        contenders = w8a16_contenders(arrays, consts, options)
    else:
        accumulation = options.get("fp8_accumulation", "fast")
        contenders = [TilecContender(consts, options, args.autotune),
                      *_variant_contenders(args, consts, options)]
        if llvm.get("backend") == "llvm":
            contenders.append(LlvmTilecContender(consts, {**options, **llvm}, args.autotune))
        contenders.append(CublasContender(arrays, accumulation))
        if triton:
            contenders.append(TritonContender(arrays))
    for contender in contenders:
        contender.c_dtype = args.c_dtype
    return contenders


def _triton_version() -> Optional[str]:
    """Triton's version, or None when it is not installed (no Triton contender then)."""
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def _software(arrays: Arrays, timer_name: str) -> dict[str, str]:
    triton_version = _triton_version()
    return {arrays.name: arrays.version,
            "triton": "not installed" if triton_version is None else triton_version,
            "timer": timer_name}


def run(args: argparse.Namespace) -> int:
    from tilec.runtime.driver import gpu_unavailable_reason, has_gpu
    # The arguments first: a mistake in them is said on any machine.
    epilogue = getattr(args, "epilogue", None)
    w8a16 = getattr(args, "w8a16", False)
    if w8a16:
        _check_w8a16_args(args)
        cases: list[Case] = list(w8a16_cases(args.sizes))
    elif epilogue is not None:
        _check_epilogue_args(args)
        cases = list(epilogue_cases(args.sizes, epilogue))
    else:
        _check_sweep_args(args)
        cases = sweep(args.sizes, args.dtypes)
    if not has_gpu():
        print(f"tilec bench: no GPU ({gpu_unavailable_reason()})", file=sys.stderr)
        return 2
    consts, options = _tilec_settings(args)
    plot = args.plot
    if plot is not None:
        try:
            require_matplotlib()
        except ImportError as err:
            print(f"tilec bench: {err}", file=sys.stderr)
            plot = None
    from tilec.runtime import configured_device_ordinal, current_device
    try:
        arrays = open_arrays(configured_device_ordinal())
    except ImportError as err:
        print(f"tilec bench: {err}", file=sys.stderr)
        return 2
    timer, timer_name = make_timer(arrays, args.quick)
    device = current_device()
    contenders = bench_contenders(args, arrays, consts, options)
    report = Report(
        device={"name": device.name, "arch": device.arch, "sms": device.multiprocessor_count,
                "l2_bytes": arrays.l2_bytes},
        software=_software(arrays, timer_name), references=None,
        contenders=[c.name for c in contenders],
        settings={"dtypes": list(dict.fromkeys(c.dtype for c in cases)), "consts": consts,
                  "options": {k: str(v) for k, v in options.items()},
                  "autotune": args.autotune, "quick": args.quick, "c_dtype": args.c_dtype,
                  "variants": {name: shlex.join(flags) for name, flags in args.variant},
                  "epilogue": epilogue, "w8a16": w8a16,
                  "warmup_ms": WARMUP_MS[args.quick], "rep_ms": REP_MS[args.quick],
                  "tolerance": BENCH_TOLERANCE, "l2_factor": L2_FACTOR,
                  "cublas_f32_tf32": arrays.tf32})
    report.references = measure_references(arrays, timer, report.settings["dtypes"])
    print(format_references(report), flush=True)
    report.rows = run_sweep(cases, arrays, contenders, timer, report.references,
                            progress=sys.stderr,
                            run_one=(run_w8a16_case if w8a16 else
                                     run_epilogue_case if epilogue is not None else None))
    print()
    print(format_table(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report_json(report), indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json}")
    if plot is not None:
        write_plot(report, plot)
        print(f"wrote {plot}")
    elif args.plot is not None:
        print(f"tilec bench: {MATPLOTLIB_MISSING}", file=sys.stderr)
    return 0 if report.ok else 1
