"""The pass pipeline: one ordered list, with the reason for each ordering constraint."""
from __future__ import annotations

import functools
import os
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tilec.errors import TileError
from tilec.families.catalogue import op_definitions
from tilec.ir.core import Kernel
from tilec.ir.ops import IRError
from tilec.ir.printer import print_kernel
from tilec.ir.verifier import verify
from tilec.options import Options

from tilec.passes import (cse, dequantize, double_buffer, fragments, promote_accumulation,
                          row_store, split_k, swap_product, swizzle, tiling, tma_store)


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Kernel, Options], Kernel]
    requires: tuple[str, ...] = ()
    doc: str = ""


def _pass(module, requires: tuple[str, ...] = ()) -> Pass:
    return Pass(module.NAME, module.run, requires, (module.__doc__ or "").strip().split("\n")[0])


def pipeline() -> list[Pass]:
    """The default pass list (a fresh list: edit it and pass it to compile)."""
    passes = list(_builtin_pipeline())
    for after, extra in _REGISTERED:
        index = next(i for i, q in enumerate(passes) if q.name == after)
        passes.insert(index + 1, extra)
    return passes


@functools.cache  # the passes are frozen; each compile asks for the list, hits included
def _builtin_pipeline() -> tuple[Pass, ...]:
    return (
        # Before anything plans from the tile IR: two spellings of one expression become one
        # op chain, which every later pass and the backend then lower once.
        _pass(cse),
        # The launch's converted weights are typed before tiling plans their copies.
        _pass(dequantize),
        # After dequantize: a weight the launch converted leaves no conversion to move into
        # wgmma's A; before tiling, which plans the swapped product.
        _pass(swap_product),
        _pass(tiling),
        # Slicing K rewrites the loop bounds, which the copies double buffering predicates
        # on read; it needs the loop in tile form, with the plan fixed.
        _pass(split_k, ("tiling",)),
        # Stages multiply the buffers tiling made; swizzle then sees the final buffers.
        _pass(double_buffer, ("tiling",)),
        # Swizzle needs the copy vectors and warp tiles the tiling plan fixed.
        _pass(swizzle, ("tiling",)),
        # Fragments read shared views whatever their stage or layout, so they come last.
        _pass(fragments, ("tiling",)),
        # The wgmma.mma ops fragments made, in their K loops, before the epilogue is planned.
        _pass(promote_accumulation, ("fragments",)),
        # The store's value must be in its final (accumulator) layout; without warp
        # specialization (double_buffer's, on sm_90a) it changes nothing.
        _pass(tma_store, ("tiling",)),
        # The mma.sync kernels' row store (misaligned_store = rows), beside tma_store's.
        _pass(row_store, ("tiling",)),
    )


_BACKEND_NEEDS = "the PTX backend needs its output (it emits only lowered ops)"
# The passes that cannot be disabled, each with why: the backend emits only lowered ops, and
# a launch that converts weights hands the kernel the converted tensor.
REQUIRED_PASSES = {
    "tiling": _BACKEND_NEEDS,
    "fragments": _BACKEND_NEEDS,
    "dequantize": "a launch that converts 8-bit weights hands the kernel the converted "
                  "tensor (--pack off converts none)",
}


def check_disable(disable, passes) -> None:
    """Unknown names, passes others need, and passes the backend needs are refused."""
    names = [p.name for p in passes]
    for name in disable:
        if name not in names:
            raise ValueError(f"unknown pass {name!r} in disable (passes: {', '.join(names)})")
    for p in passes:
        missing = [r for r in p.requires if r in disable]
        if p.name not in disable and missing:
            raise ValueError(f"pass '{p.name}' needs {', '.join(repr(m) for m in missing)}, "
                             "which is disabled")
    for name in disable:
        if name in REQUIRED_PASSES:
            raise ValueError(f"pass {name!r} cannot be disabled: {REQUIRED_PASSES[name]}")


@dataclass
class PipelineResult:
    kernel: Kernel
    stages: dict[str, str] = field(default_factory=dict)  # stage name -> IR text
    times: dict[str, float] = field(default_factory=dict)  # pass name -> seconds


