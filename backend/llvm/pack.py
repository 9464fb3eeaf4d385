"""The operand pack kernel in LLVM IR: :mod:`tilec.backend.pack`'s kernel (same parameters,
same grid, same entry name, same bytes written), for launches whose matmul the llvm backend
compiled, so that everything such a launch runs is LLVM's.

One thread writes one 16-byte vector of a destination row (``store <4 x i32>``), zeros past
the row's end and for the rows from ``src_rows`` on. Rows with unit element stride are read
as the aligned 16-byte chunks holding the vector and shifted into place (whole words by
``select``, the rest by ``llvm.fshr.i32``, PTX's shf.r); the last source row and strided rows
one element at a time.
"""
from __future__ import annotations

import functools

from ..pack import PACK_PARAMS, VECTOR_BYTES, pack_entry, vector_elems
from . import target
from .builder import Builder, Val, const

I64, V4 = "i64", "<4 x i32>"
# Element bytes -> the integer type one element is loaded as.
ELEMENT_TYPES = {1: "i8", 2: "i16", 4: "i32"}


class _Kernel:
    """The builder and the kernel's parameters as values."""

    def __init__(self) -> None:
        self.b = Builder()
        self.p = {name: Val(f"%{name}", "ptr addrspace(1)" if kind == "u64" else "i32")
                  for name, kind in PACK_PARAMS}

    def sreg(self, name: str) -> Val:
        return self.b.call(f"llvm.nvvm.read.ptx.sreg.{name}", "i32", [])

    def wide(self, a: Val, b) -> Val:
        """The 64-bit product of two unsigned 32-bit values (mul.wide.u32)."""
        x = self.b.cast("zext", a, I64)
        return self.b.binop("mul", x, self.b.cast("zext", b, I64) if isinstance(b, Val) else b)

    def guarded(self, ty: str, pointer: Val, cond: Val, align: int) -> Val:
        """A load where ``cond`` holds, else zero."""
        b = self.b
        before, then, join = b.block, b.new_block("load"), b.new_block("loaded")
        b.cbr(cond, then, join)
        b.position(then)
        loaded = b.load(ty, pointer, align)
        b.br(join)
        b.position(join)
        result, line = b.phi(ty)
        zero = "zeroinitializer" if ty.startswith("<") else "0"
        b.close_phi(join, line, result, [(Val(zero, ty), before), (loaded, then)])
        return result


def _row_loop(k: _Kernel, row0: Val, row_step: Val, elem_shift: int, dst_col: Val,
              load_words, last_row=None) -> None:
    """The loop over this thread's rows: store ``load_words(row offset)``'s four words (or
    ``last_row``'s for row src_rows - 1, or zeros from src_rows on), step by the grid's
    height; returns when the rows are done."""
    b, p = k.b, k.p
    before = b.block
    head, body, done = b.new_block("rows"), b.new_block("row"), b.new_block("rows_done")
    b.br(head)
    b.position(head)
    row, line = b.phi("i32")
    b.cbr(b.icmp("uge", row, p["rows"]), done, body)
    b.position(body)
    offset = b.binop("add", b.binop("shl", k.wide(row, p["dst_row_stride"]), elem_shift),
                     dst_col)
    dst = b.gep(p["dst"], offset)
    source, padding, next_row = b.new_block("source"), b.new_block("zero"), b.new_block("next")
    b.cbr(b.icmp("uge", row, p["src_rows"]), padding, source)
    b.position(source)
    row_offset = k.wide(row, p["src_row_stride"])
    if last_row is not None:
        plain, last = b.new_block("plain"), b.new_block("last")
        b.cbr(b.icmp("eq", row, b.binop("sub", p["src_rows"], 1)), last, plain)
        b.position(last)
        b.store(_vector(k, last_row(row_offset)), dst, VECTOR_BYTES)
        b.br(next_row)
        b.position(plain)
    b.store(_vector(k, load_words(row_offset)), dst, VECTOR_BYTES)
    b.br(next_row)
    b.position(padding)
    b.store(Val("zeroinitializer", V4), dst, VECTOR_BYTES)
    b.br(next_row)
    b.position(next_row)
    row_next = b.binop("add", row, row_step)
    b.br(head)
    b.close_phi(head, line, row, [(row0, before), (row_next, next_row)])
    b.position(done)
    b.ret()


def _vector(k: _Kernel, words: list[Val]) -> Val:
    vector = Val("poison", V4)
    for index, word in enumerate(words):
        vector = k.b.assign(V4, f"insertelement {vector}, {word}, i32 {index}")
    return vector


def _inside_masks(k: _Kernel, left: Val, elem_bytes: int) -> list[Val]:
    """Per 32-bit word of the vector, the bits of the elements inside the row."""
    per_word = 4 // elem_bytes
    element_bits = (1 << (8 * elem_bytes)) - 1
    masks = []
    for j in range(4):
        mask = const(0, "i32")
        for e in range(per_word):
            bits = k.b.select(k.b.icmp("sgt", left, j * per_word + e),
                              element_bits << (8 * elem_bytes * e), 0)
            mask = k.b.binop("or", mask, bits)
        masks.append(mask)
    return masks


