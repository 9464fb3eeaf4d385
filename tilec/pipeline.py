"""The pass pipeline: one ordered list, with the reason for each ordering constraint."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tilec.ir import ops_gpu  # noqa: F401  (registers the lowered ops)
from tilec.ir.core import Kernel
from tilec.ir.ops import IRError
from tilec.ir.printer import print_kernel
from tilec.ir.verifier import verify
from tilec.options import Options

from tilec.passes import double_buffer, fragments, swizzle, tiling


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Kernel, Options], Kernel]
    requires: tuple[str, ...] = ()
    doc: str = ""


def _pass(module, requires: tuple[str, ...] = ()) -> Pass:
    return Pass(module.NAME, module.run, requires, (module.__doc__ or "").strip().split("\n")[0])


def pipeline() -> list[Pass]:
    return [
        _pass(tiling),
        # Stages multiply the buffers tiling made; swizzle then sees the final buffers.
        _pass(double_buffer, ("tiling",)),
        # Swizzle needs the copy vectors and warp tiles the tiling plan fixed.
        _pass(swizzle, ("tiling",)),
        # Fragments read shared views whatever their stage or layout, so they come last.
        _pass(fragments, ("tiling",)),
    ]


# Passes whose output the PTX backend needs: it emits only lowered ops.
BACKEND_NEEDS = ("tiling", "fragments")


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
        if name in BACKEND_NEEDS:
            raise ValueError(f"pass {name!r} cannot be disabled: the PTX backend needs its "
                             "output (it emits only lowered ops)")


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
    if keep_ir:
        result.stages["tile"] = print_kernel(kernel)
    for p in passes:
        start = time.perf_counter()
        kernel = p.run(kernel, options)
        result.times[p.name] = time.perf_counter() - start
        if options.verify:
            try:
                verify(kernel, after=p.name)
            except IRError as err:
                raise IRError(str(err)) from None
        if keep_ir:
            result.stages[p.name] = print_kernel(kernel)
    result.kernel = kernel
    return result
