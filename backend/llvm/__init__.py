"""The llvm backend: lowered tile IR -> LLVM IR (NVVM intrinsics) -> PTX by LLVM's NVPTX
target, through llvmlite (``Options.backend = "llvm"``).

``render(kernel, options)`` returns what :func:`tilec.backend.ptx.render` returns (the PTX and
the launch facts: one parameter list, :func:`tilec.backend.signature.kernel_abi`, so one
launcher) plus the LLVM IR as emitted and after LLVM's pipeline at ``options.llvm_opt``.
:func:`check_supported` refuses, with the family's name, what this backend cannot emit,
before any IR reaches LLVM (which aborts the process on an instruction the cpu lacks).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from tilec.errors import TileConfigError
from tilec.families.llvm_emitters import MOVEMENT_EMITTERS, PRODUCT_EMITTERS
from tilec.families.mma_sync_llvm import convertible
from tilec.families.movements import MOVEMENT_FAMILIES
from tilec.families.products import FAMILIES, family_of
from tilec.ir.core import Kernel, Op
from tilec.options import SCHEDULE_DEFAULTS, SCHEDULE_OPTIONS, Options, schedule_options_given

from ..abi import printable, ptx_identifier
# The PTX backend's epilogue chunking: which ops are emitted per chunk, and how many registers.
from ..ptx import emit_chunked
from ..signature import kernel_abi
from . import split, target
from .builder import Builder
from .context import SHARED_MEMORY, LlvmContext
from .emit import GENERIC_EMITTERS, bind_params

MODULE_NAMES = frozenset({SHARED_MEMORY})
# Ops no family owns, by what the user asked for.
FEATURES: dict[str, str] = {}

# The PTX backend's misaligned_store forms, in words (the llvm backend emits neither).
MISALIGNED_STORE_WORDS = {
    "pairs": "4-byte stores of C's pairs on the rows that allow them",
    "rows": "C's tile staged in shared memory and stored a row at a time",
}


@dataclass(frozen=True)
class LlvmRendered:
    """The PTX backend's Rendered fields, plus the LLVM IR as emitted and as optimised."""

    ptx: str
    entry: str
    threads: int
    smem_bytes: int
    abi: tuple
    llvm: str
    llvm_opt: str
    seconds: float  # LLVM's part: parsing, the pipeline and PTX emission


def _op_table(kernel: Kernel) -> dict[str, Callable[[LlvmContext, Op], None]]:
    table = {**GENERIC_EMITTERS, **split.EMITTERS}
    for family in MOVEMENT_FAMILIES.values():
        table.update(MOVEMENT_EMITTERS.get(family.name, {}))
    if kernel.schedule.tiling is not None:
        table.update(PRODUCT_EMITTERS.get(family_of(kernel.schedule.tiling).name, {}))
    return table


def _refusal(kernel: Kernel, op: Op) -> str:
    """What the user asked for that brought ``op`` in, for the error."""
    plan = kernel.schedule.tiling
    family = family_of(plan) if plan is not None else None
    if family is not None and op.name in family.emitters:
        if family.name in PRODUCT_EMITTERS:  # the family is emitted, but not this op of it
            return f"the {family.name} family's op '{op.name}'"
        return f"the {family.name} family ({family.product_op})"
    for movement in MOVEMENT_FAMILIES.values():
        if op.name in movement.ops or op.name.startswith("ws."):
            return f"the {movement.name} data-movement family"
    for product in FAMILIES:
        if op.name in product.emitters:
            return f"the {product.name} family ({product.product_op})"
    return FEATURES.get(op.name, f"the op '{op.name}'")


def _ptx_version(kernel: Kernel) -> str | None:
    """The PTX ISA version the kernel's product family needs beyond the default (fp8: 8.4)."""
    plan = kernel.schedule.tiling
    return family_of(plan).ptx_version if plan is not None else None


HINT = "use backend='ptx' (--backend ptx)"


