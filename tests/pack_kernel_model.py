"""A small model of the PTX the pack kernel is made of (backend/pack.py's, and what LLVM
makes of backend/llvm/pack.py's IR), to run its emitted text on the CPU, thread by thread:
the pack kernel has no shared memory and no barrier, so its threads are independent and each
can run alone to its ``ret``.

Only the instructions the pack kernel uses are modelled (an unknown one is an error, so the
model cannot silently skip what it does not know), on integer registers of their declared
width. Global memory is a set of byte regions; a load outside them is an error, which is how
the tests see that the aligned 16-byte chunks the contiguous loader reads stay inside the
16-byte granules of the source tensor (what an allocation's granularity guarantees).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

M32, M64 = (1 << 32) - 1, (1 << 64) - 1
_GUARD = re.compile(r"^@(!?)(%p\d+) ")
_ADDRESS = re.compile(r"^\[(%?\w+)(?:\+(-?\d+))?\]$")


def _signed32(value: int) -> int:
    value &= M32
    return value - (1 << 32) if value >> 31 else value


@dataclass
class Memory:
    """Byte regions of global memory: base address -> bytearray."""

    regions: dict[int, bytearray] = field(default_factory=dict)

    def add(self, base: int, data: bytes) -> None:
        self.regions[base] = bytearray(data)

    def _find(self, address: int, size: int) -> tuple[bytearray, int]:
        for base, data in self.regions.items():
            if base <= address and address + size <= base + len(data):
                return data, address - base
        raise MemoryError(f"access of {size} bytes at {address:#x} outside every region")

    def load(self, address: int, size: int) -> int:
        data, offset = self._find(address, size)
        return int.from_bytes(data[offset:offset + size], "little")

    def store(self, address: int, size: int, value: int) -> None:
        data, offset = self._find(address, size)
        data[offset:offset + size] = (value & ((1 << 8 * size) - 1)).to_bytes(size, "little")


@dataclass(frozen=True)
class Instruction:
    guard: tuple[str, bool] | None  # (predicate, negated)
    opcode: str
    operands: tuple[str, ...]


def parse(ptx: str) -> tuple[list[Instruction], dict[str, int]]:
    """The entry's instructions in order and the index of each label."""
    body = ptx[ptx.index("{", ptx.index(".entry")) + 1:ptx.rindex("}")]
    program, labels = [], {}
    for line in body.splitlines():
        line = line.split("//")[0].strip()
        if not line or line.startswith("."):
            continue
        if line.endswith(":"):
            labels[line[:-1]] = len(program)
            continue
        guard = None
        found = _GUARD.match(line)
        if found:
            guard = (found.group(2), found.group(1) == "!")
            line = line[found.end():]
        line = line.rstrip(";")
        opcode, _, rest = line.replace("\t", " ").partition(" ")
        operands = tuple(part.strip() for part in _split_operands(rest))
        program.append(Instruction(guard, opcode, operands))
    return program, labels


