"""PTX text assembly: typed virtual registers from per-class counters, labels, and a setup
section for per-thread values computed once at kernel entry."""
from __future__ import annotations

import struct
from typing import Callable

# Register class -> (name prefix, declaration type). PTX ISA 5.2 (register state space).
REG_CLASSES = {
    "pred": ("%p", ".pred"),
    "b16": ("%h", ".b16"),
    "b32": ("%r", ".b32"),
    "b64": ("%rd", ".b64"),
    "f32": ("%f", ".f32"),
}


def register_class(name: str) -> str:
    """The class of a register this writer named (the longest matching prefix)."""
    matches = [cls for cls, (prefix, _) in REG_CLASSES.items() if name.startswith(prefix)]
    return max(matches, key=lambda cls: len(REG_CLASSES[cls][0]))


def f32_literal(value: float) -> str:
    """PTX's exact hexadecimal form of an f32 constant."""
    return "0f" + struct.pack(">f", float(value)).hex().upper()


class PtxWriter:
    def __init__(self) -> None:
        self.counts = {name: 0 for name in REG_CLASSES}
        self.body: list[str] = []
        self.setup: list[str] = []
        self._setup_cache: dict[object, object] = {}
        self._labels = 0
        self._in_setup = False

    def reg(self, cls: str) -> str:
        prefix = REG_CLASSES[cls][0]
        name = f"{prefix}{self.counts[cls]}"
        self.counts[cls] += 1
        return name

    def regs(self, cls: str, n: int) -> list[str]:
        return [self.reg(cls) for _ in range(n)]

    def emit(self, text: str) -> None:
        (self.setup if self._in_setup else self.body).append("\t" + text)

    def raw(self, text: str) -> None:
        (self.setup if self._in_setup else self.body).append(text)

    def label(self, hint: str) -> str:
        self._labels += 1
        return f"$L_{hint}_{self._labels}"

    @property
    def labels_made(self) -> int:
        """How many labels :meth:`label` has made: unchanged over a stretch of code, it has
        no branch target, so a register set in it is set on every path through it."""
        return self._labels

    def once(self, key: object, compute: Callable[[], object]) -> object:
        """Emit ``compute``'s instructions into the entry setup the first time ``key`` is
        asked for; later calls reuse the registers it returned."""
        if key not in self._setup_cache:
            saved, self._in_setup = self._in_setup, True
            try:
                self._setup_cache[key] = compute()
            finally:
                self._in_setup = saved
        return self._setup_cache[key]

    def declarations(self) -> list[str]:
        return [f"\t.reg {decl} {prefix}<{self.counts[cls]}>;"
                for cls, (prefix, decl) in REG_CLASSES.items() if self.counts[cls]]
