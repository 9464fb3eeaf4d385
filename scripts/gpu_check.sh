#!/usr/bin/env bash
# The one script run on the GPU machine: the GPU test tier, then the matmul benchmark and the
# host cost of a launch.
#
#   bash scripts/gpu_check.sh [benchmark arguments...]
#
# GPU_TESTS=0 skips the tests, BENCH=0 skips the benchmark, SANITIZE=0 the compute-sanitizer
# runs (scripts/sanitize.sh), SHARDS=N and SANITIZE_BESIDE=1 as said below. Logs go to $OUT
# (default ./out), which the device tool brings back. The exit status is the tests' if they
# failed, else the benchmark's: a failing test must not hide the benchmark numbers, so both
# always run.
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

# The GPU tests run as SHARDS pytest processes side by side (default 2: the tier does not fit
# one device call run one file after another), each file in one shard, logs
# gpu_tests.<shard>.log; SANITIZE_BESIDE=1 runs the compute-sanitizer script beside them.
sanitize_status=0
sanitize_pid=""
if [ "${SANITIZE:-1}" != 0 ] && [ "${SANITIZE_BESIDE:-0}" = 1 ]; then
    bash scripts/sanitize.sh > "$OUT/sanitize_summary.log" 2>&1 &
    sanitize_pid=$!
fi
tests_status=0
if [ "${GPU_TESTS:-1}" != 0 ]; then
    shards=${SHARDS:-2}
    mapfile -t files < <(ls tests/gpu/test_*.py)
    pids=()
    for ((s = 0; s < shards; s++)); do
        mine=()
        for ((i = s; i < ${#files[@]}; i += shards)); do mine+=("${files[i]}"); done
        python3 -m pytest -m gpu --maxfail=25 -q -rf -p no:cacheprovider "${mine[@]}" \
            > "$OUT/gpu_tests.$s.log" 2>&1 &
        pids+=($!)
    done
    for ((s = 0; s < shards; s++)); do
        # 5: pytest collected nothing to run (every file skipped at import, e.g. no torch).
        wait "${pids[s]}"
        rc=$?
        if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then tests_status=$rc; fi
        tail -5 "$OUT/gpu_tests.$s.log"
    done
    echo "gpu_check: GPU tests exited with $tests_status"
fi
if [ -n "$sanitize_pid" ]; then
    wait "$sanitize_pid"
    sanitize_status=$?
    tail -3 "$OUT/sanitize_summary.log"
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

if [ "${SANITIZE:-1}" != 0 ] && [ "${SANITIZE_BESIDE:-0}" != 1 ]; then
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
