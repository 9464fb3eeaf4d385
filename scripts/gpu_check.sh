#!/usr/bin/env bash
# The one script run on the GPU machine: the GPU test tier, then the matmul benchmark and the
# host cost of a launch.
#
#   bash scripts/gpu_check.sh [benchmark arguments...]
#
# GPU_TESTS=0 skips the tests, BENCH=0 skips the benchmark, SANITIZE=0 the compute-sanitizer
# runs (scripts/sanitize.sh). Logs go to $OUT (default ./out),
# which the device tool brings back. The exit status is the tests' if they failed, else the
# benchmark's: a failing test must not hide the benchmark numbers, so both always run.
set -o pipefail
cd "$(dirname "$0")/.." || exit 2

OUT=${OUT:-./out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

# The GPU machine cannot reach a package index: lark travels as a wheel in .whl/.
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || { echo "gpu_check: installing .whl/ failed"; exit 2; }
else
    echo "gpu_check: no wheels in .whl/ (name .whl in the run's carry); lark may be missing"
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}

nvidia-smi -L || echo "gpu_check: nvidia-smi failed"
python3 -c 'import cuda.bindings, numpy, sys; print("python", sys.version.split()[0],
    "| cuda-bindings", cuda.bindings.__version__, "| numpy", numpy.__version__)' \
    || echo "gpu_check: cuda-python is not importable"

tests_status=0
if [ "${GPU_TESTS:-1}" != 0 ]; then
    python3 -m pytest -m gpu --maxfail=25 -q tests 2>&1 | tee "$OUT/gpu_tests.log"
    tests_status=$?
    echo "gpu_check: GPU tests exited with $tests_status"
fi

bench_status=0
if [ "${BENCH:-1}" != 0 ]; then
    if [ -f benchmarks/bench_matmul.py ]; then
        python3 benchmarks/bench_matmul.py "$@" 2>&1 | tee "$OUT/bench.log"
        bench_status=$?
        echo "gpu_check: benchmark exited with $bench_status"
    else
        echo "gpu_check: benchmarks/bench_matmul.py not found; no benchmark run"
    fi
fi

if [ "${BENCH:-1}" != 0 ] && [ -f benchmarks/bench_launch.py ]; then
    python3 benchmarks/bench_launch.py 2>&1 | tee "$OUT/launch.log" \
        || echo "gpu_check: launch benchmark failed"
fi

sanitize_status=0
if [ "${SANITIZE:-1}" != 0 ]; then
    bash scripts/sanitize.sh 2>&1 | tee "$OUT/sanitize_summary.log"
    sanitize_status=$?
fi

if [ "$tests_status" != 0 ]; then
    exit "$tests_status"
fi
if [ "$sanitize_status" != 0 ]; then
    exit "$sanitize_status"
fi
exit "$bench_status"
