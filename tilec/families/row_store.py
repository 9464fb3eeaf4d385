"""The row-store epilogue of the mma.sync kernels (``tile.store {via = block_rows}``, chosen
by passes/row_store.py): C's 16-bit rows are not 16-byte aligned, so the accumulator
layout's direct stores write 2-byte pieces scattered over 8 rows per warp instruction
(1000x1003x77 on an H100: the kernel takes 11.4 us with them, 7.5 with C's stores off).
Instead every thread writes its register pairs into a staging tile in shared memory, the
block meets, and each warp copies whole rows out: lane l takes columns l, l + 32, ... of a
row, so one ``st.global.b16`` writes 64 contiguous bytes.

The staging tile is row-major with a 16-byte pad after each row (``pitch`` bytes a row): the
accumulator layout's 8 rows of 4 lanes then fall in 32 distinct banks (row r's word bank is
r * pitch / 4 + lane % 4, pitch / 4 = 4 mod 8), and a warp's row reads are contiguous.
The warp-specialized kernels' row store (tilec.families.staged_store, ``via = rows``) stages in
TMA's swizzle instead and needs whole-row warps; this one takes any warp grid.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from tilec.backend.context import Context, c_thread_coords
from tilec.ir.core import Op
from tilec.target.layout import DistributedLayout

VIA = "block_rows"
ROW_PAD_BYTES = 16
LANES = 32


def staging_pitch(cols: int, elem_bytes: int) -> int:
    """Bytes from one staged row to the next."""
    return cols * elem_bytes + ROW_PAD_BYTES


def layout_problem(layout: DistributedLayout, cols: int) -> Optional[str]:
    """Why the staging writes or row reads cannot take this tile (None when they can): the
    writes store register pairs (two column neighbours) as one word, the reads take 32
    columns a warp instruction."""
    offsets = layout.register_offsets()
    if len(offsets) % 2 or any(offsets[i + 1] != (offsets[i][0], offsets[i][1] + 1)
                               or offsets[i][1] % 2 for i in range(0, len(offsets), 2)):
        return "the accumulator's registers do not come in aligned column pairs"
    if cols % LANES:
        return f"the tile's {cols} columns are not a multiple of a warp's {LANES} lanes"
    return None


def register_of(ctx: Context, value: Any) -> str:
    """A size or stride as a register (an immediate one moved into one)."""
    if not isinstance(value, int):
        return value
    reg = ctx.w.reg("b32")
    ctx.w.emit(f"mov.u32 {reg}, {value};")
    return reg


@dataclass(frozen=True)
class StagedRows:
    """Where a staged tile's rows sit in shared memory, for :func:`copy_rows_out`: ``parts``
    reads of 32 columns (one a lane) a row; ``setup(lane, warp)`` emits what the thread
    needs once; ``row(r)`` emits the row's own arithmetic and gives each part's address;
    ``advance()`` moves to the warp's next row; ``label`` names the loop."""
    parts: int
    setup: Callable[[str, str], None]
    row: Callable[[str], list[str]]
    advance: Callable[[], None]
    label: str


