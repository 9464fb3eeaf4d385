"""A fuzzer for the whole compiler: ``python -m tilec.tools.fuzz --n 20000 --seed 0``.

Programs come from two generators (:mod:`tilec.tools.fuzz_programs`), both driven by one
seeded ``random.Random``:

- *matmul*: a random matmul kernel built from parts (operands f16 / bf16 / f32; i8 into an
  i32 accumulator, stored as i32 or converted; fp8 e4m3 / e5m2, compiled for sm_90 and sm_90a
  only; 16-bit activations times i8 or fp8 weights converted in registers with ``.to``;
  layouts A, A.T, B, B.T; rank-3 batched tensors with a batch grid axis; tile sizes; an
  epilogue over ``acc`` with alpha / beta scalars, a bias vector ([N] or a [1, N] view), an
  [M, 1] column scale, ``c``, relu, casts, min / max with literals, + - * /, the math
  functions and ``where`` over comparisons joined by and / or / not; a compile-time
  ``if ACT == 1:``) and random options (stages 1-4, warps, swizzle, split-K, f32_math,
  misaligned_copy, misaligned_store, backend="llvm"; on sm_90a, where wgmma takes the tile, a
  persistent block, pingpong consumers, a cluster of two (persistent or not, batched too) or
  two blocks an SM; the product swapped, in a cluster now and then). The generator
  keeps the epilogue as a tree, so it can evaluate the program itself (:func:`evaluate`,
  float64, i32 sums exact in int64), independently of tilec's own reference; fp8 inputs are
  decoded with tilec's fp8 tables, the only part it shares.
- *mutation*: a sample (``samples/*.py``) or a generated kernel with a few textual edits
  (tokens inserted, replaced or deleted, lines moved, numbers changed, truncation).

Each program runs in a worker process with a time limit and is classified as *compiled*,
*clean error* (a :class:`TileError` whose ``file:line:col`` lies inside the file, quoted
with a caret), *unlocated error* (a TileError pointing nowhere in the file: a bug),
*config error* (a TileError about options only, with no place in the file), *internal
crash* (any other exception) or *hang* (no answer within the limit). A sample of the compiled
ones is compiled for sm_80, sm_86 and sm_90 and assembled with ``ptxas``; a sample of the
generated kernels runs in the CPU interpreter and is compared with the float64 evaluation.
Failing programs are written to ``--out`` with a note saying how they failed.

Known bug classes (issue 12) that are not fixed yet have their generator features listed in
:data:`KNOWN_BUGS`; ``--skip-known`` (the CI slice) does not generate programs with those
features, and says how many it skipped, so that the slice fails on any *new* failure. For
mutations, whose features are unknown, a failure whose signature matches a known class is
counted as that class, not as a new failure.
"""
from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import numpy as np

from tilec.tools.fuzz_programs import Program, check_on_cpu, generate

SAMPLES_DIR = Path(__file__).resolve().parents[2] / "samples"
OUTCOMES = ("compiled", "clean error", "config error", "unlocated error", "schedule error",
            "internal crash", "hang")
# A schedule error is the compiler's own check (tilec/analysis/hazards.py) refusing the
# schedule its passes made: located, but a bug, never the program's fault.
FAILING = ("unlocated error", "schedule error", "internal crash", "hang")


@dataclasses.dataclass(frozen=True)
class KnownBug:
    """A bug class of issue 12 that is still open: the generator features that trigger it
    and the failure texts that identify it in programs of unknown features (mutations)."""

    issue_class: int
    summary: str
    features: tuple[str, ...]
    signatures: tuple[str, ...] = ()


# Classes 1, 2, 4, 6 and 7 are fixed (tests/test_literals_16bit.py, test_ptx_names.py,
# test_k_loop_shapes.py, test_coverage.py, test_hopper.py's one-stage schedules): the CI
# slice generates their features again.
KNOWN_BUGS: tuple[KnownBug, ...] = (
)


# ------------------------------------------------------------------------------ running

@dataclasses.dataclass
class Result:
    index: int
    outcome: str
    detail: str = ""
    ptxas: list[str] = dataclasses.field(default_factory=list)  # rejections
    cpu: Optional[str] = None  # a mismatch with evaluate()
    known: Optional[int] = None  # the known bug class a failure was matched to


def _located(err: Exception, program: Program) -> bool:
    """The error names a place inside the program's file and quotes it with a caret."""
    loc = getattr(err, "loc", None)
    # Python reads a lone "\r" as a line end; the .tile grammar does not.
    text = program.text.replace("\r\n", "\n")
    lines = (text.replace("\r", "\n") if program.suffix == ".py" else text).split("\n")
    if loc is None or loc.file != program.filename or not 1 <= loc.line <= len(lines):
        return False
    line = lines[loc.line - 1]
    return (1 <= loc.col <= len(line) + 1 and bool(line.strip())
            and getattr(err, "source_line", None) == line and "^" in str(err))


