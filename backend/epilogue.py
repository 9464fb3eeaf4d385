"""Emitters for the epilogue: each thread loads and stores exactly the accumulator elements
it holds in the accumulator layout (edge masks only where the launch spec needs them; neighbouring
columns as one 2-element access).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tilec.ir.core import Op
from tilec.ir.types import DType
from tilec.target.layout import DistributedLayout

from .compute import INT_REGISTERS
from .context import Context, c_thread_coords
from .copies import STORE_VIAS

# A float element's global load/store instruction suffix and register class, by its bytes
# (PTX ISA 9.7.9.8 / 9.7.9.10): the 8-bit floats zero-extended into a b16 register, the
# form backend/compute.py's conversions take.
MEMORY_TYPES = {1: ("u8", "b16"), 2: ("b16", "b16"), 4: ("f32", "f32")}


def _memory_type(dtype: DType) -> tuple[str, str]:
    """(instruction suffix, register class) of a global access to one element: integers
    by their own type (INT_REGISTERS: i8 in a b16 register), floats by their size."""
    if dtype in INT_REGISTERS:
        cls, ptx_type = INT_REGISTERS[dtype]
        return ptx_type, cls
    return MEMORY_TYPES[dtype.bytes]


# -- the epilogue: each thread loads / stores the accumulator elements it holds ----------
@dataclass(frozen=True)
class ElementAccess:
    """How one register of a distributed tile addresses its tensor element (both backends'
    epilogues): ``element``, its coordinates in the tile dims the tensor walks (registers
    with the same element share one access); ``immediate``, bytes along the unit-stride
    dim; ``strided``, (tensor dim, offset) pairs a row base adds; ``checks``, (tensor dim,
    offset) pairs whose coordinate is compared with the dim's size."""

    element: tuple[int, ...]
    immediate: int
    strided: tuple[tuple[int, int], ...]
    checks: tuple[tuple[int, int], ...]


def element_access(rel: Sequence[int], dims: list[int], unit: int | None, eb: int,
                   masked: list[bool]) -> ElementAccess:
    """The access of a register at ``rel`` (its offset from the thread's first element per
    tile dim) into a tensor walked by ``dims`` (tile dim -> tensor dim, -1 broadcast)."""
    element = tuple(rel[i] for i, d in enumerate(dims) if d >= 0)
    immediate, strided, checks = 0, [], []
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
    # A dim no tile dim walks ([1, N] / [M, 1] views) is read at its offset alone, which a
    # run-time row must still keep inside the tensor.
    checks += [(d, 0) for d in range(len(masked)) if d not in dims and masked[d]]
    return ElementAccess(element, immediate, tuple(strided), tuple(checks))


def thread_element_coords(ctx, op: Op, offsets, dims: list[int], layout: DistributedLayout,
                          unit: int | None, strides, add_term) -> dict:
    """The coordinate of a thread's first element in each tensor dim (both backends'
    epilogues), calling ``add_term(coordinate, stride)`` in order for each term of its
    element offset (each backend sums them its own way). A dim no tile dim walks ([1, N] /
    [M, 1] views) is read at its offset alone, and adds no term at a constant 0."""
    # A layout of interleaved warps (128-row wgmma warpgroups) holds twice the distinct rows
    # a thread (four row bases and predicates): kept from the entry, the coordinates made
    # ptxas spill gemm_epilogue's 128x128 pingpong kernel (36 bytes); recomputed, none.
    thread = c_thread_coords(ctx, layout, keep=layout.warp_rows()[0] == 1)
    coords = {}
    for tile_dim, tensor_dim in enumerate(dims):
        if tensor_dim < 0:
            continue
        coord = ctx.int_op("add.s32", offsets[tensor_dim], thread[tile_dim])
        coords[tensor_dim] = coord
        add_term(coord, 1 if tensor_dim == unit else strides[tensor_dim])
    for tensor_dim, offset in enumerate(offsets):
        if tensor_dim in dims:
            continue
        coords[tensor_dim] = offset
        if ctx.const(op.operands[1 + tensor_dim]) != 0:
            add_term(offset, 1 if tensor_dim == unit else strides[tensor_dim])
    return coords


class AddressArithmetic:
    """The few operations an epilogue's element addresses take, in one backend's own
    instructions (:class:`PtxAddresses` here, the llvm backend's beside its emitter), so
    both walk the registers by one :func:`element_addresses`."""

    def add(self, total, term):
        """``total + term`` of two 64-bit offsets."""
        raise NotImplementedError

    def base(self, pointer, offset, eb: int):
        """The thread's base address: ``pointer + offset * eb`` (``offset`` None: 0)."""
        raise NotImplementedError

    def step(self, address, delta):
        """``address`` moved by ``delta`` bytes (a 64-bit value)."""
        raise NotImplementedError

    def below(self, coord, size):
        """The predicate ``coord < size``, unsigned (a negative coordinate is outside)."""
        raise NotImplementedError

    def at(self, address, immediate: int):
        """The operand of ``address`` plus a constant byte offset."""
        raise NotImplementedError