def check_options(options: Options) -> None:
    """TileConfigError naming the options this backend does not emit, from the options
    alone: the compiler calls it before the passes (whose errors would otherwise speak of a
    schedule this backend never builds), :func:`check_supported` again."""
    asked = schedule_options_given(options)
    if asked:
        given = ", ".join(f"{name}={getattr(options, name)!r}" for name in asked)
        what = "; ".join(SCHEDULE_OPTIONS[name] for name in asked)
        defaults = ", ".join(f"{name}={SCHEDULE_DEFAULTS[name]!r}" for name in asked)
        raise TileConfigError(f"{given} ({what}) shape{'s' if len(asked) == 1 else ''} the "
                              "warp-specialized sm_90a schedule (wgmma fed by TMA), which the "
                              f"llvm backend does not emit; {HINT}, or leave {defaults}")
    if options.l2_prefetch:
        raise TileConfigError("the cp.async L2 prefetch hint (l2_prefetch) is not supported "
                              "by the llvm backend (LLVM's cp.async intrinsics have no "
                              "L2::NB form); " + HINT)
    if options.misaligned_store != "elements":
        raise TileConfigError(f"misaligned_store={options.misaligned_store!r} "
                              f"({MISALIGNED_STORE_WORDS[options.misaligned_store]}) is not "
                              "emitted by the llvm backend; " + HINT)


def check_supported(kernel: Kernel, options: Options) -> None:
    """TileConfigError naming what the llvm backend does not emit (a family, split-K, an
    option), or a target LLVM cannot select; nothing reaches LLVM before this passes."""
    try:
        target.selection(options.arch, ptx=_ptx_version(kernel))
    except ValueError as err:
        raise TileConfigError(str(err)) from None
    check_options(options)
    if any(op.attrs.get("misaligned") == "words" for op in kernel.walk()
           if op.name == "copy.global_to_shared"):
        raise TileConfigError("misaligned_copy='words' (aligned 4-byte loads shifted into "
                              "place with prmt) is not emitted by the llvm backend; "
                              "misaligned_copy='vectors' is, or " + HINT)
    # The wgmma families decline every block under this backend, so no kernel reaches here
    # warp-specialized; should one, it is refused by name rather than emitted in part.
    roles = kernel.schedule.roles
    if roles is not None:
        raise TileConfigError("warp specialization (the tma and wgmma families) is not "
                              "supported by the llvm backend; " + HINT)
    table = _op_table(kernel)
    for op in kernel.walk():
        if op.name not in table and op.name != "scf.yield":
            what = _refusal(kernel, op)
            raise TileConfigError(f"{what} is not supported by the llvm backend; {HINT}")
        if op.name == "frag.cvt" and not convertible(op.operands[0].type.dtype,
                                                     op.result.type.dtype):
            raise TileConfigError(f"frag.cvt from {op.operands[0].type.dtype} to "
                                  f"{op.result.type.dtype} is not supported by the llvm "
                                  f"backend; {HINT}")
        if op.name == "tile.store" and "via" in op.attrs:
            raise TileConfigError(f"stores through '{op.attrs['via']}' are not supported by "
                                  f"the llvm backend; {HINT}")


def emit_block(ctx: LlvmContext, ops: list[Op]) -> None:
    for op in ops:
        ctx.b.debug = ctx.debug_location(op)
        ctx.table[op.name](ctx, op)


def emit_body(ctx: LlvmContext, ops: list[Op]) -> None:
    """Everything up to the last K loop (or split-K's meeting) as it is, then the epilogue
    in register chunks when it is elementwise work on the accumulator layout: the PTX
    backend's plan and order (backend/ptx.py, emit_chunked), which keeps the epilogue's
    loads of C next to their use; emitted at once, LLVM issues them all first and ptxas
    spills."""
    emit_chunked(ctx, ops, emit_block)


