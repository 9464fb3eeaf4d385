#!/usr/bin/env bash
# compute-sanitizer over tilec's kernels at a ragged shape: memcheck on every sample under
# every pipeline depth, split-K, packing and tf32; racecheck and synccheck on one of each
# kind. Run on the GPU machine (scripts/gpu_check.sh calls it); logs go to $OUT/sanitize.log.
# Exit status 1 when any run reports an error or fails its check.
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-./out}
mkdir -p "$OUT"
LOG="$OUT/sanitize.log"
: > "$LOG"
SHAPE="M=200,N=136,K=72"
failed=0
runs=0

check() {  # check TOOL SAMPLE [tilec run options...]
    local tool=$1 sample=$2
    shift 2
    runs=$((runs + 1))
    echo "== $tool samples/$sample.py $*" >> "$LOG"
    if compute-sanitizer --tool "$tool" --error-exitcode 3 --print-limit 20 \
            python3 -m tilec run "samples/$sample.py" --shape "$SHAPE" "$@" >> "$LOG" 2>&1; then
        echo "ok      $tool $sample $*"
    else
        echo "FAILED  $tool $sample $* (see $LOG)"
        failed=$((failed + 1))
    fi
}

for sample in matmul matmul_bt gemm_epilogue sgemm; do
    for stages in 1 2 3 4; do
        check memcheck "$sample" --stages "$stages"
    done
done
check memcheck matmul --split-k 3
check memcheck gemm_epilogue --split-k 2 --pack always
check memcheck matmul --pack always
check memcheck sgemm --f32-math tf32
check memcheck matmul_bt --f32-math tf32 --stages 2
for tool in racecheck synccheck; do
    check "$tool" matmul --stages 3
    check "$tool" matmul_bt --stages 1
    check "$tool" gemm_epilogue --split-k 2
    check "$tool" sgemm --stages 2
    check "$tool" sgemm --f32-math tf32
done
echo "sanitize: $runs runs, $failed failed"
[ "$failed" = 0 ]