def _split_operands(text: str) -> list[str]:
    """Comma-separated operands, a {a, b, ...} vector kept as one."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


class Thread:
    """One thread of a launch, run to its ``ret``."""

    def __init__(self, program, labels, params: dict[str, int], memory: Memory,
                 special: dict[str, int]):
        self.program, self.labels = program, labels
        self.params, self.memory, self.special = params, memory, special
        self.regs: dict[str, int] = {}

    def value(self, operand: str) -> int:
        if operand.startswith("%"):  # %ctaid.x and the like are special registers
            return self.special[operand] if "." in operand else self.regs[operand]
        if operand.startswith("0f"):  # an f32 literal: its bits
            return int(operand[2:], 16)
        return int(operand, 0)

    def address(self, operand: str) -> int:
        found = _ADDRESS.match(operand)
        if found is None:
            raise ValueError(f"unmodelled address {operand}")
        return (self.value(found.group(1)) + int(found.group(2) or 0)) & M64

    def run(self, limit: int = 1_000_000) -> None:
        pc = 0
        for _ in range(limit):
            ins = self.program[pc]
            pc += 1
            if ins.guard is not None:
                predicate, negated = ins.guard
                if bool(self.regs[predicate]) == negated:
                    continue
            if ins.opcode == "ret":
                return
            if ins.opcode in ("bra", "bra.uni"):
                pc = self.labels[ins.operands[0]]
                continue
            self.execute(ins)
        raise RuntimeError("the thread did not return")

    def execute(self, ins: Instruction) -> None:
        op, ops = ins.opcode, ins.operands
        regs, v = self.regs, self.value
        if op in ("ld.param.u64", "ld.param.u32", "ld.param.b64", "ld.param.b32"):
            regs[ops[0]] = self.params[ops[1].strip("[]")]
        elif op == "cvt.u64.u32":
            regs[ops[0]] = v(ops[1]) & M32
        elif op == "mad.lo.s64":
            regs[ops[0]] = (v(ops[1]) * v(ops[2]) + v(ops[3])) & M64
        elif op == "mul.wide.u16":
            regs[ops[0]] = (v(ops[1]) & 0xFFFF) * (v(ops[2]) & 0xFFFF)
        elif op == "prmt.b32.f4e":  # bytes c % 4 .. c % 4 + 3 of {b, a} (PTX ISA 9.7.8.8)
            regs[ops[0]] = ((v(ops[2]) << 32 | v(ops[1])) >> 8 * (v(ops[3]) & 3)) & M32
        elif op == "and.pred":
            regs[ops[0]] = bool(v(ops[1])) and bool(v(ops[2]))
        elif op == "not.pred":
            regs[ops[0]] = not v(ops[1])
        elif op == "cvta.to.global.u64":
            regs[ops[0]] = v(ops[1])
        elif op in ("mov.u32", "mov.b32", "mov.b16"):
            if ops[1].startswith("{"):  # two 16-bit halves into one word, the first low
                low, high = (v(x.strip()) for x in ops[1].strip("{}").split(","))
                regs[ops[0]] = (low & 0xFFFF) | (high & 0xFFFF) << 16
            else:
                regs[ops[0]] = v(ops[1]) & (0xFFFF if op == "mov.b16" else M32)
        elif op in _BINARY:
            mask, fn = _BINARY[op]
            regs[ops[0]] = fn(v(ops[1]), v(ops[2])) & mask
        elif op == "mad.lo.s32":
            regs[ops[0]] = (v(ops[1]) * v(ops[2]) + v(ops[3])) & M32
        elif op == "cvt.u32.u64":
            regs[ops[0]] = v(ops[1]) & M32
        elif op.startswith("setp."):
            regs[ops[0]] = self.compare(op, ops)
        elif op == "selp.b32":
            regs[ops[0]] = v(ops[1]) if regs[ops[3]] else v(ops[2])
        elif op == "shf.r.clamp.b32":
            shift = min(v(ops[3]) & M32, 32)
            regs[ops[0]] = ((v(ops[2]) << 32 | v(ops[1])) >> shift) & M32
        elif op == "bfi.b32":
            start, length = v(ops[3]), v(ops[4])
            field_mask = ((1 << length) - 1) << start
            regs[ops[0]] = (v(ops[2]) & ~field_mask | (v(ops[1]) << start) & field_mask) & M32
        elif op in ("bfe.u32", "bfe.s32"):  # PTX ISA 9.7.1.17, start and length < 32 here
            start, length = v(ops[2]), v(ops[3])
            field_value = (v(ops[1]) >> start) & ((1 << length) - 1)
            if op == "bfe.s32" and field_value >> (length - 1):
                field_value -= 1 << length
            regs[ops[0]] = field_value & M32
        elif op == "cvt.rn.f32.s32":
            regs[ops[0]] = _f32_bits(np.float32(_signed32(v(ops[1]))))
        elif op == "mul.rn.f32":  # numpy's float32 product: rounded to nearest, subnormals kept
            with np.errstate(all="ignore"):
                regs[ops[0]] = _f32_bits(_f32(v(ops[1])) * _f32(v(ops[2])))
        elif op in _PAIR_ROUNDING:  # cvt.rn d, a, b: a to the upper half (PTX ISA 9.7.9.21)
            rounded = _PAIR_ROUNDING[op]
            regs[ops[0]] = rounded(v(ops[1])) << 16 | rounded(v(ops[2]))
        elif op in ("ld.global.nc.v4.b32", "ld.global.v4.b32", "ld.global.nc.v2.b32"):
            base = self.address(ops[1])
            for index, reg in enumerate(ops[0].strip("{}").split(",")):
                regs[reg.strip()] = self.memory.load(base + 4 * index, 4)
        elif op in _LOADS:
            address = self.address(ops[1])
            if address % _LOADS[op]:
                raise MemoryError(f"misaligned {op} at {address:#x}")
            regs[ops[0]] = self.memory.load(address, _LOADS[op])
        elif op == "st.global.v4.b32":
            address = self.address(ops[0])
            if address % 16:
                raise MemoryError(f"misaligned 16-byte store at {address:#x}")
            for index, reg in enumerate(ops[1].strip("{}").split(",")):
                self.memory.store(address + 4 * index, 4, v(reg.strip()))
        else:
            raise NotImplementedError(f"the model has no {op}")

    def compare(self, op: str, ops: tuple[str, ...]) -> bool:
        parts = op.split(".")  # setp.cmp[.and].type
        cmp, kind = parts[1], parts[-1]
        a, b = self.value(ops[1]), self.value(ops[2])
        if kind == "s32":
            a, b = _signed32(a), _signed32(b)
        result = {"eq": a == b, "ne": a != b, "ge": a >= b, "gt": a > b, "lt": a < b,
                  "le": a <= b}[cmp]
        if parts[2] == "and":
            result = result and bool(self.regs[ops[3]])
        return result


def _f32(bits: int) -> np.float32:
    return np.array([bits & M32], np.uint32).view(np.float32)[0]


def _f32_bits(value) -> int:
    return int(np.array([value], np.float32).view(np.uint32)[0])


def _f16_of_f32(bits: int) -> int:
    """cvt.rn.f16.f32: numpy's float16 rounding (to nearest even); NaN canonical (0x7FFF)."""
    value = _f32(bits)
    if np.isnan(value):
        return 0x7FFF
    with np.errstate(all="ignore"):
        return int(np.array([value], np.float16).view(np.uint16)[0])


