"""The cp.async-groups data-movement family (sm_80+): each thread copies its vectors of a
tile with ``cp.async`` (PTX ISA 9.7.9.25.3), or, for vectors cp.async cannot move, loads
them into registers and stores them; ``cp.async.commit_group`` closes the copies issued so
far into a group and ``cp.async.wait_group N`` completes all but the newest N groups. A
thread's wait covers only its own copies, so a ``gpu.barrier`` (bar.sync) after the wait
makes a stage visible to the other warps.

Ops: ``copy.global_to_shared`` (``mode = async`` or ``sync``), ``copy.commit``,
``copy.wait {pending}``, defined here (:meth:`CpAsyncFamily.op_defs`) with their CPU
semantics, whose groups in flight are this family's state on the executor's block state.
Per-thread address parts are computed once at entry (``PtxWriter.once``); per-iteration
parts in the loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from tilec.backend.abi import AbiParam
from tilec.backend.context import Context, SmemView, TensorRegs
from tilec.ir.core import Kernel, Op
from tilec.ir.ops import OpDef, require
from tilec.ir.types import I32, ScalarType, TensorType, TileType
from tilec.target.layout import SmemLayout, copy_map, offset_relation

from .row_store import VIA as ROW_STORE_VIA, store_block_rows
from .movement import (CompletionWords, Completions, Emitter, Event, MovementFamily, PipelineOps,
                       Tracer)

if TYPE_CHECKING:
    import numpy as np

    from tilec.cpu.executor import SharedWrite
    from tilec.cpu.interpreter import InterpState, TensorRef

# The CPU semantics import numpy and the CPU model (tilec.cpu) where they run: compiling
# never runs them, and a cold `tilec compile` should not wait for numpy's import.

COPY, COMMIT, WAIT = "copy.global_to_shared", "copy.commit", "copy.wait"
ASYNC_COPY_BYTES = (4, 8, 16)  # cp.async sizes, PTX ISA 9.7.9.25.3.1
# How a widened misaligned copy (attribute ``misaligned``, with ``global_vec`` narrower than
# ``vec``: Options.misaligned_copy) loads its vectors: element by element, or as the aligned
# 4-byte words covering each vector, shifted into place with prmt.
MISALIGNED_LOADS = ("vectors", "words")


# -- global -> shared: PTX ISA 9.7.9.25.3 (cp.async) --------------------------------------
def _access_steps(cmap, layout) -> list[tuple[int, int]] | None:
    """Storage (row, col) step from access 0 to access i, when it is the same for every
    thread (threads cover whole rows); None otherwise."""
    steps = []
    firsts = cmap.coords(0)
    for i in range(cmap.per_thread):
        deltas = set()
        for first, other in zip(firsts, cmap.coords(i)):
            if first is not None and other is not None:
                deltas.add((other[0] - first[0], other[1] - first[1]))
        if len(deltas) > 1:
            return None
        steps.append(deltas.pop() if deltas else (0, 0))
    return steps


@dataclass(frozen=True)
class CopyAccess:
    """Access ``index`` of a thread in a global -> shared copy, as both backends issue it.
    ``masked``: some threads have no vector at this access (a predicate against the count).
    ``chain``: (xor, add) onto access 0's shared byte offset where this access sits a
    uniform step from access 0, with ``unit`` the logical step from access index-1 (one
    global byte step per unit, shared) and ``logical_imm`` the logical step from access 0;
    None where the access computes its own offsets."""

    index: int
    masked: bool
    chain: Optional[tuple[int, int]] = None
    unit: tuple[int, int] = (0, 0)
    logical_imm: tuple[int, int] = (0, 0)


def copy_accesses(layout: SmemLayout, vec: int, threads: int, eb: int) -> list[CopyAccess]:
    """The plan of one thread's accesses of a copy into ``layout`` (copy_map's threads and
    vectors, eb bytes an element): which compute their own offsets and which chain."""
    cmap = copy_map(layout.rows, layout.cols, vec, threads)
    steps = _access_steps(cmap, layout)

    def logical(pair):
        return (pair[1], pair[0]) if layout.transposed else pair

    def smem_offsets(i: int) -> list[int]:
        return [offset * eb for offset in
                layout.offsets([coord for coord in cmap.coords(i) if coord is not None])]

    reference = smem_offsets(0)
    accesses = []
    for i in range(cmap.per_thread):
        masked = (i + 1) * threads > cmap.vectors
        step = steps[i] if steps is not None and i > 0 else None
        relation = None
        if step is not None and not masked:
            # Shared offsets follow access 0's by an XOR within a line and an add (the
            # swizzle permutes chunks below its period); see offset_relation.
            relation = offset_relation(reference, smem_offsets(i))
        if relation is None:
            accesses.append(CopyAccess(i, masked))
            continue
        # Accesses i and i-1 are one uniform step apart: one 64-bit register, shared.
        previous = steps[i - 1]
        accesses.append(CopyAccess(i, masked, relation,
                                   logical((step[0] - previous[0], step[1] - previous[1])),
                                   logical(step)))
    return accesses


def thread_accesses(ctx, layout: SmemLayout, vec: int, threads: int, eb: int, key: object,
                    signed_less: Callable, global_offset: Callable[[tuple], Any],
                    byte_step: Callable[[tuple[int, int]], Any]) -> list[dict]:
    """Per access of this thread (copy_accesses), computed once per copy ``key`` through
    either backend's context: logical coordinates, shared offset (bytes), global offset
    (bytes, 64-bit), edge predicate of a masked access, and for a chained access the
    uniform step from the previous one. An access of its own derives its vector, row and
    column from the thread index and swizzles its shared offset; the backend gives its
    signed compare ``signed_less(v, count)``, the global byte offset of logical
    coordinates, and the byte step of a logical unit (made once per copy and unit)."""
    cmap = copy_map(layout.rows, layout.cols, vec, threads)
    per_row = layout.cols // vec

    def logical(pair):
        return (pair[1], pair[0]) if layout.transposed else pair

    def own(access: CopyAccess) -> dict:
        v = ctx.int_op("add.s32", ctx.tid(), access.index * threads)
        active = signed_less(v, cmap.vectors) if access.masked else None
        row = ctx.div_const(v, per_row, nonnegative=True)
        col = ctx.int_op("mul.lo.s32", ctx.mod_const(v, per_row, nonnegative=True), vec)
        linear = ctx.mad(row, layout.cols, col)
        smem = ctx.int_op("mul.lo.s32", ctx.swizzle(linear, layout.swizzle), eb)
        coords = logical((row, col))
        return {"smem": smem, "smem_imm": 0, "smem_xor": 0, "global": global_offset(coords),
                "global_step": None, "logical": coords, "logical_imm": (0, 0),
                "active": active}

    def compute() -> list[dict]:
        accesses: list[dict] = []
        for access in copy_accesses(layout, vec, threads, eb):
            if access.chain is None:
                accesses.append(own(access))
                continue
            flip, shift = access.chain
            delta = ctx.w.once(("copy_step", key, access.unit),
                               lambda: byte_step(access.unit))
            accesses.append({**accesses[0], "smem_imm": shift, "smem_xor": flip,
                             "global_step": delta, "chained": True,
                             "logical_imm": access.logical_imm})
        return accesses

    return ctx.w.once(key, compute)


def _copy_thread_part(ctx: Context, view: SmemView, tensor: TensorRegs, vec: int,
                      threads: int, key: object) -> list[dict]:
    """Per access i of this thread: logical coordinates, shared offset (bytes) and global
    offset (bytes, 64-bit). Accesses that sit a uniform step from access 0 reuse its
    registers plus an immediate (shared, when the step spans whole swizzle periods) and a
    per-iteration add (global), which keeps the K loop's live registers few."""
    eb = view.buffer.elem_bytes

    def signed_less(v: str, count: int) -> str:
        active = ctx.w.reg("pred")
        ctx.w.emit(f"setp.lt.s32 {active}, {v}, {count};")
        return active

    def global_offset(coords: tuple[str, str]) -> str:
        offset = ctx.wide(coords[0], tensor.strides[0])
        second = ctx.wide(coords[1], tensor.strides[1])
        ctx.w.emit(f"add.s64 {offset}, {offset}, {second};")
        ctx.w.emit(f"mul.lo.s64 {offset}, {offset}, {eb};")
        return offset

    return thread_accesses(ctx, view.buffer.layout, vec, threads, eb, key, signed_less,
                           global_offset, lambda unit: _byte_step(ctx, tensor, unit, eb))


