"""Emitters for data movement: shared buffers, global-to-shared copies (cp.async or plain),
ldmatrix, and the epilogue's distributed global loads and stores.

Addresses come from :mod:`tilec.layout`; per-thread parts are computed once at entry
(``PtxWriter.once``), per-iteration parts in the loop.
"""
from __future__ import annotations

from typing import Union

from tilec.ir.core import Op
from tilec.layout import (LDMATRIX_ORDER, MMA_M, MMA_N, WARP_SIZE, MmaLayout, copy_map,
                          ldmatrix_lane_coord, operand_k_major, operand_storage_coord)

from .context import Context, SmemBuffer, SmemView, TensorRegs

# Global load/store instruction suffix per element bytes; PTX ISA 9.7.9.8 / 9.7.9.10.
MEMORY_TYPES = {2: "b16", 4: "f32"}
SMEM_ALIGN = 128


def _smem_alloc(ctx: Context, op: Op) -> None:
    rtype = op.result.type
    elem_bytes = rtype.dtype.bytes
    stage_bytes = rtype.shape[1] * rtype.shape[2] * elem_bytes
    offset = -(-ctx.smem_bytes // SMEM_ALIGN) * SMEM_ALIGN
    ctx.smem_bytes = offset + stage_bytes * rtype.shape[0]
    ctx.bind(op.result, SmemBuffer(offset, stage_bytes, rtype.layout, elem_bytes))


def _smem_stage(ctx: Context, op: Op) -> None:
    buffer: SmemBuffer = ctx.get(op.operands[0])
    stage = op.operands[1]
    base = ctx.smem_base()
    if ctx.const(stage) is not None:
        address = ctx.int_op("add.s32", base, buffer.offset + ctx.const(stage) * buffer.stage_bytes)
    else:
        start = ctx.int_op("add.s32", base, buffer.offset)
        address = ctx.mad(ctx.get(stage), buffer.stage_bytes, start)
    ctx.bind(op.result, SmemView(buffer, address))


# -- global -> shared: PTX ISA 9.7.9.25.3 (cp.async) --------------------------------------
def _access_steps(cmap, layout) -> list[tuple[int, int]] | None:
    """Storage (row, col) step from access 0 to access i, when it is the same for every
    thread (threads cover whole rows); None otherwise."""
    steps = []
    for i in range(cmap.per_thread):
        deltas = set()
        for t in range(cmap.threads):
            first, other = cmap.coord(t, 0), cmap.coord(t, i)
            if first is not None and other is not None:
                deltas.add((other[0] - first[0], other[1] - first[1]))
        if len(deltas) > 1:
            return None
        steps.append(deltas.pop() if deltas else (0, 0))
    return steps


def _copy_thread_part(ctx: Context, view: SmemView, tensor: TensorRegs, vec: int,
                      threads: int, key: object) -> list[dict]:
    """Per access i of this thread: logical coordinates, shared offset (bytes) and global
    offset (bytes, 64-bit). Accesses that sit a uniform step from access 0 reuse its
    registers plus an immediate (shared, when the step spans whole swizzle periods) and a
    per-iteration add (global), which keeps the K loop's live registers few."""
    layout = view.buffer.layout
    cmap = copy_map(layout.rows, layout.cols, vec, threads)
    per_row = layout.cols // vec
    eb = view.buffer.elem_bytes
    steps = _access_steps(cmap, layout)

    def logical(pair):
        return (pair[1], pair[0]) if layout.transposed else pair

    def own(i: int) -> dict:
        v = ctx.int_op("add.s32", ctx.tid(), i * threads)
        active = None
        if (i + 1) * threads > cmap.vectors:
            active = ctx.w.reg("pred")
            ctx.w.emit(f"setp.lt.s32 {active}, {v}, {cmap.vectors};")
        row = ctx.int_op("div.u32", v, per_row)
        col = ctx.int_op("mul.lo.s32", ctx.int_op("rem.u32", v, per_row), vec)
        linear = ctx.mad(row, layout.cols, col)
        smem = ctx.int_op("mul.lo.s32", ctx.swizzle(linear, layout.swizzle), eb)
        coords = logical((row, col))
        offset = ctx.wide(coords[0], tensor.strides[0])
        second = ctx.wide(coords[1], tensor.strides[1])
        ctx.w.emit(f"add.s64 {offset}, {offset}, {second};")
        ctx.w.emit(f"mul.lo.s64 {offset}, {offset}, {eb};")
        return {"smem": smem, "smem_imm": 0, "smem_xor": 0, "global": offset,
                "global_step": None, "logical": coords, "logical_imm": (0, 0),
                "active": active}

    def smem_offsets(i: int) -> list[int]:
        return [layout.offset(*coord) * eb for t in range(threads)
                if (coord := cmap.coord(t, i)) is not None]

    def compute() -> list[dict]:
        first = own(0)
        accesses = [first]
        reference = smem_offsets(0)
        for i in range(1, cmap.per_thread):
            step = steps[i] if steps is not None else None
            relation = None
            if step is not None and (i + 1) * threads <= cmap.vectors:
                # Shared offsets follow access 0's by an XOR within a line and an add (the
                # swizzle permutes chunks below its period); see piece_relation.
                relation = piece_relation(reference, smem_offsets(i))
            if relation is None:
                accesses.append(own(i))
                continue
            flip, shift = relation
            d0, d1 = logical(step)
            # Accesses i and i-1 are one uniform step apart: one 64-bit register, shared.
            previous = steps[i - 1]
            unit = logical((step[0] - previous[0], step[1] - previous[1]))
            delta = ctx.w.once(("copy_step", key, unit), lambda: _byte_step(ctx, tensor, unit,
                                                                            eb))
            accesses.append({**first, "smem_imm": shift, "smem_xor": flip,
                             "global_step": delta, "chained": True, "logical_imm": (d0, d1)})
        return accesses

    return ctx.w.once(key, compute)


def _byte_step(ctx: Context, tensor: TensorRegs, delta: tuple[int, int], eb: int) -> str:
    """Bytes between two elements ``delta`` (logical dims) apart, as a 64-bit register."""
    step = ctx.wide(ctx.int_op("mul.lo.s32", tensor.strides[0], delta[0]), eb)
    if delta[1]:
        extra = ctx.wide(ctx.int_op("mul.lo.s32", tensor.strides[1], delta[1]), eb)
        ctx.w.emit(f"add.s64 {step}, {step}, {extra};")
    return step


def _and_pred(ctx: Context, a: Union[str, None], b: Union[str, None]) -> Union[str, None]:
    if a is None or b is None:
        return a or b
    r = ctx.w.reg("pred")
    ctx.w.emit(f"and.pred {r}, {a}, {b};")
    return r


def _copy(ctx: Context, op: Op) -> None:
    w = ctx.w
    tensor: TensorRegs = ctx.get(op.operands[0])
    rank = len(tensor.strides)
    offsets = [ctx.get(v) for v in op.operands[1:1 + rank]]
    view: SmemView = ctx.get(op.operands[1 + rank])
    predicate = ctx.get(op.operands[2 + rank]) if len(op.operands) > 2 + rank else None
    vec, threads, masked = op.attrs["vec"], op.attrs["threads"], op.attrs["masked"]
    eb = view.buffer.elem_bytes
    layout = view.buffer.layout
    key = ("copy", id(view.buffer), tensor.ptr, tuple(tensor.strides), vec, threads)
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
        inside = _and_pred(ctx, predicate, access["active"])
        partial_bytes = None
        for dim in range(rank):
            if not masked[dim]:
                continue
            coord = ctx.int_op("add.s32", offsets[dim], access["logical"][dim])
            if access["logical_imm"][dim]:
                coord = ctx.int_op("add.s32", coord, access["logical_imm"][dim])
            if dim == contiguous and vec > 1:
                # A vector that straddles the edge copies its in-bounds part; cp.async fills
                # the rest of the 16 bytes with zeros.
                left = ctx.int_op("sub.s32", tensor.dims[dim], coord)
                left = ctx.int_op("max.s32", left, 0)
                left = ctx.int_op("min.s32", left, vec)
                partial_bytes = ctx.int_op("mul.lo.s32", left, eb)
            else:
                ok = w.reg("pred")
                w.emit(f"setp.lt.u32 {ok}, {coord}, {tensor.dims[dim]};")
                inside = _and_pred(ctx, inside, ok)
        if op.attrs["mode"] == "async":
            cache = "cg" if nbytes == 16 else "ca"
            if partial_bytes is None and inside is None:
                w.emit(f"cp.async.{cache}.shared.global [{dst}], [{src}], {nbytes};")
                continue
            size = partial_bytes if partial_bytes is not None else nbytes
            if inside is not None:
                guarded = w.reg("b32")
                w.emit(f"selp.b32 {guarded}, {size}, 0, {inside};")
                size = guarded
            w.emit(f"cp.async.{cache}.shared.global [{dst}], [{src}], {nbytes}, {size};")
        else:
            pending_stores.extend(_copy_sync_loads(ctx, src, dst, vec, eb, inside,
                                                   partial_bytes))
            if len(pending_stores) >= SYNC_BATCH:
                _flush_stores(ctx, pending_stores)
    _flush_stores(ctx, pending_stores)


# Loads issued before their shared-memory stores, so this many are in flight per thread.
SYNC_BATCH = 16


def _copy_sync_loads(ctx: Context, src: str, dst: str, vec: int, eb: int, inside,
                     partial) -> list[str]:
    """Load element by element into registers (for vectors cp.async cannot move) and return
    the shared stores that complete the copy."""
    w = ctx.w
    suffix = "b16" if eb == 2 else "b32"
    stores = []
    for e in range(vec):
        ok = inside
        if partial is not None:
            in_vec = w.reg("pred")
            w.emit(f"setp.gt.s32 {in_vec}, {partial}, {e * eb};")
            ok = _and_pred(ctx, ok, in_vec)
        value = w.reg("b16" if eb == 2 else "b32")
        w.emit(f"mov.{suffix} {value}, 0;")
        guard = f"@{ok} " if ok else ""
        w.emit(f"{guard}ld.global.nc.{suffix} {value}, [{src}+{e * eb}];")
        stores.append(f"st.shared.{suffix} [{dst}+{e * eb}], {value};")
    return stores


def _flush_stores(ctx: Context, stores: list[str]) -> None:
    for store in stores:
        ctx.w.emit(store)
    stores.clear()


def _commit(ctx: Context, op: Op) -> None:
    ctx.w.emit("cp.async.commit_group;")


def _wait(ctx: Context, op: Op) -> None:
    ctx.w.emit(f"cp.async.wait_group {op.attrs['pending']};")


def _barrier(ctx: Context, op: Op) -> None:
    ctx.w.emit("bar.sync 0;")


# -- shared -> registers: PTX ISA 9.7.14.5.15 (ldmatrix) ---------------------------------
def _order_mask(role: str, index: int) -> int:
    """Bit j holds component ``index`` of matrix j in LDMATRIX_ORDER, so a lane can look up
    its matrix's block with one shift."""
    return sum(block[index] << j for j, block in enumerate(LDMATRIX_ORDER[role]))


def _ldmatrix_lane_offsets(ctx: Context, view: SmemView, role: str, mn0: int, k0: int) -> str:
    """Byte offset (from the stage start) of the row this lane points ldmatrix at, for the
    16x16 piece at (mn0 + this warp's base, k0). Emitted once per distinct piece."""
    plan = ctx.plan
    layout = view.buffer.layout
    k_major = operand_k_major(role, layout)

    def compute() -> str:
        lane, warp = ctx.lane_warp()
        matrix = ctx.int_op("shr.u32", lane, 3)
        r = ctx.int_op("and.b32", lane, 7)
        blocks = []
        for index in (0, 1):
            bit = ctx.int_op("shr.u32", _order_mask(role, index), matrix)
            blocks.append(ctx.int_op("shl.b32", ctx.int_op("and.b32", bit, 1), 3))
        mn, k = blocks
        if k_major:
            mn = ctx.int_op("add.s32", mn, r)
        else:
            k = ctx.int_op("add.s32", k, r)
        if role == "A":
            warp_index = ctx.int_op("div.u32", warp, plan.warps[1])
            extent = plan.warp_tile[0]
        else:
            warp_index = ctx.int_op("rem.u32", warp, plan.warps[1])
            extent = plan.warp_tile[1]
        mn = ctx.mad(warp_index, extent, ctx.int_op("add.s32", mn, mn0))
        k = ctx.int_op("add.s32", k, k0)
        row, col = operand_storage_coord(k_major, mn, k)
        linear = ctx.mad(row, layout.cols, col)
        return ctx.int_op("mul.lo.s32", ctx.swizzle(linear, layout.swizzle),
                          view.buffer.elem_bytes)

    key = ("ldmatrix", id(view.buffer), role, mn0, k0)
    return ctx.w.once(key, compute)


def ldmatrix_pieces(plan, role: str) -> list[int]:
    """The mn offsets (within a warp tile) of the 16-wide pieces one warp loads."""
    extent = plan.warp_tile[0] if role == "A" else plan.warp_tile[1]
    return list(range(0, extent, 16))


def piece_offsets(plan, role: str, layout, mn0: int, k0: int, elem_bytes: int) -> list[int]:
    """Byte offsets every lane of every warp position gives one ldmatrix piece."""
    k_major = operand_k_major(role, layout)
    warps_along = plan.warps[0] if role == "A" else plan.warps[1]
    extent = plan.warp_tile[0] if role == "A" else plan.warp_tile[1]
    offsets = []
    for w in range(warps_along):
        for lane in range(WARP_SIZE):
            mn, k = ldmatrix_lane_coord(role, k_major, lane)
            row, col = operand_storage_coord(k_major, w * extent + mn0 + mn, k0 + k)
            offsets.append(layout.offset(row, col) * elem_bytes)
    return offsets


# Stage addresses are multiples of this, so XOR-ing a smaller constant into an offset commutes
# with adding the stage address.
XOR_SAFE_BELOW = 128


def piece_relation(reference: list[int], piece: list[int]) -> tuple[int, int] | None:
    """(x, a) such that every lane's offset for ``piece`` is (reference offset XOR x) + a,
    or None. x < XOR_SAFE_BELOW moves a lane between 16-byte chunks of one 128-byte line
    (the swizzle's doing), a moves whole lines (the tile's rows)."""
    for x in range(0, XOR_SAFE_BELOW, 16):
        adds = {p - (r ^ x) for p, r in zip(piece, reference)}
        if len(adds) == 1:
            return x, adds.pop()
    return None


def _ldmatrix(ctx: Context, op: Op) -> None:
    view: SmemView = ctx.get(op.operands[0])
    role, k0 = op.attrs["operand"], op.attrs["k0"]
    layout = view.buffer.layout
    eb = view.buffer.elem_bytes
    trans = "" if operand_k_major(role, layout) else ".trans"
    reference = piece_offsets(ctx.plan, role, layout, 0, 0, eb)
    base = None
    regs: list[str] = []
    for mn0 in ldmatrix_pieces(ctx.plan, role):
        # One lane offset per operand; other pieces are a small XOR (the swizzle permutes
        # chunks within a line) and an immediate add away, so few registers stay live
        # across the loop.
        relation = piece_relation(reference, piece_offsets(ctx.plan, role, layout, mn0, k0, eb))
        if relation is None:
            address = ctx.int_op("add.s32", view.address,
                                 _ldmatrix_lane_offsets(ctx, view, role, mn0, k0))
            immediate = 0
        else:
            if base is None:
                base = ctx.int_op("add.s32", view.address,
                                  _ldmatrix_lane_offsets(ctx, view, role, 0, 0))
            flip, immediate = relation
            address = ctx.int_op("xor.b32", base, flip) if flip else base
        out = ctx.w.regs("b32", 4)
        ctx.w.emit(f"ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16 {{{', '.join(out)}}}, "
                   f"[{address}+{immediate}];")
        regs.extend(out)
    ctx.bind(op.result, regs)


# -- the epilogue: each thread loads / stores the accumulator elements it holds ----------
def c_thread_coords(ctx: Context, layout: MmaLayout) -> tuple[str, str]:
    """This thread's (row, col) base in the accumulator layout."""
    def compute() -> tuple[str, str]:
        lane, warp = ctx.lane_warp()
        wm = ctx.int_op("div.u32", warp, layout.warps[1])
        wn = ctx.int_op("rem.u32", warp, layout.warps[1])
        g = ctx.int_op("shr.u32", lane, 2)
        t2 = ctx.int_op("shl.b32", ctx.int_op("and.b32", lane, 3), 1)
        row = ctx.mad(wm, layout.warp_tile[0], g)
        col = ctx.mad(wn, layout.warp_tile[1], t2)
        return row, col
    return ctx.w.once(("c_coords", layout), compute)


def c_register_offsets(layout: MmaLayout) -> list[tuple[int, int]]:
    """(row, col) of each accumulator register relative to the thread's base, in register
    order (the same order as MmaLayout.c_coord)."""
    offsets = []
    tiles_m = layout.warp_tile[0] // MMA_M
    for reg in range(layout.regs_per_thread):
        tile, r = divmod(reg, 4)
        tn, tm = divmod(tile, tiles_m)
        offsets.append((tm * MMA_M + 8 * (r // 2), tn * MMA_N + r % 2))
    return offsets


def _element_addresses(ctx: Context, op: Op, offsets, dims: list[int], layout: MmaLayout,
                       eb: int, masked: list[bool]):
    """For the registers being emitted: (index, address operand, in-bounds predicate or None,
    element key). One 64-bit base per thread; rows add a per-row register, columns of a
    unit-stride dim an immediate, so a pair of neighbours costs no arithmetic. State is kept
    per op so later epilogue chunks reuse what earlier ones computed."""
    w = ctx.w
    tensor_value = op.operands[0]
    tensor: TensorRegs = ctx.get(tensor_value)
    unit = _unit_stride_dim(ctx, tensor_value)
    state = ctx.op_state.setdefault(op, {})
    if "base" not in state:
        thread = c_thread_coords(ctx, layout)
        coords = {}
        base_sum = None
        for tile_dim, tensor_dim in enumerate(dims):
            if tensor_dim < 0:
                continue
            coord = ctx.int_op("add.s32", offsets[tensor_dim], thread[tile_dim])
            coords[tensor_dim] = coord
            term = ctx.wide(coord, 1 if tensor_dim == unit else tensor.strides[tensor_dim])
            if base_sum is not None:
                w.emit(f"add.s64 {term}, {term}, {base_sum};")
            base_sum = term
        base = w.reg("b64")
        if base_sum is None:
            w.emit(f"mov.b64 {base}, {tensor.ptr};")
        else:
            w.emit(f"mad.lo.s64 {base}, {base_sum}, {eb}, {tensor.ptr};")
        state.update(base=base, coords=coords, row_bases={}, predicates={}, combined={},
                     seen={})
    base, coords = state["base"], state["coords"]
    row_bases, predicates = state["row_bases"], state["predicates"]
    combined, seen = state["combined"], state["seen"]
    relative = c_register_offsets(layout)
    result = []
    for index in ctx.indices(len(relative)):
        rel = relative[index]
        # Registers that read the same tensor element (broadcast dims) share one access.
        element = tuple(rel[i] for i, d in enumerate(dims) if d >= 0)
        if element in seen:
            result.append((index, *seen[element], element))
            continue
        immediate = 0
        strided = []
        checks = []
        for tile_dim, tensor_dim in enumerate(dims):
            if tensor_dim < 0:
                continue
            r = rel[tile_dim]
            if tensor_dim == unit:
                immediate += r * eb
            elif r:
                strided.append((tensor_dim, r))
            if masked[tensor_dim]:
                checks.append((tensor_dim, r))
        key = tuple(strided)
        if key not in row_bases:
            address = base
            for tensor_dim, r in strided:
                step = ctx.wide(tensor.strides[tensor_dim], r * eb)
                moved = w.reg("b64")
                w.emit(f"add.s64 {moved}, {address}, {step};")
                address = moved
            row_bases[key] = address
        for check in checks:
            if check not in predicates:
                tensor_dim, r = check
                coord = ctx.int_op("add.s32", coords[tensor_dim], r) if r else coords[tensor_dim]
                ok = w.reg("pred")
                w.emit(f"setp.lt.u32 {ok}, {coord}, {tensor.dims[tensor_dim]};")
                predicates[check] = ok
        check_key = tuple(checks)
        if check_key not in combined:
            inside = None
            for check in checks:
                inside = _and_pred(ctx, inside, predicates[check])
            combined[check_key] = inside
        operand = f"{row_bases[key]}+{immediate}" if immediate else row_bases[key]
        seen[element] = (operand, combined[check_key])
        result.append((index, operand, combined[check_key], element))
    return result


def _unit_stride_dim(ctx: Context, tensor_value) -> int | None:
    """The dim of a tensor parameter the launch spec says has stride 1 (None for views)."""
    for param, arg in zip(ctx.kernel.params, ctx.kernel.body.args):
        if arg is tensor_value:
            spec = ctx.options.spec.tensor(param.name, param.type.rank, param.type.dtype.bytes)
            return spec.contiguous_dim
    return None


def _frag_load(ctx: Context, op: Op) -> None:
    offsets = [ctx.get(v) for v in op.operands[1:]]
    rtype = op.result.type
    eb = rtype.dtype.bytes
    suffix = MEMORY_TYPES[eb]
    cls = "b16" if eb == 2 else "f32"
    loaded = ctx.op_state.setdefault(("loaded", op), {})
    masked = op.attrs.get("masked", [True] * len(offsets))
    out = {}
    for index, address, inside, element in _element_addresses(
            ctx, op, offsets, op.attrs["dims"], rtype.layout, eb, masked):
        if element not in loaded:
            reg = ctx.w.reg(cls)
            loaded[element] = reg
            ctx.w.emit(f"mov.{suffix} {reg}, 0;" if eb == 2 else f"mov.f32 {reg}, 0f00000000;")
            guard = f"@{inside} " if inside else ""
            ctx.w.emit(f"{guard}ld.global.{suffix} {reg}, [{address}];")
        out[index] = loaded[element]
    ctx.bind_elements(op.result, rtype.layout.regs_per_thread, out)


def _store(ctx: Context, op: Op) -> None:
    offsets = [ctx.get(v) for v in op.operands[1:-1]]
    value = op.operands[-1]
    vtype = value.type
    if not isinstance(vtype.layout, MmaLayout):
        raise NotImplementedError("the PTX backend stores tiles held in the mma accumulator "
                                  f"layout; got {vtype} at {op.loc}")
    eb = vtype.dtype.bytes
    suffix = MEMORY_TYPES[eb]
    regs = ctx.get(value)
    dims = list(range(len(offsets)))
    masked = op.attrs.get("masked", [True] * len(offsets))
    elements = _element_addresses(ctx, op, offsets, dims, vtype.layout, eb, masked)
    w = ctx.w
    if not _pairs_contiguous(ctx, op.operands[0]):
        for index, address, inside, _ in elements:
            guard = f"@{inside} " if inside else ""
            w.emit(f"{guard}st.global.{suffix} [{address}], {regs[index]};")
        return
    # Registers 2i and 2i+1 hold neighbouring columns: one 2-element store when both are
    # inside, the first alone at a ragged right edge.
    for position in range(0, len(elements), 2):
        (i, address, inside, _), (_, _, inside_next, _) = elements[position:position + 2]
        pair = f"{{{regs[i]}, {regs[i + 1]}}}"
        if eb == 2:
            packed = w.reg("b32")
            w.emit(f"mov.b32 {packed}, {pair};")
            store = f"st.global.b32 [{address}], {packed};"
        else:
            store = f"st.global.v2.f32 [{address}], {pair};"
        w.emit((f"@{inside_next} " if inside_next else "") + store)
        if inside_next:
            alone = w.reg("pred")
            w.emit(f"not.pred {alone}, {inside_next};")
            if inside:
                w.emit(f"and.pred {alone}, {alone}, {inside};")
            w.emit(f"@{alone} st.global.{suffix} [{address}], {regs[i]};")


def _pairs_contiguous(ctx: Context, tensor) -> bool:
    """Whether the tensor's rows are contiguous and aligned for 2-element accesses at even
    columns (the accumulator layout's pairs)."""
    for param, arg in zip(ctx.kernel.params, ctx.kernel.body.args):
        if arg is tensor:
            spec = ctx.options.spec.tensor(param.name, param.type.rank, param.type.dtype.bytes)
            return param.type.rank == 2 and spec.contiguous_dim == 1 and spec.vec_elems >= 2
    return False  # a transposed view: its pairs are not contiguous


EMITTERS = {
    "smem.alloc": _smem_alloc,
    "smem.stage": _smem_stage,
    "copy.global_to_shared": _copy,
    "copy.commit": _commit,
    "copy.wait": _wait,
    "gpu.barrier": _barrier,
    "frag.ldmatrix": _ldmatrix,
    "frag.load": _frag_load,
    "tile.store": _store,
}

__all__ = ["EMITTERS", "WARP_SIZE", "ldmatrix_lane_coord", "c_register_offsets"]
