"""The report as JSON (``tilec bench --json``): every number, NaN and infinity as null."""
from __future__ import annotations

import math
from typing import Any

from tilec.benchmarking.results import Report


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def report_json(report: Report) -> dict[str, Any]:
    rows = []
    for row in report.rows:
        case = row.case
        bound = row.bound()
        rows.append({
            "M": case.M, "N": case.N, "K": case.K, "batch": case.batch, "dtype": case.dtype,
            "kind": case.kind,
            "shape": case.shape, "flops": case.flops, "input_sets": row.sets,
            "tilec_bytes": row.bound_bytes, "memory_bound_ms": row.memory_bound_ms,
            "compute_bound_ms": row.compute_bound_ms, "bound": bound[1] if bound else None,
            "tilec_fraction_of_bound": row.fraction_of_bound(),
            "tilec_vs_cublas": row.ratio("tilec", "cuBLAS"),
            "tilec_vs_triton": row.ratio("tilec", "Triton"), "seconds": row.seconds,
            "contenders": {name: {"status": m.status, "ms": m.ms, "tflops": row.tflops(name),
                                  "error": m.error, "tolerance": m.tolerance,
                                  "config": m.config, "note": m.note}
                           for name, m in row.measurements.items()}})
    refs = report.references
    references = None if refs is None else {
        "copy_bandwidth_gbps": refs.copy_gbps, "copy_bytes": refs.copy_bytes,
        "mma_sync_tflops": refs.mma_tflops, "mma_launch": refs.mma_launch,
        "problems": refs.problems}
    return _clean({"device": report.device, "software": report.software,
                   "settings": report.settings, "references": references,
                   "contenders": report.contenders, "rows": rows})