def _byte_step(ctx: Context, tensor: TensorRegs, delta: tuple[int, int], eb: int) -> str:
    """Bytes between two elements ``delta`` (logical dims) apart, as a 64-bit register."""
    step = ctx.wide(ctx.int_op("mul.lo.s32", tensor.strides[0], delta[0]), eb)
    if delta[1]:
        extra = ctx.wide(ctx.int_op("mul.lo.s32", tensor.strides[1], delta[1]), eb)
        ctx.w.emit(f"add.s64 {step}, {step}, {extra};")
    return step


def copy_operands(ctx, op: Op) -> tuple[Any, list, SmemView, Any, tuple]:
    """``copy.global_to_shared``'s operands through either backend's context: the tensor,
    its offsets, the shared view, the predicate (None without one), and the key of the
    copy's per-thread part (one per buffer, tensor and copy shape)."""
    tensor = ctx.get(op.operands[0])
    rank = len(tensor.strides)
    offsets = [ctx.get(v) for v in op.operands[1:1 + rank]]
    view = ctx.get(op.operands[1 + rank])
    predicate = ctx.get(op.operands[2 + rank]) if len(op.operands) > 2 + rank else None
    key = ("copy", id(view.buffer), tensor.ptr, tuple(tensor.strides), op.attrs["vec"],
           op.attrs["threads"])
    return tensor, offsets, view, predicate, key


