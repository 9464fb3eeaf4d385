"""Running a kernel on random inputs and checking its outputs: what ``tilec run`` and
``tilec bisect`` share.

- Inputs (:func:`random_arguments`): standard normal tensors for what the kernel reads, NaN
  for what it only writes, so that an element the kernel fails to write shows up.
- References (:func:`references`): the CPU interpreter (after a GPU run: it follows the
  GPU's numerics tile by tile) and the float64 whole-tensor reference
  (:mod:`tilec.cpu.reference`), where that understands the program.
- The one error measure (:func:`errors`): the relative Frobenius error
  ``||out - ref|| / ||ref||`` over the elements where the reference is finite. Where it is
  not (NaN or an infinity, from a scalar such as ``alpha=nan``), the output must hold the
  same value. A NaN output where the reference is finite, or a mismatch where it is not,
  makes the error NaN, and a NaN never passes (:func:`within_tolerance`); the tolerance
  depends on the tensors' dtypes (:data:`TOLERANCE`, :func:`tolerance_for`).
"""
from __future__ import annotations

import time
from typing import Any, Optional, Union

import numpy as np

from tilec.ir.core import Kernel
from tilec.ir.types import (BF16, F8E4M3, F8E5M2, F16, F32, FP8_DTYPES, I8, I32, DType,
                             ScalarType, TensorType)
from tilec.ir.views import view_source
from tilec.kernel import TileFunction, written_params
from tilec.options import target_arch
from tilec.target import fp8
from tilec.target.bf16 import from_bf16_bits, to_bf16_bits
from tilec.tools.arguments import CommandError
from tilec.tools.compile_command import row_major_launch, summary

# Relative Frobenius error allowed against a reference, per tensor dtype; the loosest among a
# kernel's tensors wins and other dtypes take f16's. f16 rounds at 2^-11 and bf16 at 2^-8;
# K-long f32 sums stay far below either, and f32 products on tf32 tensor cores
# (--f32-math tf32) stay near 3e-4 on random inputs, inside f16's 2e-3.
TOLERANCE = {F16: 2e-3, BF16: 1e-2}
# Outputs in 8-bit floats round each element by up to half a unit in the last place: 2^-4
# of it for e4m3 (3 mantissa bits), 2^-3 for e5m2, so the relative Frobenius error of the
# rounding alone stays under that (but where subnormals or saturation dominate). Read-only
# fp8 tensors round nothing (their values are exact in the reference) and keep f16's.
OUTPUT_TOLERANCE = {F8E4M3: 0.07, F8E5M2: 0.14}

Arrays = dict[str, np.ndarray]
Scalars = dict[str, Union[int, float]]


def tolerance_for(kernel: Kernel) -> float:
    """The relative Frobenius error the outputs of ``kernel`` may have (:data:`TOLERANCE`)."""
    written = set(written_params(kernel))

    def allowed(param) -> float:
        dtype = param.type.dtype
        if param.name in written and dtype in OUTPUT_TOLERANCE:
            return OUTPUT_TOLERANCE[dtype]
        return TOLERANCE.get(dtype, TOLERANCE[F16])
    return max((allowed(p) for p in kernel.params if isinstance(p.type, TensorType)),
               default=TOLERANCE[F16])


