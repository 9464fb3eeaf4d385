"""The sweep: each contender checked on every input set of a case (outputs poisoned with
NaN, compared against float64), and timed rotating among the sets only when it passed."""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Optional, Sequence, TextIO

from tilec.benchmarking.array_libraries import Arrays
from tilec.benchmarking.cases import BENCH_TOLERANCE, K_MAJOR_B, Case, rotation_sets
from tilec.benchmarking.contenders import Contender
from tilec.benchmarking.results import CaseResult, Measurement, References, first_line
from tilec.benchmarking.timing import Timer, rotating


def _worst(errors: Sequence[float]) -> float:
    return math.nan if any(math.isnan(e) for e in errors) else max(errors)


def measure(contender: Contender, case: Case, arrays: Arrays,
            inputs: Sequence[tuple[Any, Any]], references: dict[int, Any],
            timer: Timer) -> Measurement:
    """Check one contender on every input set, then time it rotating among them."""
    reason = contender.unsupported(case)
    if reason is not None:
        return Measurement("n/a", note=reason)
    tolerance, config = BENCH_TOLERANCE[contender.math(case)], ""
    try:
        outputs = [arrays.empty(case.c_shape, contender.out_dtype(case)) for _ in inputs]
        run, config = contender.prepare(case, inputs, outputs)
        for out in outputs:
            arrays.poison(out)
        for i in range(len(inputs)):
            run(i)
        arrays.synchronize()
        error = _worst([arrays.rel_error(outputs[i], ref) for i, ref in references.items()])
        unwritten = [i for i in range(len(outputs))
                     if i not in references and not arrays.all_finite(outputs[i])]
        if not error <= tolerance or unwritten:  # NaN fails
            note = f"NaN or inf in the outputs of input sets {unwritten}" if unwritten else ""
            return Measurement("FAIL", error=error, tolerance=tolerance, config=config,
                               note=note)
        ms = timer(rotating(run, len(inputs)))
    except Exception as err:  # noqa: BLE001 - one contender's failure must not end the sweep
        return Measurement("error", config=config, note=first_line(err))
    return Measurement("ok", ms=ms, error=error, tolerance=tolerance, config=config)


def run_case(case: Case, arrays: Arrays, contenders: Sequence[Contender], timer: Timer,
             references: Optional[References]) -> CaseResult:
    # 8-bit B k contiguous: a column-major [K, N] (the transpose of a row-major [N, K]).
    b_layout = {"k_major": True} if case.dtype in K_MAJOR_B else {}
    tilec = next((c for c in contenders if c.name == "tilec"), None)
    return run_row(case, arrays, contenders, timer, references, dtypes=(case.dtype,),
                   draw=lambda: (arrays.random(case.a_shape, case.dtype),
                                 arrays.random(case.b_shape, case.dtype, **b_layout)),
                   reference=arrays.reference,
                   bound_bytes=case.nbytes(tilec.out_dtype(case) if tilec else "f32"))


def run_row(case: Case, arrays: Arrays, contenders: Sequence[Contender], timer: Timer,
            references: Optional[References], dtypes: Sequence[str],
            draw: Callable[[], tuple[Any, ...]], reference: Callable[..., Any],
            bound_bytes: int) -> CaseResult:
    """One row of any kind (matmul, fused epilogue, w8a16): n/a for every contender where
    the array library has no arrays of one of ``dtypes``; else as many input sets as
    :func:`rotation_sets` asks for, each drawn by ``draw``; the first and the last checked in
    full against ``reference`` (float64, called with a set's arrays), the others for NaN;
    every contender checked and timed on them; and the case's bounds (its memory bound from
    ``bound_bytes``). The arrays go back to the pool before the next row."""
    start = time.perf_counter()
    reason = next((r for r in map(arrays.unsupported, dtypes) if r is not None), None)
    if reason is not None:
        return CaseResult(case, 0, {c.name: Measurement("n/a", note=reason) for c in contenders})
    sets = rotation_sets(case, arrays.l2_bytes)
    inputs = [draw() for _ in range(sets)]
    checked = {i: reference(*inputs[i]) for i in sorted({0, sets - 1})}
    measured = {c.name: measure(c, case, arrays, inputs, checked, timer) for c in contenders}
    result = CaseResult(case, len(inputs), measured)
    result.bound_bytes = bound_bytes
    if references is not None and references.copy_gbps:
        result.memory_bound_ms = result.bound_bytes / (references.copy_gbps * 1e6)
        ceiling = references.mma_tflops.get(case.dtype)
        if ceiling:
            result.compute_bound_ms = case.flops / (ceiling * 1e9)
    inputs.clear()
    checked.clear()
    arrays.release()
    result.seconds = time.perf_counter() - start
    return result


def progress_line(index: int, total: int, result: CaseResult) -> str:
    parts = []
    for name, measured in result.measurements.items():
        tflops = result.tflops(name)
        parts.append(f"{name} {tflops:.1f}" if tflops is not None else f"{name} {measured.status}")
    return (f"[{index}/{total}] {result.case.shape} {result.case.dtype}: {', '.join(parts)} "
            f"TFLOP/s ({result.seconds:.1f} s)")


def run_sweep(cases: Sequence[Case], arrays: Arrays, contenders: Sequence[Contender],
              timer: Timer, references: Optional[References],
              progress: Optional[TextIO] = None,
              run_one: Optional[Callable[..., CaseResult]] = None) -> list[CaseResult]:
    """Each case in turn (``run_one``: how one row runs, :func:`run_case` unless told; the
    fused-epilogue rows bring their own, tilec/benchmarking/epilogue.py)."""
    rows = []
    for index, case in enumerate(cases, 1):
        try:
            rows.append((run_one or run_case)(case, arrays, contenders, timer, references))
        except Exception as err:  # noqa: BLE001 - e.g. out of memory for the inputs: go on
            failed = Measurement("error", note=f"the case failed: {first_line(err)}")
            rows.append(CaseResult(case, 0, {c.name: failed for c in contenders}))
        if progress is not None:
            print(progress_line(index, len(cases), rows[-1]), file=progress, flush=True)
    return rows