def copy_edge_mask(ctx, access: dict, offsets: list, tensor, masked: list[bool],
                   contiguous: int, vec: int, eb: int, inside, less_than: Callable):
    """One access's edge mask, emitted through either backend's context: per masked dim the
    access's coordinate; along the contiguous dim of a vector, the bytes in bounds (a
    vector that straddles the edge copies its in-bounds part; cp.async fills the rest of
    the 16 bytes with zeros); along another dim ``less_than(coord, size)`` (the backend's
    unsigned compare) and-ed into ``inside``. Returns (inside, partial bytes or None)."""
    partial_bytes = None
    for dim in range(len(offsets)):
        if not masked[dim]:
            continue
        coord = ctx.int_op("add.s32", offsets[dim], access["logical"][dim])
        if access["logical_imm"][dim]:
            coord = ctx.int_op("add.s32", coord, access["logical_imm"][dim])
        if dim == contiguous and vec > 1:
            left = ctx.int_op("sub.s32", tensor.dims[dim], coord)
            left = ctx.int_op("max.s32", left, 0)
            left = ctx.int_op("min.s32", left, vec)
            partial_bytes = ctx.int_op("mul.lo.s32", left, eb)
        else:
            inside = ctx.and_pred(inside, less_than(coord, tensor.dims[dim]))
    return inside, partial_bytes


def _less(w, coord: str, size) -> str:
    ok = w.reg("pred")
    w.emit(f"setp.lt.u32 {ok}, {coord}, {size};")
    return ok


