"""Statements inside the grid loop: assignments (which name the IR after the user's
variables), stores, and ``range`` loops, whose loop-carried values become ``scf.for``
arguments and ``scf.yield`` operands."""
from __future__ import annotations

from typing import Optional, Sequence, Union

from tilec.errors import TileError, TileNameError, TileTypeError
from tilec.frontend import ast
from tilec.frontend.diagnostics import start_loc
from tilec.frontend.operands import Binding, ConstValue, describe, is_predefined
from tilec.frontend.scalars import RUNTIME_IF_HINT
from tilec.frontend.tensor_access import TensorAccessLowering
from tilec.ir.core import Block, Loc, Op, Value
from tilec.ir.types import F32, I32, ScalarType, TileType


class StatementLowering(TensorAccessLowering):
    """Lowers the statements of a loop body: assignments, stores and range loops."""

    def _statements(self, statements: Sequence[ast.Stmt]) -> None:
        for stmt in statements:
            self.loc = stmt.loc
            with self.builder.located(stmt.loc):
                if isinstance(stmt, ast.ForStmt):
                    self._range_loop(stmt)
                elif isinstance(stmt, ast.IfStmt):
                    self._statements(self._taken_branch(stmt))
                elif isinstance(stmt, ast.Assign):
                    self._assign(stmt.target, stmt.value, None, stmt.loc)
                elif isinstance(stmt, ast.AugAssign):
                    value = ast.BinOp(stmt.target, stmt.op, stmt.value, loc=stmt.op_loc)
                    self._assign(stmt.target, value, stmt.op, stmt.loc)
                elif isinstance(stmt, ast.ExprStmt):
                    self.expr(stmt.value)
                    raise self.error(TileError, "this expression's value is not used",
                                     stmt.loc, "assign it to a name, or store it into a "
                                     "tensor: C[... : +BM, ...] = value")
                elif not isinstance(stmt, ast.PassStmt):
                    raise self.error(TileError, "this statement is not supported in tile "
                                     "programs", stmt.loc)

    def _taken_branch(self, stmt: ast.IfStmt) -> Sequence[ast.Stmt]:
        """The statements of the side the condition, a compile-time constant, takes; the
        other side is never lowered (its names need not exist, its code is not compiled)."""
        self.branch_test = stmt
        try:
            test = self.expr(stmt.test)
        finally:
            self.branch_test = None
        if not isinstance(test, ConstValue):
            raise self.error(TileTypeError, f"`if` cannot branch on {describe(test)}, known "
                             "only when the kernel runs: `if` takes a condition known when "
                             "compiling (constants and constant expressions)",
                             stmt.test.loc, RUNTIME_IF_HINT)
        taken, untaken = (stmt.body, stmt.orelse) if test.value else (stmt.orelse, stmt.body)
        self.untaken_names.update(node.id for side in untaken for node in ast.iter_nodes(side)
                                  if isinstance(node, ast.Name))
        return taken

    def _assign(self, target: ast.Expr, value_node: ast.Expr, augmented: Optional[str],
                loc: Loc) -> None:
        if isinstance(target, ast.Name):
            self._check_assignable(target)
            value = self.expr(value_node)
            if isinstance(value, ConstValue) and not value.name:
                value = ConstValue(value.value, target.id)
            elif isinstance(value, Value) and not value.hint and isinstance(value.owner, Op):
                value.hint = target.id  # names the IR after the user's variables
            self.env[target.id] = Binding(value, "var", loc)
        elif isinstance(target, ast.Subscript):
            value = self.expr(value_node)
            self._store(target, value, value_node)
        else:
            what = f"`{augmented}=`" if augmented else "assignment"
            raise self.error(TileError, f"cannot use {what} on this expression", target.loc,
                             "assign to a name, or store into a tensor: "
                             "C[... : +BM, ...] = tile")

    def _check_assignable(self, target: ast.Name) -> None:
        binding = self.env.get(target.id)
        messages = {
            "param": (f"cannot assign to parameter '{target.id}'",
                      "parameters are read-only: store into a tensor with "
                      f"{target.id}[... : +SIZE] = tile, or use a new name"),
            "symbol": (f"cannot assign to shape symbol '{target.id}'", "use a new name"),
            "const": (f"cannot assign to compile-time constant '{target.id}'",
                      "constants take their default or an override when compiling"),
            "program_id": (f"cannot assign to program id '{target.id}'", "use a new name"),
            "loop_var": (f"cannot assign to loop variable '{target.id}'", "use a new name"),
        }
        if binding is not None and binding.kind in messages:
            message, hint = messages[binding.kind]
            raise self.error(TileError, message, target.loc, hint)
        if binding is None and is_predefined(target.id):
            raise self.error(TileError, f"cannot assign to the built-in name '{target.id}'",
                             target.loc, "use a new name")

    def _check_new_name(self, target: ast.Name, what: str) -> None:
        if target.id in self.env or is_predefined(target.id):
            raise self.error(TileNameError, f"{what} '{target.id}' hides an existing name",
                             target.loc, "choose a name not used before")

    def _range_loop(self, loop: ast.ForStmt) -> None:
        call = loop.iter
        if is_grid_loop(loop):
            raise self.error(TileError, "grid loops cannot be nested: only the top-level loop "
                             "of a tile function is a grid", call.loc,
                             "loops inside the grid iterate over range(...)")
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "range"):
            raise self.error(TileError, "loops inside the grid iterate over range(...)",
                             call.loc, "for k in range(0, K, BK):")
        if len(loop.targets) != 1:
            raise self.error(TileError, "a range loop has one loop variable",
                             loop.targets[1].loc)
        if call.keywords:
            raise self.error(TileError, "range() takes no keyword arguments",
                             call.keywords[0].loc)
        if not 1 <= len(call.args) <= 3:
            raise self.error(TileError, f"range() takes 1 to 3 arguments, not {len(call.args)}",
                             call.loc)
        target = loop.targets[0]
        self._check_new_name(target, "loop variable")
        # range(stop), range(start, stop) or range(start, stop, step), as in Python.
        args = list(call.args)
        start_node = args.pop(0) if len(args) > 1 else None
        stop_node = args.pop(0)
        step_node = args[0] if args else None
        start = self.expr(start_node) if start_node else ConstValue(0)
        stop = self.expr(stop_node)
        step = self.expr(step_node) if step_node else ConstValue(1)
        if not (isinstance(step, ConstValue) and isinstance(step.value, int)
                and step.value > 0):
            raise self.error(TileError, "the loop step must be a positive compile-time "
                             "integer", start_loc(step_node or call),
                             "use a constant such as BK")
        lower_bound = self._index(start, start_node or call, "the loop start")
        upper_bound = self._index(stop, stop_node, "the loop stop")
        step_value = self._index(step, step_node or call, "the loop step")

        # Loop-carried values: names bound before the loop and assigned in it.
        carried = [name for name in _assigned_names(loop.body)
                   if name in self.env and self.env[name].kind == "var"]
        inits = [self._carry_in(name) for name in carried]
        body = Block()
        induction = body.add_arg(ScalarType(I32), target.id)
        outer_env = self.env
        self.env = dict(outer_env)
        self.env[target.id] = Binding(induction, "loop_var", target.loc)
        for name, init in zip(carried, inits):
            self.env[name] = Binding(body.add_arg(init.type, name), "var",
                                     outer_env[name].loc)
        with self.builder.at(body):
            self._statements(loop.body)
            yielded = [self._carry_out(name, init.type) for name, init in zip(carried, inits)]
            with self.builder.located(loop.loc):
                self.builder.op("scf.yield", yielded)
        inner_env, self.env = self.env, outer_env
        for name in inner_env:
            if name not in outer_env:
                self.loop_locals[name] = (loop.loc, name == target.id)
        with self.builder.located(loop.loc):
            op = self.builder.op("scf.for", [lower_bound, upper_bound, step_value, *inits],
                                 [init.type for init in inits], {"step_const": step.value},
                                 [body], hints=carried)
        for name, result in zip(carried, op.results):
            self.env[name] = Binding(result, "var", inner_env[name].loc)

    def _carry_in(self, name: str) -> Value:
        binding = self.env[name]
        value = binding.value
        if isinstance(value, ConstValue):
            with self.builder.located(binding.loc):
                dtype = I32 if isinstance(value.value, int) else F32
                return self._scalar_constant(value, dtype, binding.loc)
        if isinstance(value, Value) and isinstance(value.type, (TileType, ScalarType)):
            return value
        raise self.error(TileError, f"'{name}' holds {describe(value)}, which cannot change "
                         "inside a loop", binding.loc, "use a new name inside the loop")

    def _carry_out(self, name: str, expected: Union[TileType, ScalarType]) -> Value:
        binding = self.env[name]
        value = binding.value
        if isinstance(value, ConstValue) and isinstance(expected, ScalarType):
            if expected.dtype == F32 or isinstance(value.value, int):
                with self.builder.located(binding.loc):
                    return self._scalar_constant(value, expected.dtype, binding.loc)
        if isinstance(value, Value) and value.type == expected:
            return value
        now = value.type if isinstance(value, Value) else describe(value)
        hint = "a value carried around a loop keeps its type"
        if (isinstance(now, TileType) and isinstance(expected, TileType)
                and now.dtype != expected.dtype):
            hint += f"; convert it with .to({expected.dtype})"
        raise self.error(TileTypeError, f"'{name}' changes type inside the loop: {expected} "
                         f"before it, {now} here", binding.loc, hint)


def is_grid_loop(stmt: ast.Stmt) -> bool:
    return (isinstance(stmt, ast.ForStmt) and isinstance(stmt.iter, ast.Call)
            and isinstance(stmt.iter.func, ast.Name) and stmt.iter.func.id == "grid")


def _assigned_names(statements: Sequence[ast.Stmt]) -> list[str]:
    """Names assigned in ``statements`` (nested loops included), in order of first
    assignment."""
    names: dict[str, None] = {}
    for stmt in statements:
        if isinstance(stmt, (ast.Assign, ast.AugAssign)) and isinstance(stmt.target, ast.Name):
            names.setdefault(stmt.target.id)
        elif isinstance(stmt, ast.ForStmt):
            for name in _assigned_names(stmt.body):
                names.setdefault(name)
        elif isinstance(stmt, ast.IfStmt):  # either side: a superset is safe
            for name in _assigned_names((*stmt.body, *stmt.orelse)):
                names.setdefault(name)
    return list(names)
