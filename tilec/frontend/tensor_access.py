"""Tensor accesses: loads ``A[off : +SIZE, ...]`` (and their transposes ``A[...].T``,
``A.T[...]``), stores ``C[...] = tile``, slice sizes proven constant, and indexing a 1-D tile
as a column or a row."""
from __future__ import annotations

from typing import Optional, Union

from tilec.errors import TileError, TileShapeError, TileTypeError
from tilec.frontend import ast
from tilec.frontend.arithmetic import linear_difference
from tilec.frontend.diagnostics import a_or_an, counted, shape_text, start_loc
from tilec.frontend.operands import (TILE_METHODS, ConstValue, Operand, describe,
                                     is_predefined, is_scalar, is_tensor, is_tile)
from tilec.frontend.tiles import TileLowering
from tilec.ir.core import Block, Builder, Loc, Value, constant_value
from tilec.ir.types import F32, FP8_DTYPES, I32, TensorType, TileType


class TensorAccessLowering(TileLowering):
    """Lowers tensor loads and stores, ``.T``, and indexing of tiles."""

    def _expr_Attribute(self, node: ast.Attribute) -> Operand:
        if node.attr in TILE_METHODS:
            raise self.error(TileError, f"'.{node.attr}' is a method: call it, as in "
                             f"x.{node.attr}(f16)", node.loc)
        if node.attr != "T":
            raise self.error(TileError, f"unknown attribute '.{node.attr}'", node.loc,
                             "tiles and tensors have .T; tiles have .to(dtype)")
        if isinstance(node.value, ast.Subscript):
            base = self.expr(node.value.value)
            if is_tensor(base):
                # T[rows, cols].T reads the same elements as T.T[cols, rows].
                return self._load(base, node.value, transposed_at=node.loc)
            value = self._index_tile(base, node.value)
        else:
            value = self.expr(node.value)
        if is_tensor(value):
            return self._transpose_view(value, node)
        if is_tile(value):
            raise self.error(TileError, "'.T' applies to a tensor parameter (A.T) or to a tile "
                             "loaded from one (A[...].T), not to a computed tile", node.loc)
        raise self.error(TileTypeError, f"'.T' applies to tensors, not to {describe(value)}",
                         node.loc)

    def _transpose_view(self, tensor: Value, node: ast.Node) -> Value:
        ttype = tensor.type
        if ttype.rank != 2:
            hint = (f"pick the batch first: {tensor.hint or 'T'}[b, ...].T"
                    if ttype.rank == 3 else "")
            raise self.error(TileShapeError, f"'.T' needs a 2-D tensor; "
                             f"{describe(tensor)} is {ttype.rank}-D", node.loc, hint)
        view = TensorType(ttype.dtype, (ttype.shape[1], ttype.shape[0]))
        hint = f"{tensor.hint}_T" if tensor.hint else ""
        with self.builder.located(node.loc):
            return self.builder.value("tensor.transpose", [tensor], view, hint)

    def _expr_Subscript(self, node: ast.Subscript) -> Operand:
        base = self.expr(node.value)
        if is_tensor(base):
            return self._load(base, node)
        return self._index_tile(base, node)

    def _load(self, tensor: Value, node: ast.Subscript,
              transposed_at: Optional[Loc] = None) -> Value:
        tensor, node = self._batch_select(tensor, node)
        offsets, sizes = self._tensor_slices(tensor, node)
        if transposed_at is not None:
            tensor = self._transpose_view(tensor, node)
            offsets.reverse()
            sizes.reverse()
        shape = tuple(sizes)
        with self.builder.located(node.loc):
            return self.builder.value("tile.load", [tensor, *offsets],
                                      TileType(tensor.type.dtype, shape), shape=shape)

    def _batch_select(self, tensor: Value, node: ast.Subscript) -> tuple[Value, ast.Subscript]:
        """``A[b, rows, cols]`` on a 3-D tensor: the 2-D tensor of batch ``b`` (a
        ``tensor.batch`` view) and the access's two slices; other tensors pass unchanged.
        The batch index is a program id, so that compiling can check that its grid axis
        counts exactly the tensor's batches (:mod:`tilec.passes.coverage`)."""
        if tensor.type.rank != 3:
            return tensor, node
        name = tensor.hint or "T"
        example = f"{name}[b, off : +SIZE, off : +SIZE]"
        if len(node.indices) != 3:
            count = counted(len(node.indices), "index", "indices")
            raise self.error(TileShapeError, f"{describe(tensor)} is 3-D (a batch of matrices) "
                             f"but this access has {count}", node.loc,
                             f"write {example}, b being the batch's program id")
        index = node.indices[0]
        if isinstance(index, ast.Slice):
            raise self.error(TileShapeError, f"the batch index of {describe(tensor)} is a "
                             "single index, not a slice", index.loc,
                             f"write {example}, b being the batch's program id")
        binding = self.env.get(index.id) if isinstance(index, ast.Name) else None
        if binding is None or binding.kind != "program_id":
            if isinstance(index, ast.Name):
                self._lookup_only(index)
            raise self.error(TileShapeError, f"the batch index of {describe(tensor)} must be "
                             "a program id of the grid", index.loc,
                             "for b, m, n in grid(Bt, cdiv(M, BM), cdiv(N, BN)): ... "
                             f"{example}")
        return (self._batch_view(tensor, binding.value, node.loc),
                ast.Subscript(node.value, node.indices[1:], loc=node.loc))

    def _batch_view(self, tensor: Value, program_id: Value, loc: Loc) -> Value:
        """The ``tensor.batch`` view, made once at the top level right after the grid (its
        address is then computed once per program, not once per K step)."""
        key = (tensor, program_id)
        if key not in self.batch_views:
            view_type = TensorType(tensor.type.dtype, tensor.type.shape[1:])
            hint = f"{tensor.hint}_{program_id.hint}" if tensor.hint else ""
            maker = Builder(Block(), loc)
            view = maker.value("tensor.batch", [tensor, program_id], view_type, hint)
            ops = self.kernel_block.ops
            at = ops.index(program_id.owner) + 1 + len(self.batch_views)
            ops[at:at] = maker.block.ops
            self.batch_views[key] = view
        return self.batch_views[key]

    def _tensor_slices(self, tensor: Value, node: ast.Subscript) -> tuple[list[Value],
                                                                           list[int]]:
        rank = tensor.type.rank
        name = tensor.hint or "T"
        example = ", ".join(["off : +SIZE"] * rank)
        if len(node.indices) != rank:
            raise self.error(TileShapeError, f"{describe(tensor)} is {rank}-D but this access "
                             f"has {counted(len(node.indices), 'slice')}", node.loc,
                             f"write {name}[{example}]")
        offsets: list[Value] = []
        sizes: list[int] = []
        for index in node.indices:
            if not isinstance(index, ast.Slice):
                raise self.error(TileShapeError, "a tensor access takes slices, not single "
                                 "indices", index.loc, "write `start : +SIZE`, e.g. "
                                 "`m*BM : +BM` (`i : +1` for one row)")
            if index.step is not None:
                raise self.error(TileShapeError, "slice steps are not supported",
                                 index.step.loc)
            if index.size is not None:
                size = self._constant_size(index.size, "a tile size")
            elif index.stop is not None:
                size = self._size_from_stop(index)
            else:
                raise self.error(TileShapeError, "a tensor access needs the tile size",
                                 index.loc, "write `start : +SIZE`, e.g. `k : +BK`")
            if index.start is None:
                with self.builder.located(index.loc):
                    offset = self._scalar_constant(ConstValue(0), I32)
            else:
                offset = self._index(self.expr(index.start), index.start, "a tile offset")
            if tensor.type.shape[len(sizes)] == 1:
                self._check_unit_slice(tensor, len(sizes), index, size, offset, name)
            offsets.append(offset)
            sizes.append(size)
        return offsets, sizes

    def _check_unit_slice(self, tensor: Value, dim: int, index: ast.Slice, size: int,
                          offset: Value, name: str) -> None:
        """A dim declared with one element (``bias: f16[1, N]``) is sliced ``0:1``: the
        [1, N] / [M, 1] tile then broadcasts along it. A longer slice or a constant start
        past 0 reads only zeros there, surely not what was meant."""
        start = constant_value(offset)
        wrong = ([f"takes {size} elements"] if size != 1 else []) + (
            [f"starts at {start}"] if start not in (0, None) else [])
        if wrong:
            shape = ", ".join(str(d) for d in tensor.type.shape)
            raise self.error(TileShapeError, f"dim {dim} of {describe(tensor)} "
                             f"({tensor.type.dtype}[{shape}]) has one element; this slice "
                             f"{' and '.join(wrong)}", index.loc,
                             f"write {name}[{_unit_example(tensor.type.rank, dim)}]: a "
                             "[1, N] or [M, 1] tile broadcasts along its extent-1 dim")

    def _size_from_stop(self, index: ast.Slice) -> int:
        """``start : stop`` is accepted when ``stop - start`` folds to a constant."""
        assert index.stop is not None
        for node in ast.iter_nodes(index.stop):
            if isinstance(node, ast.Name):
                self._lookup_only(node)
        difference = linear_difference(index.stop, index.start, self._constant_of)
        if difference is None:
            raise self.error(TileShapeError, "the tile size (stop - start) is not a "
                             "compile-time constant", start_loc(index.stop),
                             "write `start : +SIZE`, e.g. `k : +BK`")
        if difference <= 0:
            raise self.error(TileShapeError, f"this slice is empty (stop - start = "
                             f"{difference})", index.loc)
        return difference

    def _lookup_only(self, node: ast.Name) -> None:
        """Raise the usual error for an unknown name without lowering anything."""
        if node.id not in self.env and not is_predefined(node.id):
            self._expr_Name(node)

    def _constant_of(self, name: str) -> Optional[int]:
        binding = self.env.get(name)
        if binding is not None and isinstance(binding.value, ConstValue):
            value = binding.value.value
            return value if isinstance(value, int) else None
        return None

    def _index_tile(self, base: Operand, node: ast.Subscript) -> Value:
        """``t[:, None]`` and ``t[None, :]``: a 1-D tile as a column or a row."""
        if not is_tile(base):
            raise self.error(TileTypeError, f"cannot index {describe(base)}", node.loc)
        pattern = tuple(_index_kind(index) for index in node.indices)
        if base.type.rank == 1 and pattern == ("all", "none"):
            shape = (base.type.shape[0], 1)
        elif base.type.rank == 1 and pattern in (("none", "all"), ("none",)):
            shape = (1, base.type.shape[0])
        else:
            raise self.error(TileShapeError, "a tile can only be indexed as t[:, None] or "
                             f"t[None, :] (on 1-D tiles); this is {describe(base)}",
                             node.loc, "load the part you need from the tensor instead")
        with self.builder.located(node.loc):
            return self.builder.value("tile.reshape", [base], base.type.with_(shape=shape))

    def _store(self, target: ast.Subscript, value: Operand, value_node: ast.Expr) -> None:
        tensor = self.expr(target.value)
        if not is_tensor(tensor):
            raise self.error(TileError, f"cannot store into {describe(tensor)}", target.loc,
                             "stores go into tensor parameters: C[... : +BM, ...] = tile")
        dtype = tensor.type.dtype
        name = tensor.hint or "the tensor"
        tensor, target = self._batch_select(tensor, target)
        offsets, sizes = self._tensor_slices(tensor, target)
        shape = tuple(sizes)
        with self.builder.located(target.loc):
            if isinstance(value, ConstValue) and dtype in FP8_DTYPES:
                # Tiles are not made in 8 bits: the number goes in f32, then converted.
                value = self._cast(self._tile_operand(value, F32, shape), dtype)
            elif isinstance(value, ConstValue) or (is_scalar(value)
                                                   and value.type.dtype == dtype):
                value = self._tile_operand(value, dtype, shape)
            if not is_tile(value):
                raise self.error(TileTypeError, f"cannot store {describe(value)} into "
                                 f"'{name}', {a_or_an(dtype)} {dtype} tensor",
                                 start_loc(value_node))
            if value.type.dtype != dtype:
                raise self.error(TileTypeError, f"storing {describe(value)} into '{name}', "
                                 f"{a_or_an(dtype)} {dtype} tensor", start_loc(value_node),
                                 f"convert it first: (...).to({dtype})")
            if value.type.shape != shape:
                raise self.error(TileShapeError, f"storing {describe(value)} into a "
                                 f"{shape_text(shape)} slice of '{name}'", target.loc,
                                 "the slice sizes must equal the tile's shape")
            self.builder.op("tile.store", [tensor, *offsets, value])


def _unit_example(rank: int, dim: int) -> str:
    return ", ".join("0:1" if d == dim else "off : +SIZE" for d in range(rank))


def _index_kind(index: Union[ast.Expr, ast.Slice]) -> str:
    if isinstance(index, ast.Constant) and index.value is None:
        return "none"
    if isinstance(index, ast.Slice) and index == ast.Slice(loc=index.loc):
        return "all"
    return "other"