def _copy(ctx: Context, op: Op) -> None:
    w = ctx.w
    tensor, offsets, view, predicate, key = copy_operands(ctx, op)
    vec, threads, masked = op.attrs["vec"], op.attrs["threads"], op.attrs["masked"]
    eb = view.buffer.elem_bytes
    layout = view.buffer.layout
    accesses = _copy_thread_part(ctx, view, tensor, vec, threads, key)

    tile = ctx.wide(offsets[0], tensor.strides[0])
    second = ctx.wide(offsets[1], tensor.strides[1])
    w.emit(f"add.s64 {tile}, {tile}, {second};")
    w.emit(f"mad.lo.s64 {tile}, {tile}, {eb}, {tensor.ptr};")
    contiguous = 0 if layout.transposed else 1
    nbytes = vec * eb
    previous_src = None
    pending_stores: list[str] = []
    for access in accesses:
        src = w.reg("b64")
        if access.get("chained") and previous_src is not None:
            w.emit(f"add.s64 {src}, {previous_src}, {access['global_step']};")
        else:
            w.emit(f"add.s64 {src}, {tile}, {access['global']};")
        previous_src = src
        smem = access["smem"]
        if access["smem_xor"]:
            smem = ctx.int_op("xor.b32", smem, access["smem_xor"])
        dst = ctx.int_op("add.s32", view.address, smem)
        if access["smem_imm"]:
            dst = f"{dst}+{access['smem_imm']}"
        # A thread without a vector in this access (more threads than vectors) must not
        # write at all: its shared address lies past the tile, and a cp.async of 0 source
        # bytes still writes 16 bytes of zeros there.
        guard = f"@{access['active']} " if access["active"] else ""
        inside, partial_bytes = copy_edge_mask(
            ctx, access, offsets, tensor, masked, contiguous, vec, eb,
            ctx.and_pred(predicate, access["active"]), lambda coord, size: _less(w, coord, size))
        if op.attrs["mode"] == "async":
            cache = "cg" if nbytes == 16 else "ca"
            if ctx.options.l2_prefetch:
                cache += f".shared.global.L2::{ctx.options.l2_prefetch}B"
            else:
                cache += ".shared.global"
            if partial_bytes is None and inside is None:
                w.emit(f"{guard}cp.async.{cache} [{dst}], [{src}], {nbytes};")
                continue
            size = partial_bytes if partial_bytes is not None else nbytes
            if inside is not None:
                guarded = w.reg("b32")
                w.emit(f"selp.b32 {guarded}, {size}, 0, {inside};")
                size = guarded
            w.emit(f"{guard}cp.async.{cache} [{dst}], [{src}], {nbytes}, {size};")
        else:
            loads = SYNC_LOADS[op.attrs.get("misaligned", "elements")]
            stores = loads(ctx, src, dst, vec, eb, inside, partial_bytes)
            pending_stores.extend(guard + store for store in stores)
            if len(pending_stores) >= SYNC_BATCH:
                _flush_stores(ctx, pending_stores)
    _flush_stores(ctx, pending_stores)


# Per element bytes: the type of one element's ld.global / st.shared and the register
# class it passes through (a byte in a 16-bit register: PTX has no 8-bit registers).
SYNC_ELEMENT = {1: ("b8", "b16"), 2: ("b16", "b16"), 4: ("b32", "b32")}

# Loads issued before their shared-memory stores, so this many are in flight per thread.
SYNC_BATCH = 16


def _copy_sync_loads(ctx: Context, src: str, dst: str, vec: int, eb: int, inside,
                     partial) -> list[str]:
    """Load element by element into registers (for vectors cp.async cannot move) and return
    the shared stores that complete the copy."""
    suffix, _ = SYNC_ELEMENT[eb]
    values = _element_loads(ctx, src, vec, eb, inside, partial)
    return [f"st.shared.{suffix} [{dst}+{e * eb}], {value};" for e, value in enumerate(values)]


def _element_loads(ctx: Context, src: str, vec: int, eb: int, inside, partial) -> list[str]:
    """The registers of ``vec`` elements loaded one by one from ``src``; those outside the
    tensor (``inside`` false, or past ``partial`` bytes) stay zero."""
    w = ctx.w
    suffix, cls = SYNC_ELEMENT[eb]
    values = []
    for e in range(vec):
        ok = inside
        if partial is not None:
            in_vec = w.reg("pred")
            w.emit(f"setp.gt.s32 {in_vec}, {partial}, {e * eb};")
            ok = ctx.and_pred(ok, in_vec)
        value = w.reg(cls)
        w.emit(f"mov.{cls} {value}, 0;")
        guard = f"@{ok} " if ok else ""
        w.emit(f"{guard}ld.global.nc.{suffix} {value}, [{src}+{e * eb}];")
        values.append(value)
    return values