def errors(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(max abs error, relative Frobenius error ``||out - ref|| / ||ref||``; the absolute
    Frobenius error when ``ref`` is all zero), both over the elements where ``ref`` is
    finite. Where ``ref`` is NaN or infinite, ``out`` must be NaN or the same infinity: a NaN
    reference is the right answer there (NaN != NaN would fail a correct output). Anything
    else gives NaN, which :func:`within_tolerance` never accepts: a NaN output where the
    reference is finite (an unwritten, NaN-poisoned element) fails."""
    out, ref = np.asarray(out), np.asarray(ref)
    finite = np.isfinite(ref)
    special = ~finite
    if np.any(special):
        same = (out[special] == ref[special]) | (np.isnan(out[special]) & np.isnan(ref[special]))
        if not np.all(same):
            return float("nan"), float("nan")
        out, ref = out[finite], ref[finite]
    with np.errstate(invalid="ignore"):
        diff = out - ref
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    norm = float(np.linalg.norm(ref))
    rel = float(np.linalg.norm(diff)) / norm if norm > 0 else float(np.linalg.norm(diff))
    return max_abs, rel


def worst_errors(outs: Arrays, refs: Arrays) -> tuple[float, float]:
    """:func:`errors` over the tensors of ``refs``: the largest of each, NaN if any is NaN."""
    pairs = [errors(outs[name], ref) for name, ref in refs.items()]
    return _worst([p[0] for p in pairs]), _worst([p[1] for p in pairs])


def _worst(values: list[float]) -> float:
    return float("nan") if any(np.isnan(v) for v in values) else max(values, default=0.0)


def within_tolerance(rel_error: float, tolerance: float) -> bool:
    return rel_error <= tolerance  # False for NaN


# ------------------------------------------------------------------------------- inputs

def dtype_of(kernel: Kernel, name: str) -> DType:
    return next(p.type.dtype for p in kernel.params if p.name == name)


def loaded_params(kernel: Kernel) -> set[str]:
    """The tensor parameters the kernel reads (directly or through views: transposed, one
    batch of a 3-D tensor)."""
    sources = (view_source(kernel, op.operands[0]) for op in kernel.walk()
               if op.name == "tile.load")
    return {source.name for source in sources if source is not None}


def random_arguments(kernel: Kernel, sizes: dict[str, int], rng: np.random.Generator,
                     scalars: Optional[Scalars] = None, on_gpu: bool = False
                     ) -> tuple[Arrays, Scalars]:
    """Arguments for the frontend's ``kernel`` at ``sizes``: standard normal tensors for what
    it reads, NaN for what it only writes. Scalars are ``scalars``' values when given, else
    random: f32 in [0.5, 1.5), i32 1. bf16 tensors are uint16 arrays of bf16 bits, as the
    interpreter takes them; for the GPU (``on_gpu``) they are ml_dtypes.bfloat16 arrays."""
    missing = [s for s in kernel.symbols if s not in sizes]
    if missing:
        raise ValueError(f"no size for shape symbol(s) {', '.join(missing)}")
    written, loaded = set(written_params(kernel)), loaded_params(kernel)
    arrays: Arrays = {}
    values: Scalars = {}
    for param in kernel.params:
        if isinstance(param.type, ScalarType):
            if scalars is not None:
                values[param.name] = scalars[param.name]
            elif param.type.dtype == I32:
                values[param.name] = 1
            else:  # f16-representable, so exact in every float type
                values[param.name] = float(np.float16(rng.uniform(0.5, 1.5)))
            continue
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in param.type.shape)
        if not param.type.dtype.is_float:
            arrays[param.name] = _random_integers(param.type.dtype, shape, rng,
                                                  param.name in written
                                                  and param.name not in loaded)
            continue
        if param.name in written and param.name not in loaded:
            tensor = np.full(shape, np.nan, dtype=np.float32)
        else:
            tensor = rng.standard_normal(shape, dtype=np.float32)
        arrays[param.name] = _as_dtype(tensor, param.type.dtype, param.name, on_gpu)
    return arrays, values


# Integer tensors (i8 operands, i32 outputs): numpy dtypes, and the value an output the
# kernel only writes starts as (there is no NaN: the most negative value stands out).
INTEGER_ARRAYS = {I8: np.int8, I32: np.int32}


def _random_integers(dtype: DType, shape: tuple[int, ...], rng: np.random.Generator,
                     write_only: bool) -> np.ndarray:
    """Uniform integers over i8's range (every i8 value, the int8 GEMM's inputs), or for a
    tensor the kernel only writes its dtype's minimum."""
    numpy_dtype = INTEGER_ARRAYS[dtype]
    if write_only:
        return np.full(shape, np.iinfo(numpy_dtype).min, dtype=numpy_dtype)
    return rng.integers(-128, 128, size=shape).astype(numpy_dtype)


def _as_dtype(values: np.ndarray, dtype: DType, name: str, on_gpu: bool) -> np.ndarray:
    if dtype in FP8_DTYPES:  # uint8 bits, the nearest fp8 values (the host form tilec takes)
        return fp8.encode(values, str(dtype))
    if dtype != BF16:
        return values.astype({F16: np.float16, F32: np.float32}[dtype])
    bits = to_bf16_bits(values)
    if not on_gpu:
        return bits
    try:
        import ml_dtypes
    except ImportError:
        raise CommandError(f"'{name}' is bf16: passing bf16 host arrays to the GPU needs "
                           "ml_dtypes (python -m pip install ml-dtypes)") from None
    return bits.view(ml_dtypes.bfloat16)


def unpoisoned(kernel: Kernel, arrays: Arrays) -> Arrays:
    """``arrays`` with the tensors the kernel only writes set to zero instead of NaN: the
    references' inputs. An element the kernel leaves unwritten then stays NaN in its output
    against a number in the reference, and fails, instead of matching a reference that left
    the same element unwritten (:func:`errors` accepts NaN where the reference is NaN)."""
    write_only = set(written_params(kernel)) - loaded_params(kernel)
    return {name: np.zeros_like(array) if name in write_only else array
            for name, array in arrays.items()}


def as_float64(array: np.ndarray, dtype: DType) -> np.ndarray:
    """A tensor's values in float64 (bf16 given as bits or as ml_dtypes.bfloat16)."""
    if dtype == BF16:
        return from_bf16_bits(array).astype(np.float64)
    if dtype in FP8_DTYPES:
        return fp8.decode(array, str(dtype)).astype(np.float64)
    return np.asarray(array, dtype=np.float64)