def _contiguous_loader(k: _Kernel, left: Val, first_col: Val, elem_bytes: int,
                       elem_shift: int):
    b, p = k.b, k.p
    available = b.binop("shl", left, elem_bytes.bit_length() - 1)  # bytes, may be <= 0
    some = b.icmp("sgt", available, 0)
    masks = _inside_masks(k, left, elem_bytes)
    col = k.wide(first_col, elem_bytes)

    def load_words(row_offset: Val) -> list[Val]:
        address = b.gep(p["src"], b.binop("add", b.binop("shl", row_offset, elem_shift), col))
        skew = b.binop("and", b.cast("trunc", b.cast("ptrtoint", address, I64), "i32"),
                       VECTOR_BYTES - 1)
        chunk = b.gep(address, b.binop("sub", const(0, I64), b.cast("zext", skew, I64)))
        second = ctx_and(b, b.icmp("sgt", b.binop("add", skew, available), VECTOR_BYTES), some)
        loaded = []
        for half, cond in ((chunk, some), (b.gep(chunk, const(VECTOR_BYTES, I64)), second)):
            vector = k.guarded(V4, half, cond, VECTOR_BYTES)
            loaded += [b.assign("i32", f"extractelement {vector}, i32 {j}") for j in range(4)]
        # Whole words first: picked[j] = loaded[j + skew / 4], for j = 0..4.
        whole = b.binop("lshr", skew, 2)
        by = [b.icmp("eq", whole, count) for count in (1, 2, 3)]
        picked = []
        for j in range(5):
            value = loaded[j]
            for count, cond in zip((1, 2, 3), by):
                value = b.select(cond, loaded[j + count], value)
            picked.append(value)
        bits = b.binop("shl", b.binop("and", skew, 3), 3)
        return [b.binop("and", b.call("llvm.fshr.i32", "i32", [picked[j + 1], picked[j], bits]),
                        masks[j]) for j in range(4)]

    return load_words


def ctx_and(b: Builder, x: Val, y: Val) -> Val:
    return b.binop("and", x, y, "i1")


def _strided_loader(k: _Kernel, left: Val, first_col: Val, elem_bytes: int, elem_shift: int):
    b, p = k.b, k.p
    ty = ELEMENT_TYPES[elem_bytes]
    inside = [b.icmp("sgt", left, e) for e in range(vector_elems(elem_bytes))]
    src_col = k.wide(first_col, p["src_col_stride"])
    src_step = k.wide(p["src_col_stride"], elem_bytes)

    def load_words(row_offset: Val) -> list[Val]:
        src = b.gep(p["src"], b.binop("shl", b.binop("add", row_offset, src_col), elem_shift))
        values = []
        for e, ok in enumerate(inside):
            if e:
                src = b.gep(src, src_step)
            values.append(k.guarded(ty, src, ok, elem_bytes))
        if elem_bytes == 4:
            return values
        # 4 // elem_bytes elements per 32-bit word, the first in the low bits (the
        # contiguous loader's little-endian words).
        per_word = 4 // elem_bytes
        words = []
        for j in range(4):
            word = b.cast("zext", values[per_word * j], "i32")
            for i in range(1, per_word):
                shifted = b.binop("shl", b.cast("zext", values[per_word * j + i], "i32"),
                                  8 * elem_bytes * i)
                word = b.binop("or", word, shifted)
            words.append(word)
        return words

    return load_words


def _body(k: _Kernel, elem_bytes: int) -> None:
    b, p = k.b, k.p
    per_vector = vector_elems(elem_bytes)
    elem_shift = elem_bytes.bit_length() - 1
    b.position(b.new_block("entry"))
    vector = b.binop("add", b.binop("mul", k.sreg("ctaid.x"), k.sreg("ntid.x")), k.sreg("tid.x"))
    vectors = b.binop("lshr", p["dst_row_stride"], per_vector.bit_length() - 1)
    work, leave = b.new_block("work"), b.new_block("leave")
    b.cbr(b.icmp("uge", vector, vectors), leave, work)
    b.position(leave)
    b.ret()
    b.position(work)
    row0 = b.binop("add", b.binop("mul", k.sreg("ctaid.y"), k.sreg("ntid.y")), k.sreg("tid.y"))
    row_step = b.binop("mul", k.sreg("nctaid.y"), k.sreg("ntid.y"))
    first_col = b.binop("shl", vector, per_vector.bit_length() - 1)
    left = b.binop("sub", p["cols"], first_col)
    dst_col = k.wide(first_col, elem_bytes)
    contiguous, strided = b.new_block("contiguous"), b.new_block("strided")
    b.cbr(b.icmp("eq", p["src_col_stride"], 1), contiguous, strided)
    b.position(contiguous)
    # The last source row goes element by element: its aligned chunks may reach past the
    # tensor's last byte, which may be its allocation's.
    _row_loop(k, row0, row_step, elem_shift, dst_col,
              _contiguous_loader(k, left, first_col, elem_bytes, elem_shift),
              last_row=_strided_loader(k, left, first_col, elem_bytes, elem_shift))
    b.position(strided)
    _row_loop(k, row0, row_step, elem_shift, dst_col,
              _strided_loader(k, left, first_col, elem_bytes, elem_shift))


def pack_ir(elem_bytes: int, arch: str) -> str:
    """The LLVM IR module of the pack kernel (one entry, :func:`pack_entry`)."""
    if elem_bytes not in ELEMENT_TYPES:
        raise ValueError(f"the pack kernel moves 1-, 2- or 4-byte elements, not "
                         f"{elem_bytes}-byte")
    k = _Kernel()
    _body(k, elem_bytes)
    params = ", ".join(f"{v.ty} {v.ref}" for v in k.p.values())
    lines = [f"; Generated by tilec: the operand pack kernel for {elem_bytes}-byte elements",
             f'target datalayout = "{target.data_layout(arch)}"',
             f'target triple = "{target.TRIPLE}"', "", *k.b.declarations.values(), "",
             f"define ptx_kernel void @{pack_entry(elem_bytes)}({params}) {{",
             *k.b.text(), "}"]
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=None)
def pack_ptx(elem_bytes: int, arch: str) -> str:
    """The pack kernel's PTX through LLVM, for ``arch`` (checked as the backend checks it)."""
    target.selection(arch)
    return target.compile_ir(pack_ir(elem_bytes, arch), arch, 3)[1]