def copy_rows_out(ctx: Context, op: Op, warps: int, meet: str, staged: StagedRows) -> None:
    """Copy a staged ``tile.store``'s tile to C by rows, once the threads that staged it meet
    (``meet``): warp w of ``warps`` takes rows w, w + W, ..., lane l column l of each
    32-column part, so each ``st.global.b16`` writes 64 contiguous bytes of one row. Rows past
    M end the warp's loop, columns past N are masked."""
    w = ctx.w
    value = op.operands[-1]
    eb = value.type.dtype.bytes
    rows = value.type.shape[0]
    tensor = ctx.get(op.operands[0])
    row_off, col_off = (ctx.get(v) for v in op.operands[1:3])
    masked = op.attrs.get("masked", [True, True])
    w.emit(meet)
    lane, warp = ctx.lane_warp()
    # Rows of this tile inside C: min(rows, M - row offset).
    rows_left = str(rows)
    if masked[0]:
        m = register_of(ctx, tensor.dims[0])
        rows_left = ctx.int_op("min.s32", ctx.int_op("sub.s32", m, row_off), rows)
    col = ctx.int_op("add.s32", col_off, lane)
    inside: list[Optional[str]] = []
    for part in range(staged.parts):
        if not masked[1]:
            inside.append(None)
            continue
        moved = ctx.int_op("add.s32", col, part * LANES) if part else col
        ok = w.reg("pred")
        w.emit(f"setp.lt.s32 {ok}, {moved}, {register_of(ctx, tensor.dims[1])};")
        inside.append(ok)
    # The thread's first element in global memory, and the step to its warp's next row.
    row = ctx.int_op("add.s32", row_off, warp)
    stride = tensor.strides[0]
    row_term = ctx.wide(row, stride)
    col_term = ctx.wide(col, 1)
    address = w.reg("b64")
    w.emit(f"add.s64 {address}, {row_term}, {col_term};")
    w.emit(f"mad.lo.s64 {address}, {address}, {eb}, {tensor.ptr};")
    step = ctx.wide(register_of(ctx, stride), warps * eb)
    staged.setup(lane, warp)
    r = w.reg("b32")
    w.emit(f"mov.u32 {r}, {warp};")
    more = w.reg("pred")
    loop, done = w.label(staged.label), w.label(f"{staged.label}_done")
    w.emit(f"setp.ge.s32 {more}, {r}, {rows_left};")
    w.emit(f"@{more} bra {done};")
    w.raw(f"{loop}:")
    for part, where in enumerate(staged.row(r)):
        element = w.reg("b16")
        w.emit(f"ld.shared.b16 {element}, [{where}];")
        guard = f"@{inside[part]} " if inside[part] else ""
        w.emit(f"{guard}st.global.b16 [{address}+{part * LANES * eb}], {element};")
    w.emit(f"add.s32 {r}, {r}, {warps};")
    staged.advance()
    w.emit(f"add.s64 {address}, {address}, {step};")
    w.emit(f"setp.lt.s32 {more}, {r}, {rows_left};")
    w.emit(f"@{more} bra {loop};")
    w.raw(f"{done}:")


def _stage(ctx: Context, op: Op) -> Optional[str]:
    """The staging writes for the registers emitted now (the epilogue goes a chunk of
    registers at a time); the staging tile's address after the last chunk, else None. The
    block meets before the first write: a block that stores more than one tile (a tile
    loop) must have read the previous tile's rows out first."""
    w = ctx.w
    value = op.operands[-1]
    layout: DistributedLayout = value.type.layout
    eb = value.type.dtype.bytes
    pitch = op.attrs["pitch"]
    regs = ctx.get(value)
    state = ctx.op_state.setdefault(op, {})
    if "staging" not in state:
        state["staging"] = ctx.smem.of(op).offset
        w.emit("bar.sync 0;")
    staging = ctx.int_op("add.s32", ctx.smem_base(), state["staging"])
    row0, col0 = c_thread_coords(ctx, layout)
    base = ctx.mad(row0, pitch, ctx.mad(col0, eb, staging))
    offsets = layout.cached_offsets()
    for index in ctx.indices(len(offsets)):
        if index % 2:
            continue
        r, c = offsets[index]
        packed = w.reg("b32")  # 16-bit tiles only (passes/row_store.py)
        w.emit(f"mov.b32 {packed}, {{{regs[index]}, {regs[index + 1]}}};")
        w.emit(f"st.shared.b32 [{base}+{r * pitch + c * eb}], {packed};")
    if ctx.active is not None and ctx.active.stop < len(offsets):
        return None
    return staging


def store_block_rows(ctx: Context, op: Op) -> None:
    """A ``tile.store {via = block_rows}``: stage (:func:`_stage`), meet, then copy the rows
    out (:func:`copy_rows_out`) from the padded staging rows."""
    staging = _stage(ctx, op)
    if staging is None:
        return
    value = op.operands[-1]
    layout: DistributedLayout = value.type.layout
    eb = value.type.dtype.bytes
    pitch = op.attrs["pitch"]
    warps = layout.warps[0] * layout.warps[1]
    shared: list[str] = []

    def setup(lane: str, warp: str) -> None:
        # Row r's lane l element at staging + r * pitch + l * eb; the next warp row is W on.
        shared.append(ctx.mad(warp, pitch, ctx.mad(lane, eb, staging)))

    copy_rows_out(ctx, op, warps, "bar.sync 0;", StagedRows(
        parts=value.type.shape[1] // LANES, setup=setup,
        row=lambda r: [f"{shared[0]}+{part * LANES * eb}"
                       for part in range(value.type.shape[1] // LANES)],
        advance=lambda: ctx.w.emit(f"add.s32 {shared[0]}, {shared[0]}, {warps * pitch};"),
        label="block_rows"))


__all__ = ["VIA", "ROW_PAD_BYTES", "StagedRows", "copy_rows_out", "layout_problem", "register_of",
           "staging_pitch", "store_block_rows"]
