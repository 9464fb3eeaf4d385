"""A tile function's parameter list: run-time parameters (tensors with their shape symbols,
scalars) and compile-time constants, checked and described as a :class:`Signature`; and the
constants' final values once the user's overrides are applied."""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from tilec.errors import TileNameError, TileShapeError, TileTypeError
from tilec.frontend import ast
from tilec.frontend.diagnostics import LocatedErrors, did_you_mean
from tilec.frontend.operands import DTYPES, dtype_list, is_predefined
from tilec.ir.core import Loc
from tilec.ir.types import F32, I32, TENSOR_DTYPES, Dim, DType, ScalarType, TensorType

SCALAR_PARAM_DTYPES = (F32, I32)


@dataclass(frozen=True)
class ParamInfo:
    """A run-time parameter: a tensor (``dims`` are symbols or sizes) or a scalar."""

    name: str
    kind: str  # "tensor" or "scalar"
    dtype: DType
    dims: tuple[Dim, ...]
    loc: Loc

    @property
    def type(self) -> Union[TensorType, ScalarType]:
        if self.kind == "tensor":
            return TensorType(self.dtype, self.dims)
        return ScalarType(self.dtype)


@dataclass(frozen=True)
class Signature:
    """What a tile function takes: run-time parameters, the shape symbols bound from their
    dims (in order of first appearance) and the compile-time constants with their defaults."""

    name: str
    params: tuple[ParamInfo, ...]
    symbols: tuple[str, ...]
    consts: dict[str, Union[int, float]]
    const_locs: dict[str, Loc] = field(compare=False, repr=False)


def signature(func: ast.FunctionDef) -> Signature:
    """Check the parameter list of ``func`` and describe it."""
    errors = LocatedErrors(func.source_lines)
    params: list[ParamInfo] = []
    consts: dict[str, Union[int, float]] = {}
    const_locs: dict[str, Loc] = {}
    symbols: dict[str, Loc] = {}
    seen: set[str] = set()
    for param in func.params:
        assert not isinstance(param, ast.Unsupported)  # the parser refused those
        if param.name in seen:
            raise errors.at(TileNameError, f"duplicate parameter '{param.name}'", param.loc)
        if is_predefined(param.name):
            raise errors.at(TileNameError, f"parameter '{param.name}' hides the built-in "
                            f"'{param.name}'", param.loc, "choose another name")
        seen.add(param.name)
        if isinstance(param, ast.ConstParam):
            consts[param.name] = _default_value(param, errors)
            const_locs[param.name] = param.loc
        elif isinstance(param, ast.ScalarParam):
            dtype = _dtype(param.dtype, errors)
            if dtype not in SCALAR_PARAM_DTYPES:
                raise errors.at(TileTypeError, f"scalar parameters are f32 or i32, not {dtype}",
                                param.dtype.loc,
                                f"for a tensor give its dims: {param.name}: {dtype}[M, K]")
            params.append(ParamInfo(param.name, "scalar", dtype, (), param.loc))
        else:
            dtype = _dtype(param.dtype, errors)
            if dtype not in TENSOR_DTYPES:
                raise errors.at(TileTypeError, f"tensors hold {dtype_list(TENSOR_DTYPES)}, "
                                f"not {dtype}", param.dtype.loc)
            if not 1 <= len(param.dims) <= 3:
                raise errors.at(TileShapeError, f"tensors have 1 to 3 dims (3: a batch of "
                                f"matrices); '{param.name}' has {len(param.dims)}", param.loc)
            dims: list[Dim] = []
            for dim in param.dims:
                if isinstance(dim, ast.Name):
                    symbols.setdefault(dim.id, dim.loc)
                    dims.append(dim.id)
                elif isinstance(dim.value, int) and dim.value > 0:
                    dims.append(dim.value)
                else:
                    raise errors.at(TileShapeError, "a tensor dimension is a shape symbol (M) or "
                                    "a positive integer", dim.loc)
            params.append(ParamInfo(param.name, "tensor", dtype, tuple(dims), param.loc))
    for symbol, loc in symbols.items():
        if symbol in seen:
            raise errors.at(TileNameError, f"'{symbol}' names both a shape symbol and a "
                            "parameter", loc, "give the dimension another name")
        if is_predefined(symbol):
            raise errors.at(TileNameError, f"shape symbol '{symbol}' hides the built-in "
                            f"'{symbol}'", loc)
    return Signature(func.name, tuple(params), tuple(symbols), consts, const_locs)


def _dtype(name: ast.Name, errors: "LocatedErrors") -> DType:
    if name.id not in DTYPES:
        raise errors.at(TileTypeError, f"unknown dtype '{name.id}'", name.loc,
                        did_you_mean(name.id, DTYPES)
                        or f"dtypes are {dtype_list(TENSOR_DTYPES, 'and')}")
    return DTYPES[name.id]


def _default_value(param: ast.ConstParam, errors: "LocatedErrors") -> Union[int, float]:
    node, sign = param.default, 1
    while isinstance(node, ast.UnaryOp):
        sign = -sign if node.op == "-" else sign
        node = node.operand
    if not isinstance(node, ast.Constant) or node.value is None:
        raise errors.at(TileTypeError, f"the default of constant '{param.name}' must be a "
                        "number", param.default.loc, f"for example {param.name}=128")
    return sign * node.value


def resolve_consts(sig: Signature, overrides: Optional[dict[str, Any]], loc: Loc,
                   source_lines: Sequence[str]) -> dict[str, Union[int, float]]:
    """The constants' final values: defaults, replaced by the user's overrides."""
    errors = LocatedErrors(source_lines)
    consts = dict(sig.consts)
    for name, value in (overrides or {}).items():
        if name not in consts:
            known = ", ".join(consts) or "none"
            hint = did_you_mean(name, consts)
            raise errors.at(TileNameError, f"unknown constant '{name}' for '{sig.name}' "
                            f"(its constants: {known})", loc, hint)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise errors.at(TileTypeError, f"constant '{name}' must be a number, got "
                            f"{value!r}", sig.const_locs.get(name, loc))
        if isinstance(consts[name], int):
            if not isinstance(value, numbers.Integral):
                raise errors.at(TileTypeError, f"constant '{name}' is an integer, got "
                                f"{value!r}", sig.const_locs.get(name, loc))
            value = int(value)
        else:
            value = float(value)
        consts[name] = value
    return consts
