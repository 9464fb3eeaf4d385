"""AST to IR: checks what a tile function means and lowers it to a :class:`tilec.ir.Kernel`.

Every semantic error (unknown names, dtypes, shapes, ranks, non-constant tile sizes, misplaced
grids...) is raised while lowering as a :class:`TileError` pointing at the user's source, before
any IR is returned; the IR handed back passes :func:`tilec.ir.verify`.

The work is split by what is being lowered; each layer's class builds on the ones it uses:

- :mod:`.signature`: the parameter list and the constants' values;
- :mod:`.scalars`: the lowering's state, names, numbers, scalar and index arithmetic;
- :mod:`.tiles`: tile arithmetic (broadcasting, dtype promotion, casts) and matrix products;
- :mod:`.calls`: built-in functions and ``.to(dtype)``;
- :mod:`.tensor_access`: loads, stores, ``.T`` and indexing of tiles;
- :mod:`.statements`: assignments and range loops with their loop-carried values;
- here: the kernel (parameters bound, the single grid loop) and :func:`lower`.

Before::

    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m*BM : +BM, k : +BK] @ B[k : +BK, n*BN : +BN]

After (abridged)::

    %m, %n = tile.grid %0, %1 : i32, i32
    %acc = tile.full {shape = [128, 128], value = 0.0} : tile<f32,[128,128]>
    %acc.1 = scf.for %2, %K, %BK, %acc {step_const = 32} (%k: i32, %acc.2: ...) {
      ...
      %acc.3 = tile.dot %5, %8, %acc.2 : tile<f32,[128,128]>
      scf.yield %acc.3
    }
"""
from __future__ import annotations

import dataclasses

from typing import Any, Optional, Sequence

from tilec.errors import TileError, TileNameError, TileShapeError
from tilec.frontend import ast
from tilec.frontend.calls import CallLowering
from tilec.frontend.diagnostics import counted
from tilec.frontend.operands import Binding, ConstValue
from tilec.frontend.signature import ParamInfo, Signature, resolve_consts, signature
from tilec.frontend.statements import StatementLowering, is_grid_loop
from tilec.ir.core import Kernel, Param
from tilec.ir.ops import IRError
from tilec.ir.types import I32, ScalarType
from tilec.ir.verifier import verify

__all__ = ["ParamInfo", "Signature", "lower", "resolve_consts", "signature"]


def lower(func: ast.FunctionDef, consts: Optional[dict[str, Any]] = None,
          source_lines: Optional[Sequence[str]] = None) -> Kernel:
    """Lower ``func`` with its constants (defaults replaced by ``consts``) to a verified
    kernel. ``source_lines`` default to the lines the parser kept on ``func``."""
    lines = tuple(source_lines) if source_lines is not None else func.source_lines
    lowering = _Lowering(func, lines)
    try:
        kernel = lowering.run(consts)
        verify(kernel)
    except TileError:
        raise
    except IRError as err:
        raise lowering.errors.at(TileError, f"internal compiler error: the frontend built "
                                 f"invalid IR: {err}", lowering.loc) from err
    except Exception as err:  # a compiler bug still points at the user's code
        raise lowering.errors.at(TileError, f"internal compiler error while lowering: "
                                 f"{type(err).__name__}: {err}", lowering.loc) from err
    return kernel


class _Lowering(StatementLowering, CallLowering):
    """The whole kernel: parameters, symbols and constants bound, then the single grid loop
    around the work."""

    def run(self, overrides: Optional[dict[str, Any]]) -> Kernel:
        func = self.func
        sig = signature(func)
        consts = resolve_consts(sig, overrides, func.loc, self.source_lines)
        body = self.builder.block
        params: list[Param] = []
        for info in sig.params:
            params.append(Param(info.name, info.type, info.loc))
            self.env[info.name] = Binding(body.add_arg(info.type, info.name), "param",
                                          info.loc)
        for symbol in sig.symbols:
            self.env[symbol] = Binding(body.add_arg(ScalarType(I32), symbol), "symbol",
                                       func.loc)
        for name, value in consts.items():
            self.env[name] = Binding(ConstValue(value, name), "const", sig.const_locs[name])
        self._kernel_body(func)
        params = [dataclasses.replace(p, branch_only=p.name in self.untaken_names)
                  for p in params]
        return Kernel(func.name, params, list(sig.symbols), consts, body, func.file,
                      self.source_lines)

    def _kernel_body(self, func: ast.FunctionDef) -> None:
        statements = [s for s in func.body if not isinstance(s, ast.PassStmt)]
        grid_loops = [s for s in statements if is_grid_loop(s)]
        for stmt in statements:
            if is_grid_loop(stmt) and stmt is grid_loops[0]:
                continue
            if is_grid_loop(stmt):
                raise self.error(TileError, "a tile function has a single grid loop", stmt.loc,
                                 "put all the work inside the first grid loop")
            if isinstance(stmt, ast.ForStmt):
                raise self.error(TileError, "the top-level loop of a tile function must be "
                                 "`for ... in grid(...)`", stmt.loc,
                                 "range loops go inside the grid loop")
            raise self.error(TileError, "a tile function's body is a single "
                             "`for ... in grid(...)` loop; this statement is outside it",
                             stmt.loc, "move it inside the grid loop")
        if not grid_loops:
            raise self.error(TileError, f"'{func.name}' has no grid loop", func.loc,
                             "its body must be `for pid in grid(...):` around all the work")
        self._grid(grid_loops[0])

    def _grid(self, loop: ast.ForStmt) -> None:
        call = loop.iter
        assert isinstance(call, ast.Call)
        if call.keywords:
            raise self.error(TileError, "grid() takes no keyword arguments",
                             call.keywords[0].loc)
        if not 1 <= len(call.args) <= 3:
            raise self.error(TileShapeError, f"a grid has 1 to 3 axes, not {len(call.args)}",
                             call.loc)
        if len(loop.targets) != len(call.args):
            axes = counted(len(call.args), "axis", "axes")
            ids = counted(len(loop.targets), "program id")
            raise self.error(TileShapeError, f"the grid has {axes} but the loop names {ids}",
                             loop.targets[0].loc, "name one program id per grid size: "
                             "for m, n in grid(cdiv(M, BM), cdiv(N, BN))")
        for i, target in enumerate(loop.targets):
            self._check_new_name(target, "program id")
            if target.id in [t.id for t in loop.targets[:i]]:
                raise self.error(TileNameError, f"program id '{target.id}' is named twice",
                                 target.loc)
        self.grid_targets = {t.id for t in loop.targets}
        sizes = [self._index(self.expr(arg), arg, "a grid size") for arg in call.args]
        self.grid_targets = None
        with self.builder.located(loop.loc):
            op = self.builder.op("tile.grid", sizes, [ScalarType(I32)] * len(sizes),
                                 hints=[t.id for t in loop.targets])
        for target, pid in zip(loop.targets, op.results):
            self.env[target.id] = Binding(pid, "program_id", target.loc)
        self._statements(loop.body)