class PtxAddresses(AddressArithmetic):
    def __init__(self, ctx: Context) -> None:
        self.w = ctx.w

    def add(self, total: str, term: str) -> str:
        self.w.emit(f"add.s64 {term}, {term}, {total};")
        return term

    def base(self, pointer: str, offset: str | None, eb: int) -> str:
        base = self.w.reg("b64")
        if offset is None:
            self.w.emit(f"mov.b64 {base}, {pointer};")
        else:
            self.w.emit(f"mad.lo.s64 {base}, {offset}, {eb}, {pointer};")
        return base

    def step(self, address: str, delta: str) -> str:
        moved = self.w.reg("b64")
        self.w.emit(f"add.s64 {moved}, {address}, {delta};")
        return moved

    def below(self, coord: str, size: str) -> str:
        ok = self.w.reg("pred")
        self.w.emit(f"setp.lt.u32 {ok}, {coord}, {size};")
        return ok

    def at(self, address: str, immediate: int) -> str:
        return f"{address}+{immediate}"


def element_addresses(ctx, op: Op, offsets, dims: list[int], layout: DistributedLayout,
                      eb: int, masked: list[bool], arithmetic: AddressArithmetic):
    """For the registers being emitted (``ctx.indices``): (index, address operand,
    in-bounds predicate or None, element key), for either backend (``ctx`` and
    ``arithmetic`` its own). One 64-bit base per thread; rows add a per-row step, columns of
    a unit-stride dim an immediate, so a pair of neighbours costs no arithmetic. State is
    kept per op so later epilogue chunks reuse what earlier ones computed."""
    tensor_value = op.operands[0]
    tensor = ctx.get(tensor_value)
    unit = unit_stride_dim(ctx, tensor_value)
    state = ctx.op_state.setdefault(op, {})
    if "base" not in state:
        total = []

        def add_term(coord, stride) -> None:
            term = ctx.wide(coord, stride)
            total[:] = [arithmetic.add(total[0], term) if total else term]

        coords = thread_element_coords(ctx, op, offsets, dims, layout, unit, tensor.strides,
                                       add_term)
        state.update(base=arithmetic.base(tensor.ptr, total[0] if total else None, eb),
                     coords=coords, row_bases={}, predicates={}, combined={}, seen={})
    base, coords = state["base"], state["coords"]
    row_bases, predicates = state["row_bases"], state["predicates"]
    combined, seen = state["combined"], state["seen"]
    relative = layout.cached_offsets()
    result = []
    for index in ctx.indices(len(relative)):
        access = element_access(relative[index], dims, unit, eb, masked)
        element, immediate, key, checks = (access.element, access.immediate,
                                           access.strided, access.checks)
        # Registers that read the same tensor element (broadcast dims) share one access.
        if element in seen:
            result.append((index, *seen[element], element))
            continue
        if key not in row_bases:
            address = base
            for tensor_dim, r in key:
                address = arithmetic.step(address, ctx.wide(tensor.strides[tensor_dim], r * eb))
            row_bases[key] = address
        for check in checks:
            if check not in predicates:
                tensor_dim, r = check
                coord = ctx.int_op("add.s32", coords[tensor_dim], r) if r else coords[tensor_dim]
                predicates[check] = arithmetic.below(coord, tensor.dims[tensor_dim])
        if checks not in combined:
            inside = None
            for check in checks:
                inside = ctx.and_pred(inside, predicates[check])
            combined[checks] = inside
        operand = arithmetic.at(row_bases[key], immediate) if immediate else row_bases[key]
        seen[element] = (operand, combined[checks])
        result.append((index, operand, combined[checks], element))
    return result


def unit_stride_dim(ctx, tensor_value) -> int | None:
    """The dim of a tensor parameter the launch spec says has stride 1 (None for views);
    ``ctx`` is either backend's context (its kernel and options)."""
    for param, arg in zip(ctx.kernel.params, ctx.kernel.body.args):
        if arg is tensor_value:
            spec = ctx.options.spec.tensor(param.name, param.type.rank, param.type.dtype.bytes)
            return spec.contiguous_dim
    return None


def _frag_load(ctx: Context, op: Op) -> None:
    offsets = [ctx.get(v) for v in op.operands[1:]]
    rtype = op.result.type
    eb = rtype.dtype.bytes
    suffix, cls = _memory_type(rtype.dtype)
    loaded = ctx.op_state.setdefault(("loaded", op), {})
    masked = op.attrs.get("masked", [True] * len(offsets))
    out = {}
    for index, address, inside, element in element_addresses(
            ctx, op, offsets, op.attrs["dims"], rtype.layout, eb, masked, PtxAddresses(ctx)):
        if element not in loaded:
            reg = ctx.w.reg(cls)
            loaded[element] = reg
            ctx.w.emit(f"mov.f32 {reg}, 0f00000000;" if cls == "f32" else f"mov.{cls} {reg}, 0;")
            guard = f"@{inside} " if inside else ""
            ctx.w.emit(f"{guard}ld.global.{suffix} {reg}, [{address}];")
        out[index] = loaded[element]
    ctx.bind_elements(op.result, rtype.layout.regs_per_thread, out)