def run_on_cpu(kernel: Kernel, arrays: Arrays, scalars: Scalars,
               names: list[str], f32_math: str = "ffma") -> Arrays:
    """Run ``kernel`` in the CPU interpreter on copies of ``arrays``, with the numerics of
    ``f32_math`` (Options.f32_math); the tensors ``names`` afterwards, in float64."""
    from tilec.cpu.interpreter import run_kernel
    from tilec.families.catalogue import op_catalogue
    values = {**{name: array.copy() for name, array in arrays.items()}, **scalars}
    run_kernel(kernel, values, ops=op_catalogue(), f32_math=f32_math)  # bisect: any stage
    return {name: as_float64(values[name], dtype_of(kernel, name)) for name in names}


# --------------------------------------------------------------------------- references

def references(kernel: Kernel, arrays: Arrays, scalars: Scalars, on_gpu: bool,
               f32_math: str = "ffma") -> list[tuple[str, Union[Arrays, str]]]:
    """(label, outputs by name, or the reason there are none) for each reference, computed
    from ``arrays`` :func:`unpoisoned`."""
    from tilec.cpu.reference import Unsupported, reference
    arrays = unpoisoned(kernel, arrays)
    before = {name: as_float64(array, dtype_of(kernel, name)) for name, array in arrays.items()}
    found: list[tuple[str, Union[Arrays, str]]] = []
    if on_gpu:
        # The interpreter follows the GPU's numerics tile by tile: the closest comparison.
        found.append(("CPU interpreter", run_on_cpu(kernel, arrays, scalars, list(arrays),
                                                    f32_math)))
    try:
        found.append(("float64 reference", reference(kernel, before, scalars)))
    except Unsupported as why:
        found.append(("float64 reference", str(why)))
    return found


# ------------------------------------------------------------------------ run and check

def run_and_check(fn: TileFunction, source: str, consts: dict[str, Any],
                  sizes: dict[str, int], scalars: Scalars, options: dict[str, Any],
                  seed: int, on_gpu: bool, where: str) -> bool:
    """Run one kernel on random inputs (seeded by ``seed``) and compare its outputs with each
    reference, printing what it does; True when every check passes (or nothing could be
    checked)."""
    kernel = fn.lower(**consts)
    written = written_params(kernel)
    arrays, _ = random_arguments(kernel, sizes, np.random.default_rng(seed), scalars, on_gpu)

    options = dict(options)
    if on_gpu:
        from tilec.runtime import current_device
        options.setdefault("arch", target_arch(current_device().compute_capability))
    packing, spec = row_major_launch(kernel, sizes, options)
    compiled = fn.compile(spec=spec, **options, **consts)
    print(f"{fn.name} from {source}")
    print(f"  shapes    {_describe_args(kernel, arrays, scalars)}")
    print(f"  compiled  {summary(compiled)}")
    # What a GPU launch of these arrays packs, said as explain says it; the interpreter reads
    # the arrays in place, so on the CPU it is what the GPU would do.
    packed = "; ".join(packing.describe()) or "none"
    where_packed = "at launch" if on_gpu else "at a GPU launch (the interpreter reads in place)"
    print(f"  packed    {where_packed}, for row-major arrays of these sizes: {packed}")

    start = time.perf_counter()
    if on_gpu:
        values = {**{name: array.copy() for name, array in arrays.items()}, **scalars}
        fn(**values, device="gpu", **options, **consts)
        outputs = {name: as_float64(values[name], dtype_of(kernel, name)) for name in written}
    else:
        outputs = run_on_cpu(kernel, arrays, scalars, written, compiled.options.f32_math)
    print(f"  ran on    {where} in {time.perf_counter() - start:.2f} s")

    found = references(kernel, arrays, scalars, on_gpu, compiled.options.f32_math)
    tolerance = tolerance_for(kernel)
    passed = True
    for label, expected in found:
        if isinstance(expected, str):
            print(f"  check     vs {label}: not available ({expected})")
            continue
        for name in written:
            out = outputs[name]
            max_abs, rel = errors(out, expected[name])
            # Integer outputs (int8 GEMM's i32 sums) are exact.
            exact = not dtype_of(kernel, name).is_float
            ok = within_tolerance(rel, 0.0 if exact else tolerance)
            passed &= ok
            nans = int(np.count_nonzero(np.isnan(out) & ~np.isnan(expected[name])))
            note = f", {nans} NaN elements (outputs start as NaN)" if nans else ""
            print(f"  check     {name} vs {label}: max abs err {max_abs:.3g}, rel Frobenius "
                  f"err {rel:.3g} (tolerance {0 if exact else tolerance:g}){note} "
                  f"{'ok' if ok else 'FAILED'}")
    if all(isinstance(expected, str) for _, expected in found):
        print("UNCHECKED: no reference could be computed for this kernel")
        return True
    print("PASS" if passed else "FAIL")
    return passed


def _describe_args(kernel: Kernel, arrays: Arrays, scalars: Scalars) -> str:
    parts = []
    for param in kernel.params:
        if param.name in arrays:
            dims = ",".join(str(d) for d in arrays[param.name].shape)
            parts.append(f"{param.name} {param.type.dtype}[{dims}]")
        else:
            parts.append(f"{param.name}={scalars[param.name]:g}")
    return ", ".join(parts)
