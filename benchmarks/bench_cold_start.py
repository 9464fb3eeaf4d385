"""Wall time of a cold ``tilec compile``: each run a fresh ``python -m tilec compile FILE -o
OUT`` process, as a user types it (interpreter start, imports, parse, passes, backend or the
disk cache, the write). The first run is not counted: it warms the page cache and fills the
disk cache. Prints every run and the median, with and without the disk cache
(``TILEC_DISK_CACHE=0``), beside a bare ``python -c pass`` for what the interpreter and
``site`` cost on this machine.

    python benchmarks/bench_cold_start.py [--runs 5] [--file samples/matmul.py] [--python CMD]

The processes run this interpreter (``sys.executable``) unless ``--python`` names another
command: ``--python ~/.pyenv/shims/python`` adds a pyenv shim's own start (a shell script
that execs the interpreter, about 0.07 s here), as a ``python -m tilec`` typed at a pyenv
shell pays.
They import the checkout this script sits in (``PYTHONPATH``), not an installed tilec.
Modules are read from ``__pycache__`` when it is there: with PYTHONDONTWRITEBYTECODE set,
run ``python -m compileall -q tilec passes backend`` first for the figure an installed
package gives (otherwise every import compiles its source).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wall_times(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    """Seconds of each of ``runs`` fresh processes, after one uncounted run."""
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times[1:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="counted runs (default 5)")
    parser.add_argument("--file", default="samples/matmul.py", help="the program to compile")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter command (default: this one, %(default)s)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as scratch:
        out = str(Path(scratch) / "out.ptx")
        compile_argv = [args.python, "-m", "tilec", "compile", args.file, "-o", out]
        cases = [("python -c pass", [args.python, "-c", "pass"], env),
                 ("tilec compile, disk cache", compile_argv, env),
                 ("tilec compile, TILEC_DISK_CACHE=0", compile_argv,
                  {**env, "TILEC_DISK_CACHE": "0"})]
        for label, argv, case_env in cases:
            times = wall_times(argv, case_env, args.runs)
            print(f"{label:36s} median {statistics.median(times):.3f} s   "
                  f"runs {' '.join(f'{t:.3f}' for t in times)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