def _store(ctx: Context, op: Op) -> None:
    if "via" in op.attrs:  # through shared memory and a movement family (tma_store pass)
        STORE_VIAS[op.attrs["via"]](ctx, op)
        return
    offsets = [ctx.get(v) for v in op.operands[1:-1]]
    value = op.operands[-1]
    vtype = value.type
    if not isinstance(vtype.layout, DistributedLayout) or vtype.layout.operand != "C":
        raise NotImplementedError("the PTX backend stores tiles held in an accumulator "
                                  f"layout; got {vtype} at {op.loc}")
    eb = vtype.dtype.bytes
    suffix, _ = _memory_type(vtype.dtype)
    regs = ctx.get(value)
    dims = list(range(len(offsets)))
    masked = op.attrs.get("masked", [True] * len(offsets))
    elements = element_addresses(ctx, op, offsets, dims, vtype.layout, eb, masked,
                                 PtxAddresses(ctx))
    w = ctx.w
    if (eb == 2 and ctx.options.misaligned_store == "pairs"
            and _rows_contiguous(ctx, op.operands[0])
            and not _pairs_contiguous(ctx, op.operands[0])):
        _store_pairs_where_aligned(ctx, op, regs, elements)
        return
    # 1-byte elements (i8) are stored one by one: a pair is a 16-bit store of two b16
    # registers' low bytes, not worth the packing here.
    if eb == 1 or not _pairs_contiguous(ctx, op.operands[0]):
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
            store = f"st.global.v2.{suffix} [{address}], {pair};"
        w.emit((f"@{inside_next} " if inside_next else "") + store)
        if inside_next:
            alone = w.reg("pred")
            w.emit(f"not.pred {alone}, {inside_next};")
            if inside:
                w.emit(f"and.pred {alone}, {alone}, {inside};")
            w.emit(f"@{alone} st.global.{suffix} [{address}], {regs[i]};")


def _store_pairs_where_aligned(ctx: Context, op: Op, regs, elements) -> None:
    """misaligned_store = pairs: 16-bit rows known only 2-byte aligned. A register pair
    (neighbouring columns, an even column apart from the row's first) goes as one 4-byte
    store where its row's address is 4-byte aligned at run time, else as two 2-byte stores;
    at a ragged right edge the first alone. The alignment is checked once per row base."""
    w = ctx.w
    aligned_rows = ctx.op_state.setdefault(("aligned rows", op), {})
    for position in range(0, len(elements), 2):
        (i, address, inside, _), (_, _, inside_next, _) = elements[position:position + 2]
        base, _, immediate = address.partition("+")
        offset = int(immediate or 0)
        key = (base, offset % 4)
        if key not in aligned_rows:
            low = w.reg("b32")
            w.emit(f"cvt.u32.u64 {low}, {base};")
            if offset % 4:
                low = ctx.int_op("add.s32", low, offset % 4)
            aligned = w.reg("pred")
            w.emit(f"and.b32 {low}, {low}, 3;")
            w.emit(f"setp.eq.u32 {aligned}, {low}, 0;")
            aligned_rows[key] = aligned
        aligned = aligned_rows[key]
        packed = w.reg("b32")
        w.emit(f"mov.b32 {packed}, {{{regs[i]}, {regs[i + 1]}}};")
        whole = ctx.and_pred(aligned, inside_next)
        w.emit(f"@{whole} st.global.b32 [{address}], {packed};")
        # The first element alone: inside, and not in a 4-byte store.
        first = w.reg("pred")
        w.emit(f"not.pred {first}, {whole};")
        first = ctx.and_pred(first, inside)
        w.emit(f"@{first} st.global.b16 [{address}], {regs[i]};")
        # The second alone: inside, on a row the 4-byte store does not take.
        second = w.reg("pred")
        w.emit(f"not.pred {second}, {aligned};")
        second = ctx.and_pred(second, inside_next)
        w.emit(f"@{second} st.global.b16 [{base}+{offset + 2}], {regs[i + 1]};")


def _rows_contiguous(ctx: Context, tensor) -> bool:
    """Whether the tensor is 2-D with unit-stride rows (whatever their alignment)."""
    for param, arg in zip(ctx.kernel.params, ctx.kernel.body.args):
        if arg is tensor:
            spec = ctx.options.spec.tensor(param.name, param.type.rank, param.type.dtype.bytes)
            return param.type.rank == 2 and spec.contiguous_dim == 1
    return False


def _pairs_contiguous(ctx: Context, tensor) -> bool:
    """Whether the tensor's rows are contiguous and aligned for 2-element accesses at even
    columns (the accumulator layout's pairs)."""
    for param, arg in zip(ctx.kernel.params, ctx.kernel.body.args):
        if arg is tensor:
            spec = ctx.options.spec.tensor(param.name, param.type.rank, param.type.dtype.bytes)
            return param.type.rank == 2 and spec.contiguous_dim == 1 and spec.vec_elems >= 2
    return False  # a transposed view: its pairs are not contiguous


EMITTERS = {"frag.load": _frag_load, "tile.store": _store}
