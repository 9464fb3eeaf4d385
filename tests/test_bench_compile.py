"""benchmarks/bench_compile.py runs (figures are its output, not asserted): one compile a
kernel, each line naming its kernel, its two medians and its slowest passes."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_compile_benchmark_prints_a_line_a_kernel():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_compile.py"),
                           "--runs", "1"], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    lines = done.stdout.splitlines()
    line = re.compile(r"^(sm_\w+) .+ new +\d+\.\d ms, again +\d+\.\d ms  \(new: \w+ \d+\.\d")
    assert len(lines) == 5 and all(line.match(text) for text in lines), done.stdout
    assert sum(text.startswith("sm_90a") for text in lines) == 4