def run_program(program: Program) -> Result:
    """Compile (and, when asked, assemble and interpret) one program in this process."""
    from tilec.errors import TileError
    from tilec.kernel import load_file
    try:
        functions = load_file(program.filename, program.text)
        ptx = {}
        archs = program.archs if program.check_ptxas else program.archs[:1]
        for arch in archs:
            for name, function in functions.items():
                extra = program.hopper_options if arch == "sm_90a" else {}
                # verify: the IR checks after every pass, which name a pass that broke the IR.
                ptx[(arch, name)] = function.compile(arch=arch, verify=True, **program.options,
                                                     **extra).ptx
    except TileError as err:
        if getattr(err, "kind", "") == "schedule error":
            return Result(program.index, "schedule error", str(err))
        if err.loc is None:
            return Result(program.index, "config error", err.message)
        outcome = "clean error" if _located(err, program) else "unlocated error"
        return Result(program.index, outcome, str(err))
    except Exception:
        return Result(program.index, "internal crash", traceback.format_exc(limit=-4))
    result = Result(program.index, "compiled")
    if program.check_ptxas:
        result.ptxas = [f"{arch}: {message}" for (arch, _), text in ptx.items()
                        for message in [assemble(text, arch)] if message]
    if program.check_cpu and program.epilogue is not None and functions:
        try:
            result.cpu = check_on_cpu(program, np.random.default_rng(program.index))
        except Exception:
            result.cpu = "interpreter crash: " + traceback.format_exc(limit=-3)
    return result


def assemble(ptx: str, arch: str) -> str:
    """ptxas's complaint about ``ptx`` for ``arch``, or "" when it assembles."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        done = subprocess.run(["ptxas", f"-arch={arch}", str(source), "-o", os.devnull],
                              capture_output=True, text=True, timeout=120)
    return "" if done.returncode == 0 else (done.stderr or done.stdout).strip()[:400]


def _serve(connection: Any) -> None:
    # Programs only compile here: the on-disk compile cache would only slow this down.
    os.environ["TILEC_DISK_CACHE"] = "0"
    import warnings
    warnings.simplefilter("ignore")
    while True:
        program = connection.recv()
        if program is None:
            return
        connection.send(run_program(program))


class Worker:
    """A process that runs programs one at a time; killed and replaced on a hang."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), daemon=True)
        self.process.start()
        self.program: Optional[Program] = None
        self.started = 0.0

    def give(self, program: Program) -> None:
        self.program, self.started = program, time.monotonic()
        self.connection.send(program)

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            try:
                self.connection.send(None)
            except OSError:
                pass
        self.process.join(5)


def run_all(programs: list[Program], jobs: int, timeout: float) -> list[Result]:
    """Every program through a pool of workers, with ``timeout`` seconds each."""
    results: dict[int, Result] = {}
    pending = list(reversed(programs))
    workers = [Worker() for _ in range(max(1, min(jobs, len(programs))))]
    try:
        while pending or any(w.program for w in workers):
            for index, worker in enumerate(workers):
                if worker.program is None and pending:
                    worker.give(pending.pop())
                if worker.program is None:
                    continue
                if worker.connection.poll(0.005):
                    try:
                        result = worker.connection.recv()
                    except EOFError:  # the worker died (a crash in C code)
                        result = Result(worker.program.index, "internal crash",
                                        "the worker process died")
                        worker.stop(kill=True)
                        workers[index] = worker = Worker()
                    results[result.index] = result
                    worker.program = None
                elif time.monotonic() - worker.started > timeout:
                    results[worker.program.index] = Result(
                        worker.program.index, "hang", f"no answer in {timeout:g} s")
                    worker.stop(kill=True)
                    workers[index] = Worker()
    finally:
        for worker in workers:
            worker.stop(kill=worker.program is not None)
    return [results[p.index] for p in programs]


# ------------------------------------------------------------------------------ the run

@dataclasses.dataclass
class Summary:
    outcomes: Counter
    ptxas_checked: int
    ptxas_rejected: int
    cpu_checked: int
    cpu_mismatched: int
    skipped: Counter  # known bug class -> programs not generated
    known: Counter  # known bug class -> failures matched to it
    failures: list[tuple[Program, Result, str]]  # new failures: (program, result, how)
    # Failures of the known classes, by class (a few each, to reproduce them).
    known_failures: dict[int, list[tuple[Program, Result, str]]] = dataclasses.field(
        default_factory=dict)

    @property
    def new_failures(self) -> int:
        return len(self.failures)


def _known_class(text: str) -> Optional[int]:
    for bug in KNOWN_BUGS:
        if any(signature in text for signature in bug.signatures):
            return bug.issue_class
    return None


def _known_by_feature(program: Program) -> Optional[int]:
    for bug in KNOWN_BUGS:
        if program.features & set(bug.features):
            return bug.issue_class
    return None