def _debug_metadata(kernel: Kernel, entry: str, ctx: LlvmContext) -> list[str]:
    """A compile unit with line tables only (DebugDirectivesOnly: the .file/.loc of each
    DSL line, as the PTX backend writes with line_info), the kernel's subprogram, and one
    location per (line, column) used."""
    source = printable(kernel.source_file).replace("\\", "/").replace('"', "'")
    lines = ['!llvm.dbg.cu = !{!0}', '!llvm.module.flags = !{!2, !3}',
             '!0 = distinct !DICompileUnit(language: DW_LANG_C, file: !1, producer: "tilec", '
             'isOptimized: true, runtimeVersion: 0, emissionKind: DebugDirectivesOnly)',
             f'!1 = !DIFile(filename: "{source}", directory: "")',
             '!2 = !{i32 2, !"Debug Info Version", i32 3}',
             '!3 = !{i32 2, !"Dwarf Version", i32 2}',
             f'!4 = distinct !DISubprogram(name: "{entry}", scope: !1, file: !1, line: 1, '
             'type: !5, spFlags: DISPFlagDefinition | DISPFlagOptimized, unit: !0)',
             '!5 = !DISubroutineType(types: !{null})']
    for (line, col), index in ctx.locations.items():
        lines.append(f"!{index} = !DILocation(line: {line}, column: {col}, scope: !4)")
    return lines


def render_ir(kernel: Kernel, options: Options) -> tuple[str, LlvmContext, str, tuple]:
    """(the module's LLVM IR text, the context, the entry's name, the parameter list)."""
    check_supported(kernel, options)
    ctx = LlvmContext(kernel, options)
    ctx.table = _op_table(kernel)
    ctx.emit_block = emit_block

    def debug_location(op: Op) -> str:
        if op.loc is None or not options.line_info:
            return ""
        key = (op.loc.line, op.loc.col)
        if key not in ctx.locations:
            ctx.locations[key] = 6 + len(ctx.locations)
        return f", !dbg !{ctx.locations[key]}"
    ctx.debug_location = debug_location

    abi = kernel_abi(kernel)
    params = bind_params(ctx, abi)
    b: Builder = ctx.b
    body = b.new_block("body")
    b.position(body)
    emit_body(ctx, kernel.body.ops)
    b.debug = ""
    b.ret()
    b.position(ctx.entry)
    b.br(body)

    entry = ptx_identifier(kernel.name, MODULE_NAMES)
    attrs = f'"nvvm.maxntid"="{kernel.schedule.threads},1,1"'
    dbg = " !dbg !4" if options.line_info else ""
    lines = [f"; Generated by tilec from {printable(kernel.source_file)}: kernel "
             f"'{printable(kernel.name)}'",
             f'target datalayout = "{target.data_layout(options.arch)}"',
             f'target triple = "{target.TRIPLE}"', ""]
    if ctx.smem.total:
        lines.append(f"@{SHARED_MEMORY} = external addrspace(3) global [0 x i8], "
                     f"align {ctx.smem.ring_align}")
    lines += [*b.declarations.values(), "",
              f"define ptx_kernel void @{entry}({', '.join(params)}) #0{dbg} {{",
              *b.text(), "}", "", f"attributes #0 = {{ {attrs} }}"]
    if options.line_info:
        lines += ["", *_debug_metadata(kernel, entry, ctx)]
    return "\n".join(lines) + "\n", ctx, entry, abi


def render(kernel: Kernel, options: Options) -> LlvmRendered:
    """PTX for a kernel that has been through the pipeline, by way of LLVM."""
    text, ctx, entry, abi = render_ir(kernel, options)
    start = time.perf_counter()
    try:
        optimised, ptx = target.compile_ir(text, options.arch, options.llvm_opt,
                                           _ptx_version(kernel))
    except RuntimeError as err:
        raise RuntimeError(f"llvm backend: LLVM rejected the IR it was given for "
                           f"'{kernel.name}' (a tilec bug): {err}") from None
    seconds = time.perf_counter() - start
    # NVPTX names a kernel's parameters <entry>_param_<i>: the parameter list that goes with
    # this PTX (the launcher and the disk cache's check read it) takes those names.
    named = tuple(replace(p, name=f"{entry}_param_{i}") for i, p in enumerate(abi))
    return LlvmRendered(ptx, entry, kernel.schedule.threads, ctx.smem.total, named,
                        text, optimised, seconds)


__all__ = ["render", "render_ir", "check_supported", "LlvmRendered"]
