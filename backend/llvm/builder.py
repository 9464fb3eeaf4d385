"""LLVM IR as text: typed SSA values, basic blocks, intrinsic declarations and the debug
locations of DSL lines.

The backend writes textual LLVM IR and hands it to ``llvmlite.binding.parse_assembly``
(which verifies it) rather than building ``llvmlite.ir`` objects: that form has no
``bfloat`` type and no way to attach a ``!dbg`` location per instruction, both of which the
emitters need. Values carry their LLVM type, so every instruction is written with the
types the verifier expects; a Python int or float passed where a value is expected is a
constant of the other operand's type.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union


@dataclass(frozen=True)
class Val:
    """An SSA value or a constant: its text (``%v12``, ``42``, ``0x3FF0000000000000``)
    and LLVM type."""

    ref: str
    ty: str

    def __str__(self) -> str:
        return f"{self.ty} {self.ref}"


Operand = Union[Val, int, float]


def f32_constant(value: float) -> str:
    """LLVM's exact hexadecimal form of an f32 constant (a double with the f32's value)."""
    rounded = struct.unpack("<f", struct.pack("<f", float(value)))[0]
    return "0x" + struct.pack(">d", rounded).hex().upper()


def const(value: Union[int, float], ty: str) -> Val:
    if ty == "float":
        return Val(f32_constant(value), ty)
    if ty == "i1":
        return Val("true" if value else "false", ty)
    return Val(str(int(value)), ty)


@dataclass
class Block:
    label: str
    lines: list[str] = field(default_factory=list)
    terminated: bool = False


class Builder:
    """One function's blocks; instructions go to the current block."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.block: Optional[Block] = None
        self.declarations: dict[str, str] = {}  # intrinsic name -> its declare line
        self._names = 0
        self._labels = 0
        # The !dbg attachment of instructions emitted now (an op's DSL line), or "".
        self.debug = ""

    # -- blocks -----------------------------------------------------------------------
    def new_block(self, hint: str) -> Block:
        self._labels += 1
        block = Block(f"{hint}{self._labels}")
        self.blocks.append(block)
        return block

    def position(self, block: Block) -> None:
        self.block = block

    def line(self, text: str) -> None:
        """An instruction with no result, as written."""
        self._line(text)

    def _line(self, text: str) -> None:
        if self.block.terminated:
            raise AssertionError(f"llvm backend: instruction after a terminator in "
                                 f"{self.block.label}: {text}")
        self.block.lines.append(f"  {text}{self.debug}")

    def fresh(self, ty: str) -> Val:
        self._names += 1
        return Val(f"%v{self._names}", ty)

    def assign(self, ty: str, text: str) -> Val:
        result = self.fresh(ty)
        self._line(f"{result.ref} = {text}")
        return result

    # -- operands -----------------------------------------------------------------------
    @staticmethod
    def value(x: Operand, ty: str) -> Val:
        return x if isinstance(x, Val) else const(x, ty)

    def _pair(self, a: Operand, b: Operand, ty: Optional[str]) -> tuple[Val, Val]:
        ty = ty or (a.ty if isinstance(a, Val) else b.ty if isinstance(b, Val) else "i32")
        return self.value(a, ty), self.value(b, ty)

    # -- instructions -------------------------------------------------------------------
    def binop(self, opcode: str, a: Operand, b: Operand, ty: Optional[str] = None) -> Val:
        x, y = self._pair(a, b, ty)
        return self.assign(x.ty, f"{opcode} {x.ty} {x.ref}, {y.ref}")

    def icmp(self, cond: str, a: Operand, b: Operand) -> Val:
        x, y = self._pair(a, b, None)
        return self.assign("i1", f"icmp {cond} {x.ty} {x.ref}, {y.ref}")

    def select(self, cond: Val, a: Operand, b: Operand) -> Val:
        x, y = self._pair(a, b, None)
        return self.assign(x.ty, f"select i1 {cond.ref}, {x}, {y}")

    def cast(self, opcode: str, value: Val, ty: str) -> Val:
        return self.assign(ty, f"{opcode} {value} to {ty}")

    def gep(self, base: Val, offset: Val) -> Val:
        """``base`` plus ``offset`` bytes. Not ``inbounds``: addresses are also formed for
        elements a mask then skips (past a tensor's edge), and the shared memory is an
        external ``[0 x i8]`` whose real size LLVM does not know."""
        return self.assign(base.ty, f"getelementptr i8, {base}, {offset}")

    def load(self, ty: str, pointer: Val, align: int) -> Val:
        return self.assign(ty, f"load {ty}, {pointer}, align {align}")

    def store(self, value: Val, pointer: Val, align: int) -> None:
        self._line(f"store {value}, {pointer}, align {align}")

    def extract(self, aggregate: Val, index: int, ty: str) -> Val:
        return self.assign(ty, f"extractvalue {aggregate}, {index}")

    def call(self, name: str, ret: str, args: Sequence[Val], attrs: str = "") -> Optional[Val]:
        """A call of intrinsic ``name`` (declared once per module)."""
        types = ", ".join(a.ty for a in args)
        self.declarations.setdefault(name, f"declare {ret} @{name}({types}){attrs}")
        text = f"call {ret} @{name}({', '.join(str(a) for a in args)})"
        if ret == "void":
            self._line(text)
            return None
        return self.assign(ret, text)

    def asm(self, text: str, constraints: str, ret: str, args: Sequence[Val],
            pure: bool = False) -> Optional[Val]:
        """Inline PTX, for an instruction with no NVVM intrinsic. ``pure``: a function of
        its operands alone (no side effect, no memory), which LLVM may hoist, sink or merge."""
        effect = "" if pure else "sideeffect "
        attrs = " memory(none) nounwind" if pure else ""
        call = (f"call {ret} asm {effect}\"{text}\", \"{constraints}\""
                f"({', '.join(str(a) for a in args)}){attrs}")
        if ret == "void":
            self._line(call)
            return None
        return self.assign(ret, call)

    def phi(self, ty: str) -> tuple[Val, int]:
        """A phi with its incoming edges left to :meth:`close_phi`; returns the value and
        the line to fill in."""
        result = self.fresh(ty)
        self.block.lines.append("")
        return result, len(self.block.lines) - 1

    def close_phi(self, block: Block, line: int, result: Val,
                  incoming: Sequence[tuple[Val, Block]]) -> None:
        edges = ", ".join(f"[ {v.ref}, %{b.label} ]" for v, b in incoming)
        block.lines[line] = f"  {result.ref} = phi {result.ty} {edges}"

    def br(self, target: Block) -> None:
        self._line(f"br label %{target.label}")
        self.block.terminated = True

    def cbr(self, cond: Val, yes: Block, no: Block) -> None:
        self._line(f"br i1 {cond.ref}, label %{yes.label}, label %{no.label}")
        self.block.terminated = True

    def ret(self) -> None:
        self._line("ret void")
        self.block.terminated = True

    def text(self) -> list[str]:
        out = []
        for block in self.blocks:
            out.append(f"{block.label}:")
            out.extend(block.lines)
        return out