def _bf16_of_f32(bits: int) -> int:
    """cvt.rn.bf16.f32: the upper half rounded to nearest even; NaN canonical (0x7FFF)."""
    if np.isnan(_f32(bits)):
        return 0x7FFF
    return ((bits + 0x7FFF + (bits >> 16 & 1)) >> 16) & 0xFFFF


_PAIR_ROUNDING = {"cvt.rn.f16x2.f32": _f16_of_f32, "cvt.rn.bf16x2.f32": _bf16_of_f32}

_BINARY = {
    "add.s32": (M32, lambda a, b: a + b), "sub.s32": (M32, lambda a, b: a - b),
    "mul.lo.s32": (M32, lambda a, b: a * b), "shl.b32": (M32, lambda a, b: a << b),
    "shr.u32": (M32, lambda a, b: (a & M32) >> b), "and.b32": (M32, lambda a, b: a & b),
    "or.b32": (M32, lambda a, b: a | b), "add.s64": (M64, lambda a, b: a + b),
    "shl.b64": (M64, lambda a, b: a << b), "and.b64": (M64, lambda a, b: a & b),
    "mul.lo.s64": (M64, lambda a, b: a * b),
    "mul.wide.u32": (M64, lambda a, b: (a & M32) * (b & M32)),
}
# Sized loads zero-extend into the register (.u8 and .b8 alike).
_LOADS = {"ld.global.nc.u8": 1, "ld.global.nc.b16": 2, "ld.global.nc.b32": 4,
          "ld.global.b8": 1, "ld.global.b16": 2, "ld.global.b32": 4}


def launch(ptx: str, grid: tuple[int, int, int], block: tuple[int, int, int],
           params: dict[str, int], memory: Memory) -> None:
    """Every thread of the launch, one after another. ``params`` by name, in the entry's
    order (LLVM names them ``<entry>_param_<i>``)."""
    program, labels = parse(ptx)
    entry = re.search(r"\.entry (\w+)\(", ptx).group(1)
    params = {**params, **{f"{entry}_param_{i}": value
                           for i, value in enumerate(params.values())}}
    for by in range(grid[1]):
        for bx in range(grid[0]):
            for ty in range(block[1]):
                for tx in range(block[0]):
                    special = {"%ctaid.x": bx, "%ctaid.y": by, "%ntid.x": block[0],
                               "%ntid.y": block[1], "%tid.x": tx, "%tid.y": ty,
                               "%nctaid.x": grid[0], "%nctaid.y": grid[1]}
                    Thread(program, labels, params, memory, special).run()