def fuzz(n: int, seed: int, *, jobs: int = 0, timeout: float = 20.0, skip_known: bool = False,
         ptxas_every: int = 10, cpu_every: int = 5) -> Summary:
    """Generate ``n`` programs from ``seed`` and classify them. With ``skip_known``,
    programs with a feature of :data:`KNOWN_BUGS` are not run (counted per class)."""
    rng = random.Random(seed)
    samples = [path.read_text() for path in sorted(SAMPLES_DIR.glob("*.py"))]
    has_ptxas = shutil.which("ptxas") is not None
    programs: list[Program] = []
    skipped: Counter = Counter()
    for index in range(n):
        program = generate(rng, index, samples)
        known = _known_by_feature(program)
        if skip_known and known is not None:
            skipped[known] += 1
            continue
        program.check_ptxas = has_ptxas and index % ptxas_every == 0
        program.check_cpu = program.origin == "matmul" and index % cpu_every == 0
        programs.append(program)
    results = run_all(programs, jobs or os.cpu_count() or 1, timeout)

    summary = Summary(Counter(), 0, 0, 0, 0, skipped, Counter(), [])
    for program, result in zip(programs, results):
        summary.outcomes[result.outcome] += 1
        how = []
        if result.outcome in FAILING:
            how.append(result.outcome)
        if program.check_ptxas and result.outcome == "compiled":
            summary.ptxas_checked += 1
            if result.ptxas:
                summary.ptxas_rejected += 1
                how.append("ptxas rejection")
        if program.check_cpu and result.outcome == "compiled":
            summary.cpu_checked += 1
            if result.cpu:
                summary.cpu_mismatched += 1
                how.append("CPU mismatch")
        if not how:
            continue
        known = _known_by_feature(program) or _known_class(
            result.detail + "\n".join(result.ptxas) + (result.cpu or ""))
        if known is not None:
            summary.known[known] += 1
            kept = summary.known_failures.setdefault(known, [])
            if len(kept) < KEPT_PER_KNOWN_CLASS:
                kept.append((program, result, ", ".join(how)))
        else:
            summary.failures.append((program, result, ", ".join(how)))
    return summary


KEPT_PER_KNOWN_CLASS = 20


def write_failures(summary: Summary, folder: Path) -> None:
    """Each new failure as a file to compile again, with a note of how it failed (and a few
    of each known class, under ``known-class-N/``)."""
    groups = [(folder, summary.failures)] + [
        (folder / f"known-class-{number}", kept)
        for number, kept in sorted(summary.known_failures.items())]
    for where, failures in groups:
        where.mkdir(parents=True, exist_ok=True)
        _write_group(where, failures)


def _write_group(folder: Path, failures: list[tuple[Program, Result, str]]) -> None:
    for program, result, how in failures:
        (folder / program.filename).write_text(program.text)
        # The sm_90a schedule too: a failure there is reproduced only with it.
        note = [f"# {how}", f"# options: {program.options}",
                f"# sm_90a options: {program.hopper_options}", result.detail, *result.ptxas,
                result.cpu or ""]
        (folder / (program.filename + ".txt")).write_text("\n".join(note) + "\n")


def report(summary: Summary) -> str:
    total = sum(summary.outcomes.values())
    rows = [f"{'outcome':<22}{'programs':>10}"]
    rows += [f"{outcome:<22}{summary.outcomes[outcome]:>10}" for outcome in OUTCOMES]
    rows += [f"{'total run':<22}{total:>10}",
             f"ptxas (sm_80/86/90/90a){summary.ptxas_checked:>9} checked, "
             f"{summary.ptxas_rejected} rejected",
             f"CPU vs float64        {summary.cpu_checked:>10} checked, "
             f"{summary.cpu_mismatched} mismatched"]
    for bug in KNOWN_BUGS:
        rows.append(f"known bug class {bug.issue_class:<2}    skipped "
                    f"{summary.skipped[bug.issue_class]:>6}, matched "
                    f"{summary.known[bug.issue_class]:>5}: {bug.summary}")
    rows.append(f"new failures          {summary.new_failures:>10}")
    return "\n".join(rows)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilec.tools.fuzz", description=__doc__
                                     .split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="programs to generate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=0, help="worker processes (0: one a core)")
    parser.add_argument("--timeout", type=float, default=20.0,
                        help="seconds a program may take before it counts as a hang")
    parser.add_argument("--skip-known", action="store_true",
                        help="do not generate features of the known, unfixed bug classes")
    parser.add_argument("--ptxas-every", type=int, default=10,
                        help="assemble every Nth program that compiles, for each target")
    parser.add_argument("--cpu-every", type=int, default=5,
                        help="check every Nth generated kernel in the CPU interpreter")
    parser.add_argument("--out", type=Path, default=Path("fuzz-failures"),
                        help="folder for the failing programs")
    args = parser.parse_args(argv)
    start = time.monotonic()
    summary = fuzz(args.n, args.seed, jobs=args.jobs, timeout=args.timeout,
                   skip_known=args.skip_known, ptxas_every=args.ptxas_every,
                   cpu_every=args.cpu_every)
    print(report(summary))
    print(f"({time.monotonic() - start:.0f} s)")
    if summary.failures or summary.known_failures:
        write_failures(summary, args.out)
        print(f"failing programs written to {args.out}/")
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
