"""The compiler writes, byte for byte, the PTX recorded in ``tests/golden/ptx.json.xz``
(see ``tests/golden_ptx.py``): refactors must not change what comes out, and a change that
does re-records the file and says why in its commit."""
from __future__ import annotations

import difflib

import pytest

from tests.golden_ptx import cases, load, pack_kernels, render

GOLDEN = load()
CASES = cases()
PACK = pack_kernels()


def _diff(expected: str, actual: str) -> str:
    lines = difflib.unified_diff(expected.splitlines(), actual.splitlines(), "golden", "now",
                                 n=2, lineterm="")
    return "\n".join(list(lines)[:60])


def test_golden_file_covers_every_case() -> None:
    assert set(GOLDEN) == set(CASES) | set(PACK)


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_ptx_unchanged(name: str) -> None:
    actual = render(CASES[name])
    assert actual == GOLDEN[name], f"{name} changed:\n{_diff(GOLDEN[name], actual)}"


@pytest.mark.parametrize("name", sorted(PACK))
def test_pack_kernel_ptx_unchanged(name: str) -> None:
    assert PACK[name] == GOLDEN[name], f"{name} changed:\n{_diff(GOLDEN[name], PACK[name])}"
