"""The IR's one text form: deterministic, used by dumps and golden tests.

Values print by their hint (``%acc``) made unique with a suffix (``%acc.1``), or by a
counter (``%3``) when they have none, so the same kernel always prints the same text.
"""
from __future__ import annotations

from typing import Any

from tilec.ir.core import Block, Kernel, Op, Value


class _Names:
    def __init__(self) -> None:
        self.names: dict[Value, str] = {}
        self.taken: set[str] = set()
        self.counter = 0

    def define(self, value: Value) -> str:
        if value.hint:
            base = value.hint
            name, n = base, 0
            while name in self.taken:
                n += 1
                name = f"{base}.{n}"
        else:
            while str(self.counter) in self.taken:
                self.counter += 1
            name = str(self.counter)
            self.counter += 1
        self.taken.add(name)
        self.names[value] = name
        return "%" + name

    def use(self, value: Value) -> str:
        name = self.names.get(value)
        return "%" + name if name is not None else "%<undefined>"


def format_attr(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {format_attr(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return value if value.replace("_", "").isalnum() else repr(value)
    return str(value)


def print_kernel(kernel: Kernel, *, locs: bool = False) -> str:
    names = _Names()
    params = []
    for arg in kernel.body.args:
        params.append(f"{names.define(arg)}: {arg.type}")
    lines = [f"kernel @{kernel.name}({', '.join(params)})"]
    if kernel.consts:
        lines[0] += f" consts {format_attr(dict(sorted(kernel.consts.items())))}"
    lines[0] += " {"
    lines.extend("  " + line for line in kernel.schedule.lines())
    _print_ops(kernel.body, names, lines, 1, locs)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _print_ops(block: Block, names: _Names, lines: list[str], depth: int, locs: bool) -> None:
    for op in block.ops:
        _print_op(op, names, lines, depth, locs)


def _print_op(op: Op, names: _Names, lines: list[str], depth: int, locs: bool) -> None:
    pad = "  " * depth
    operands = ", ".join(names.use(v) for v in op.operands)
    text = op.name + (" " + operands if operands else "")
    if op.attrs:
        text += " " + format_attr(dict(sorted(op.attrs.items())))
    results = [names.define(r) for r in op.results]
    if results:
        text = ", ".join(results) + " = " + text
        text += " : " + ", ".join(str(r.type) for r in op.results)
    if locs and op.loc is not None:
        text += f"  loc({op.loc})"
    if not op.regions:
        lines.append(pad + text)
        return
    for region in op.regions:
        args = ", ".join(f"{names.define(a)}: {a.type}" for a in region.args)
        lines.append(pad + text + f" ({args}) {{")
        _print_ops(region, names, lines, depth + 1, locs)
        text = "}"
    lines.append(pad + "}")
