"""The parts of ``tilec bench``; :mod:`tilec.tools.bench` is the entry point and re-exports them.

cases            dtypes, tolerances, the default sweep, sizes, input-set rotation
results          Measurement, CaseResult, References, Report
array_libraries  torch or cupy behind one protocol (inputs, cuBLAS, events)
timing           the device-event timer (read-only L2 flush) and rotation
ceilings         the copy bandwidth and the mma.sync loop (hand-written PTX)
triton_kernel    the Triton matmul
tuning           tilec's tuned configuration of a case, and the --autotune space
contenders       tilec, cuBLAS and Triton as contenders
check_and_time   each contender checked, then timed; the sweep over the cases
epilogue         the fused-epilogue rows (GEMM + bias + GELU): case, contenders, reference
table            the reference lines, the table and the notes, as text
json_report      the report as JSON
plot             TFLOP/s against size as a PNG (matplotlib)
"""