def _copy_vector_loads(ctx: Context, src: str, dst: str, vec: int, eb: int, inside,
                       partial) -> list[str]:
    """misaligned = vectors: load element by element as :func:`_copy_sync_loads`, and store
    the vector to shared at once (16-bit elements, two to a 32-bit register)."""
    w = ctx.w
    values = _element_loads(ctx, src, vec, eb, inside, partial)
    words = []
    for low, high in zip(values[0::2], values[1::2]):
        word = w.reg("b32")
        w.emit(f"mov.b32 {word}, {{{low}, {high}}};")
        words.append(word)
    return [_shared_vector_store(dst, words)]


def _copy_word_loads(ctx: Context, src: str, dst: str, vec: int, eb: int, inside,
                     partial) -> list[str]:
    """misaligned = words: the vector's ``vec * eb`` bytes start ``shift`` (its address mod
    4) bytes into an aligned 4-byte word; load the words that cover them (one more than the
    vector has, needed when shift > 0), each only where it holds a byte of the vector
    inside the tensor, and take each 4-byte piece of the vector out of two neighbouring
    words with prmt.f4e (PTX ISA 9.7.8.7: bytes shift..shift+3 of the pair). Bytes of a
    loaded word past the vector's in-bounds part (``partial``) are cleared: they belong to
    the next row or lie past the tensor."""
    w = ctx.w
    nbytes = vec * eb
    low = w.reg("b32")
    w.emit(f"cvt.u32.u64 {low}, {src};")
    shift = ctx.int_op("and.b32", low, 3)
    base = w.reg("b64")
    w.emit(f"and.b64 {base}, {src}, -4;")
    # Word i holds the vector's bytes 4i - shift .. 4i - shift + 3: load it where one of
    # them is in bounds, 0 <= 4i - shift + j < partial (or nbytes) for some j < 4: for
    # i >= 1, partial + shift > 4i; for word 0, partial > 0.
    # A word whose upper half lies past the vector's in-bounds bytes (the extra word, or
    # the word where `partial` ends, 4i + 2 = partial + shift) loads only its lower half:
    # at the tensor's last element the upper half would lie past the allocation
    # (compute-sanitizer memcheck), and it is cleared below in any case. Elements are 16-bit,
    # so shift and partial are even and no other word reaches past them.
    assert eb == 2, "word copies move 16-bit elements"
    reach = ctx.int_op("add.s32", partial, shift) if partial is not None else None
    words = []
    for i in range(nbytes // 4 + 1):
        ok = inside
        if reach is not None or 4 * i >= nbytes:
            needed = w.reg("pred")
            if reach is None:
                w.emit(f"setp.gt.s32 {needed}, {shift}, {4 * i - nbytes};")
            elif i == 0:
                # Word 0 begins `shift` bytes before the vector: those bytes are not the
                # vector's, so it is needed only where the vector has an in-bounds byte.
                w.emit(f"setp.gt.s32 {needed}, {partial}, 0;")
            else:
                w.emit(f"setp.gt.s32 {needed}, {reach}, {4 * i};")
            ok = ctx.and_pred(ok, needed)
        word = w.reg("b32")
        w.emit(f"mov.b32 {word}, 0;")
        address = f"[{base}+{4 * i}]"
        if 4 * i >= nbytes:
            w.emit(f"@{ok} ld.global.nc.u16 {word}, {address};")
        elif reach is not None:
            half, full = w.reg("pred"), w.reg("pred")
            w.emit(f"setp.eq.and.s32 {half}|{full}, {reach}, {4 * i + 2}, {ok};")
            w.emit(f"@{full} ld.global.nc.b32 {word}, {address};")
            w.emit(f"@{half} ld.global.nc.u16 {word}, {address};")
        else:
            guard = f"@{ok} " if ok else ""
            w.emit(f"{guard}ld.global.nc.b32 {word}, {address};")
        words.append(word)
    # The bits of the vector in bounds; piece j keeps clamp(bits - 32j, 0, 32) of its own.
    bits_in = ctx.int_op("shl.b32", partial, 3) if partial is not None else None
    pieces = []
    for j in range(nbytes // 4):
        piece = w.reg("b32")
        w.emit(f"prmt.b32.f4e {piece}, {words[j]}, {words[j + 1]}, {shift};")
        if bits_in is not None:
            # A mask of that many low bits: ~(-1 << bits), where a shift of 32 or more
            # leaves no bits (PTX ISA 9.7.8.8) and a negative count is clamped to 0 first.
            bits = ctx.int_op("sub.s32", bits_in, 32 * j) if j else bits_in
            bits = ctx.int_op("max.s32", bits, 0)
            cleared = ctx.int_op("shl.b32", -1, bits)
            mask = w.reg("b32")
            w.emit(f"not.b32 {mask}, {cleared};")
            piece = ctx.int_op("and.b32", piece, mask)
        pieces.append(piece)
    return [_shared_vector_store(dst, pieces)]


def _shared_vector_store(dst: str, words: list[str]) -> str:
    """One st.shared of 1, 2 or 4 32-bit registers (a 4-, 8- or 16-byte vector)."""
    if len(words) == 1:
        return f"st.shared.b32 [{dst}], {words[0]};"
    return f"st.shared.v{len(words)}.b32 [{dst}], {{{', '.join(words)}}};"


# How a synchronous copy loads its vectors (the copy's ``misaligned`` attribute; a copy
# without one moves element by element).
SYNC_LOADS = {"elements": _copy_sync_loads, "vectors": _copy_vector_loads,
              "words": _copy_word_loads}


def _flush_stores(ctx: Context, stores: list[str]) -> None:
    for store in stores:
        ctx.w.emit(store)
    stores.clear()


def _commit(ctx: Context, op: Op) -> None:
    ctx.w.emit("cp.async.commit_group;")


def _wait(ctx: Context, op: Op) -> None:
    ctx.w.emit(f"cp.async.wait_group {op.attrs['pending']};")


# -- IR ops and their CPU semantics ----------------------------------------------------------
# What the executor (tilec/cpu/executor.py) does for these ops:
#
# - copy.global_to_shared moves the tile as the threads of copy_map do: vector i lands at the
#   swizzled offset of its first element, its vec elements contiguous from there. Elements
#   outside the tensor along a masked dim are 0; a false predicate writes zeros everywhere
#   (cp.async with src-size 0, or the zeroed registers of a synchronous copy). Reading
#   outside the tensor along a dim that is not masked is an error: the GPU would read
#   whatever lies there.
# - Visibility: mode = async writes wait in the open group; copy.commit closes it;
#   copy.wait {pending = n} completes all but the newest n groups (cp.async.wait_group).
#   Completed async writes and synchronous writes become visible to the block at the next
#   gpu.barrier (visible_at_barrier): a thread's wait says nothing about the other threads'
#   copies, only bar.sync orders them. Races where a copy overwrites a stage still being read
#   are not detected: reads happen in program order, before the copy's data lands.

def _check_copy(op: Op) -> None:
    tensor, *rest = op.operands
    require(isinstance(tensor.type, TensorType), "copy.global_to_shared reads a tensor")
    offsets = rest[:tensor.type.rank]
    dst = rest[tensor.type.rank]
    require(all(v.type == ScalarType(I32) for v in offsets), "offsets are i32")
    require(isinstance(dst.type, TileType) and dst.type.space == "smem",
            "copy.global_to_shared writes a shared tile")
    require(dst.type.dtype == tensor.type.dtype, "copies keep the element type")
    require(list(op.attrs["shape"]) == list(dst.type.shape), "copy shape differs from dst")
    require(op.attrs["mode"] in ("sync", "async"), "mode is sync or async")
    if "global_vec" in op.attrs:
        require(op.attrs["mode"] == "sync" and op.attrs["vec"] % op.attrs["global_vec"] == 0,
                "a copy whose global rows allow narrower vectors than its own (global_vec) "
                "loads through registers (mode sync), in whole global vectors")
        require(op.attrs.get("misaligned") in MISALIGNED_LOADS,
                f"misaligned is one of {', '.join(MISALIGNED_LOADS)}")


@dataclass
class _BlockCopies:
    """The family's state in one thread block: its writes not yet visible to the block."""

    open_group: list[SharedWrite] = field(default_factory=list)
    groups: list[list[SharedWrite]] = field(default_factory=list)  # committed, oldest first
    complete: list[SharedWrite] = field(default_factory=list)  # visible at the next barrier


@dataclass(frozen=True)
class _CopyPlan:
    offsets: np.ndarray  # storage offset of each element the copy writes, within a stage
    logical: tuple[np.ndarray, np.ndarray]  # its (i, j) in the tile
    vector_starts: np.ndarray  # storage offset of each vector's first element


@lru_cache(maxsize=None)
def _copy_plan(layout: SmemLayout, vec: int, threads: int) -> _CopyPlan:
    import numpy as np
    cmap = copy_map(layout.rows, layout.cols, vec, threads)
    starts, rows, cols = [], [], []
    for thread in range(threads):
        for i in range(cmap.per_thread):
            coord = cmap.coord(thread, i)
            if coord is not None:
                starts.append(layout.offset(*coord))
                rows.append(coord[0])
                cols.append(coord[1])
    starts_arr = np.array(starts, dtype=np.int64)
    element = np.arange(vec)
    # The hardware stores a vector's elements contiguously from its swizzled address.
    offsets = (starts_arr[:, None] + element).ravel()
    row = np.repeat(np.array(rows, dtype=np.int64), vec)
    col = (np.array(cols, dtype=np.int64)[:, None] + element).ravel()
    logical = (col, row) if layout.transposed else (row, col)
    for array in (offsets, starts_arr, *logical):
        array.flags.writeable = False  # shared by every caller through the cache
    return _CopyPlan(offsets, logical, starts_arr)


def _copy_write(state: InterpState, op: Op, operands: list[Any]) -> SharedWrite:
    """What one copy puts into shared memory, once visible."""
    import numpy as np

    from tilec.cpu.executor import SharedWrite, block_state, read_global
    tensor: TensorRef = operands[0]
    rank = op.operands[0].type.rank
    offsets = operands[1:1 + rank]
    view_type: TileType = op.operands[1 + rank].type
    predicate = operands[2 + rank] if len(operands) > 2 + rank else True
    buffer, stage = block_state(state).shared(state, op, operands[1 + rank], want_stage=True)
    layout: SmemLayout = view_type.layout
    vec, threads = op.attrs["vec"], op.attrs["threads"]
    if rank != 2 or layout.size != int(np.prod(view_type.shape)):
        raise state.error(op, f"copies 2-D tiles into a layout of their size; got a {rank}-D "
                              f"tensor into {view_type}")
    plan = _copy_plan(layout, vec, threads)
    if op.attrs["mode"] == "async" and np.any(plan.vector_starts % vec):
        raise state.error(op, f"a {vec}-element cp.async lands at an offset that is not a "
                              f"multiple of {vec} under {layout}")
    destination = stage * buffer.stage_size + plan.offsets
    if destination.max(initial=0) >= buffer.storage.size:
        raise state.error(op, "writes past the end of the shared buffer")
    if predicate:
        masked = op.attrs.get("masked", [True] * rank)
        indices = [offset + coord for offset, coord in zip(offsets, plan.logical)]
        values = read_global(state, op, tensor, indices, masked)
    else:  # no global read; zeros land (src-size 0, or the zeroed registers of a sync copy)
        values = np.zeros(plan.offsets.shape, dtype=buffer.storage.dtype)
    return SharedWrite(buffer, destination, values)


# -- the family ---------------------------------------------------------------------------
class CpAsyncFamily(MovementFamily):
    """Hazard rules: a ``mode = async`` copy joins the commit group of the next
    ``copy.commit`` and is complete only after a ``copy.wait {pending = P}`` that leaves at
    most P younger groups in flight (cp.async.wait_group); a synchronous copy is complete
    when issued."""

    name = "cp.async"
    ops = frozenset({COPY, COMMIT, WAIT})
    pipeline = PipelineOps(copy=COPY, commit=COMMIT, wait=WAIT)
    stage_writers = frozenset({COPY})
    words = CompletionWords(
        completer=WAIT,
        not_covered="no copy.wait covers its commit group",
        read_hint="wait with a pending count that leaves this copy's group complete, then "
                  "put a gpu.barrier before the read",
        refill_hint="wait for the earlier copy's group (copy.wait) before issuing the next "
                    "copy into the stage",
        end_hint="end with copy.wait {pending = 0} after the K loop")

    def emitters(self) -> Mapping[str, Emitter]:
        return {COPY: _copy, COMMIT: _commit, WAIT: _wait}

    def store_emitters(self) -> Mapping[str, Emitter]:
        # The mma.sync kernels' row-store epilogue (passes/row_store.py).
        return {ROW_STORE_VIA: store_block_rows}

    def pipelined_copy_attrs(self, copy: Op) -> dict[str, Any]:
        # Vectors of 4, 8 or 16 bytes go through cp.async; narrower ones stay loads and
        # stores through registers.
        nbytes = copy.attrs["vec"] * copy.operands[0].type.dtype.bytes
        aligned = "global_vec" not in copy.attrs  # a widened misaligned copy stays loads
        return dict(copy.attrs,
                    mode="async" if nbytes in ASYNC_COPY_BYTES and aligned else "sync")

    def trace_op(self, op: Op, tracer: Tracer) -> None:
        # Events carry "commits_before" (groups closed before them); a copy's group is the
        # one the next commit closes.
        if op.name == COPY:
            rank = op.operands[0].type.rank
            buffer, stage = tracer.stage_of(op.operands[1 + rank], op)
            offsets = tuple(tracer.value(v) for v in op.operands[1:1 + rank])
            tracer.record(op, buffer=buffer, stage=stage, group=tracer.state["commits"],
                          offsets=offsets)
        elif op.name == COMMIT:
            tracer.record(op)
            tracer.state["commits"] += 1
        else:
            tracer.record(op, pending=op.attrs["pending"])

    def completes_on_issue(self, op: Op) -> bool:
        return op.attrs.get("mode") != "async"

    def observe(self, event: Event, checker: Completions) -> None:
        if event.op.name == WAIT:
            done_below = event.commits_before - event.pending  # older groups are complete
            checker.complete_writes(lambda write: write.group < done_below, event)

    def describe(self, event: Event) -> Optional[str]:
        if event.op.name == COPY:
            return (f"{event.op.name} ({event.op.attrs.get('mode', 'sync')}) writing "
                    f"{event.buffer_name} stage {event.stage}")
        if event.op.name == WAIT:
            return f"copy.wait {{pending = {event.pending}}}"
        return None

    def kernel_params(self, kernel: Kernel) -> tuple[AbiParam, ...]:
        return ()  # addresses and strides are the program's own parameters

    # -- CPU semantics --------------------------------------------------------------------
    def op_defs(self) -> tuple[OpDef, ...]:
        return (
            OpDef(COPY, "a tile from global memory into a shared view; out-of-bounds elements "
                  "become 0; operands: tensor, offsets, dst, [predicate]", None, 0,
                  attrs=("shape", "vec", "mode"), check=_check_copy,
                  evaluate=self._execute_copy),
            OpDef(COMMIT, "close the group of async copies issued so far", 0, 0,
                  evaluate=self._execute_commit),
            OpDef(WAIT, "wait until at most `pending` async copy groups are in flight", 0, 0,
                  attrs=("pending",), evaluate=self._execute_wait),
        )

    def visible_at_barrier(self, state: _BlockCopies) -> list[SharedWrite]:
        complete, state.complete = state.complete, []
        return complete

    def _copies(self, state: InterpState) -> _BlockCopies:
        from tilec.cpu.executor import block_state
        return block_state(state).movement_state(self, _BlockCopies)

    def _execute_copy(self, state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
        write = _copy_write(state, op, operands)
        copies = self._copies(state)
        (copies.open_group if op.attrs["mode"] == "async" else copies.complete).append(write)
        return []

    def _execute_commit(self, state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
        copies = self._copies(state)
        copies.groups.append(copies.open_group)
        copies.open_group = []
        return []

    def _execute_wait(self, state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
        pending = op.attrs["pending"]
        if not isinstance(pending, int) or pending < 0:
            raise state.error(op, f"pending must be a non-negative integer, got {pending!r}")
        copies = self._copies(state)
        done = max(0, len(copies.groups) - pending)
        for group in copies.groups[:done]:
            copies.complete.extend(group)
        copies.groups = copies.groups[done:]
        return []