def run_pipeline(kernel: Kernel, options: Options, passes: Sequence[Pass] | None = None,
                 *, keep_ir: bool = False) -> PipelineResult:
    passes = list(pipeline() if passes is None else passes)
    check_disable(options.disable, passes)
    passes = [p for p in passes if p.name not in options.disable]
    result = PipelineResult(kernel)
    _stamp(kernel, "frontend")
    if keep_ir:
        result.stages["tile"] = print_kernel(kernel)
    for p in passes:
        start = time.perf_counter()
        kernel = _run_pass(p, kernel, options)
        result.times[p.name] = time.perf_counter() - start
        _stamp(kernel, p.name)
        if options.verify:
            try:
                verify(kernel, after=p.name, ops=op_definitions())
            except IRError as err:
                raise PassError(p.name, f"broke an IR invariant: {err}", kernel) from None
        if keep_ir:
            result.stages[p.name] = print_kernel(kernel)
    if kernel.schedule.tiling is not None:
        # A schedule with a shared-memory race is a compile error naming both accesses.
        from tilec.analysis.hazards import check_schedule
        start = time.perf_counter()
        check_schedule(kernel)
        result.times["hazards"] = time.perf_counter() - start
    result.kernel = kernel
    return result


class PassError(Exception):
    """A pass failed, returned something that is not a kernel, or broke the IR. The message
    names the pass and where its output IR was written."""

    def __init__(self, name: str, problem: str, kernel: Kernel | None = None):
        self.pass_name = name
        self.dump_path = _dump_failed(name, kernel) if kernel is not None else None
        where = f"\n  IR after the pass: {self.dump_path}" if self.dump_path else ""
        super().__init__(f"pass '{name}' {problem}{where}")


def _run_pass(p: Pass, kernel: Kernel, options: Options) -> Kernel:
    try:
        out = p.run(kernel, options)
    except TileError:
        raise  # a located error in the user's program: report it as it is
    except (ValueError, IRError) as err:
        if p in _builtin_pipeline():
            raise  # ours raise these with a message of their own
        raise PassError(p.name, f"raised {type(err).__name__}: {err}") from err
    except Exception as err:  # noqa: BLE001 - any failure of a user pass is reported as such
        raise PassError(p.name, f"raised {type(err).__name__}: {err}") from err
    if not isinstance(out, Kernel):
        raise PassError(p.name, f"returned {type(out).__name__}, not a Kernel (a pass is "
                        "`run(kernel, options) -> kernel`)")
    return out


def _stamp(kernel: Kernel, origin: str) -> None:
    for op in kernel.walk():
        if op.origin is None:
            op.origin = origin


def _dump_failed(name: str, kernel: Kernel) -> str | None:
    try:
        text = print_kernel(kernel)
    except Exception:  # noqa: BLE001 - a kernel too broken to print still gets its error
        return None
    handle, path = tempfile.mkstemp(prefix=f"tilec-{kernel.name}-after-{name}-", suffix=".ir")
    with os.fdopen(handle, "w") as f:
        f.write(text)
    return path


def register_pass(p: Pass, *, after: str) -> None:
    """Add a pass to the default pipeline, after the named one (for every later compile)."""
    names = [q.name for q in pipeline()]
    if after not in names:
        raise ValueError(f"unknown pass {after!r} (passes: {', '.join(names)})")
    if p.name in names:
        raise ValueError(f"a pass named {p.name!r} is already in the pipeline")
    _REGISTERED.append((after, p))


_REGISTERED: list[tuple[str, Pass]] = []


def registered_passes() -> tuple[tuple[str, Pass], ...]:
    """The passes register_pass added, each with the pass it follows: with the built-in list,
    what decides the default pipeline."""
    return tuple(_REGISTERED)


class _CallableModule(types.ModuleType):
    """`tilec.pipeline()` is the pass list, and `tilec.pipeline.run_pipeline` etc. stay this
    module's names: the package attribute is this module, so the module is callable."""

    def __call__(self) -> list[Pass]:
        return pipeline()


sys.modules[__name__].__class__ = _CallableModule
