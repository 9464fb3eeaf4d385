"""``tilec viz``: the arrays the pictures draw, against recomputations written here from the
hardware rules (XOR swizzle by hand, 128-byte wavefronts, the PTX ISA fragment tables), and
the PNG files when matplotlib is installed."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tilec.families import mma_sync
from tilec.tools import viz
from tilec.kernel import load_file
from tilec.target.layout import SmemLayout, Swizzle

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "samples" / "matmul.py"
MATMUL_BT = ROOT / "samples" / "matmul_bt.py"
SGEMM = ROOT / "samples" / "sgemm.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def hand_swizzle(offset: int, bits: int, base: int, shift: int) -> int:
    """CUTLASS Swizzle<bits, base, shift>: the row bits above ``base + shift`` pick which
    16-byte chunk of the 128-byte line the element moves to."""
    row_bits = (offset >> (base + shift)) & ((1 << bits) - 1)
    return offset ^ (row_bits << base)


def hand_group(layout: SmemLayout, row: int, col: int, elem_bytes: int = 2) -> int:
    s = layout.swizzle
    offset = hand_swizzle(row * layout.cols + col, s.bits, s.base, s.shift)
    return (offset * elem_bytes) % 128 // 16  # which 4 banks of the 32 (128 bytes)


def hand_degree(addresses) -> int:
    """Wavefronts one phase of 16-byte accesses needs: distinct chunks per bank group."""
    chunks_per_group: dict[int, set[int]] = {}
    for address in addresses:
        chunks_per_group.setdefault(address % 128 // 16, set()).add(address // 16)
    return max(len(chunks) for chunks in chunks_per_group.values())


def compiled_plan(path: Path, **kwargs):
    fn = next(iter(load_file(path).values()))
    compiled = fn.compile(**kwargs)
    return compiled.kernel.schedule.tiling, compiled.kernel.schedule.conflict_report()


# ------------------------------------------------------------------------ bank maps

@pytest.mark.parametrize("layout", [
    SmemLayout(128, 32), SmemLayout(128, 32, Swizzle(2, 3, 3)),
    SmemLayout(128, 32, Swizzle(3, 3, 3)), SmemLayout(32, 128, Swizzle(3, 3, 4)),
    SmemLayout(16, 64, Swizzle(3, 3, 3), transposed=True)])
def test_bank_groups_are_where_the_xor_puts_each_chunk(layout):
    groups = viz.bank_groups(layout, 2)
    assert groups.shape == (layout.rows, layout.cols // 8)
    expected = np.array([[hand_group(layout, row, 8 * c) for c in range(layout.cols // 8)]
                         for row in range(layout.rows)])
    np.testing.assert_array_equal(groups, expected)


def test_a_swizzle_permutes_chunks_within_each_128_byte_line():
    groups = viz.bank_groups(SmemLayout(32, 128, Swizzle(3, 3, 4)), 2)
    for row in groups:  # 256-byte rows: every bank group twice
        assert sorted(row) == sorted(list(range(8)) * 2)
    linear = viz.bank_groups(SmemLayout(32, 128), 2)
    assert (linear == linear[0]).all()  # unswizzled: every row the same stripes


@pytest.mark.parametrize("addresses, expected", [
    ([128 * i for i in range(8)], [True] * 8),  # one bank group, eight chunks
    ([16 * i for i in range(8)], [False] * 8),  # the eight groups of one line
    ([0, 0, 16, 32, 48, 64, 80, 96], [False] * 8),  # lanes 0, 1 share a chunk: broadcast
    ([0, 128, 16, 32, 48, 64, 80, 96], [True, True] + [False] * 6),
    ([0, 64, 128, 192, 16, 80, 144, 208], [True] * 8),
])
def test_phase_conflicts(addresses, expected):
    np.testing.assert_array_equal(viz.phase_conflicts(addresses), expected)


@pytest.mark.parametrize("role, linear_degree", [("A", 4), ("B", 8)])
def test_matmul_bank_views(role, linear_degree):
    """A is 128x32 f16 (64-byte rows: the 8 rows of a phase alternate two bank groups, 4-way),
    B is 32x128 read by ldmatrix.trans down k (256-byte rows: one bank group, 8-way)."""
    plan, report = compiled_plan(MATMUL)
    op_plan = plan.operand(role)
    linear, chosen = viz.bank_views(plan, op_plan)
    assert linear.layout.swizzle.bits == 0 and chosen.layout == op_plan.layout
    assert linear.position == chosen.position and list(linear.lanes) == list(range(8))
    mn0, k0 = linear.position
    for view in (linear, chosen):
        for i, (row, chunk) in enumerate(view.cells):
            # k-major A: lane i points at row m0 + i; B (n contiguous): at row k0 + i.
            assert (row, chunk) == ((mn0 + i, k0 // 8) if role == "A" else (k0 + i, mn0 // 8))
            assert view.groups[row, chunk] == hand_group(view.layout, row, chunk * 8)
            s = view.layout.swizzle
            address = 2 * hand_swizzle(row * view.layout.cols + chunk * 8, s.bits, s.base,
                                       s.shift)
            assert view.addresses[i] == address
        assert view.degree == hand_degree(view.addresses)
    assert linear.degree == linear_degree == report[role]["linear"]["ldmatrix"]
    assert linear.conflicts.all()
    assert chosen.degree == 1 == report[role]["chosen"]["ldmatrix"]
    assert not chosen.conflicts.any()


def test_transposed_b_is_read_along_its_rows():
    plan, report = compiled_plan(MATMUL_BT, BK=16)
    linear, chosen = viz.bank_views(plan, plan.operand("B"))
    assert plan.operand("B").k_major
    # 128x16 f16 storage (n x k): 32-byte rows, so rows 0..7 hit groups 0, 2, 4, 6 twice.
    assert [int(g) for g in linear.groups[linear.cells[:, 0], linear.cells[:, 1]]] == \
        [0, 2, 4, 6, 0, 2, 4, 6]
    assert linear.degree == 2 == report["B"]["linear"]["ldmatrix"]
    assert chosen.degree == 1


# ------------------------------------------------------------------------ fragments

def ptx_isa_owner(role: str, row: int, col: int) -> tuple[int, int]:
    """(lane, element index) from the PTX ISA's m16n8k16 .f16 fragment tables, inverted
    by solving for groupID and threadID_in_group."""
    if role == "A":  # row = groupID (+8 for a2,a3,a6,a7); col = 2*tig + (i&1) (+8 for i>=4)
        group, tig = row % 8, col % 8 // 2
        element = (col & 1) + 2 * (row // 8) + 4 * (col // 8)
    elif role == "B":  # row = 2*tig + (i&1) (+8 for i>=2); col = groupID
        group, tig = col, row % 8 // 2
        element = (row & 1) + 2 * (row // 8)
    else:  # C: row = groupID (+8 for c2,c3); col = 2*tig + (i&1)
        group, tig = row % 8, col // 2
        element = (col & 1) + 2 * (row // 8)
    return 4 * group + tig, element


def test_fragment_owners_match_the_ptx_isa_tables():
    owners = viz.fragment_owners()
    shapes = {"A": (16, 16), "B": (16, 8), "C": (16, 8)}
    assert set(owners) == set(shapes)
    for role, shape in shapes.items():
        lane, element = owners[role]
        assert lane.shape == element.shape == shape
        for row in range(shape[0]):
            for col in range(shape[1]):
                assert (lane[row, col], element[row, col]) == ptx_isa_owner(role, row, col)
    # Every lane holds 8 A, 4 B and 4 C elements.
    for role, per_lane in (("A", 8), ("B", 4), ("C", 4)):
        assert (np.bincount(owners[role].lane.ravel(), minlength=32) == per_lane).all()


def test_fragment_owners_catch_a_layout_that_is_not_a_bijection(monkeypatch):
    monkeypatch.setattr(mma_sync, "mma_c_coord", lambda lane, reg: (lane // 4, 0))
    with pytest.raises(ValueError, match="held by lanes"):
        viz.fragment_owners()


# ------------------------------------------------------------------------ the command

def test_without_matplotlib_viz_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    code = viz.main([str(MATMUL), "--out", str(tmp_path / "pictures")])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.strip() == viz.MATPLOTLIB_MISSING
    assert captured.out == ""
    assert not (tmp_path / "pictures").exists()


def test_importing_viz_does_not_import_matplotlib():
    import subprocess
    code = ("import sys, tilec.tools.viz; "
            "sys.exit(1 if any(m.startswith('matplotlib') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def png_pixels(path: Path) -> np.ndarray:
    import matplotlib.image
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    return matplotlib.image.imread(str(path))


def red_pixels(pixels: np.ndarray) -> int:
    red, green, blue = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    return int(np.count_nonzero((red > 0.75) & (green < 0.3) & (blue < 0.3)))


def test_viz_writes_the_three_pictures(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "pictures"
    code = viz.main([str(MATMUL), "--out", str(out), "--stages", "2", "--warps", "2x2"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    names = ["matmul_A_banks.png", "matmul_B_banks.png", "mma_fragments.png"]
    assert captured.out.split() == [str(out / name) for name in names]
    for name in names:
        path = out / name
        assert path.stat().st_size > 20_000
        pixels = png_pixels(path)
        assert pixels.shape[0] > 500 and pixels.shape[1] > 500
        colours = np.unique(pixels[::4, ::4, :3].reshape(-1, 3), axis=0)
        assert len(colours) > 20  # fills, text, marks: not a blank canvas
    # The linear panels mark conflicting lanes in red; the fragment map has no red.
    assert red_pixels(png_pixels(out / "matmul_A_banks.png")) > 500
    assert red_pixels(png_pixels(out / "mma_fragments.png")) == 0


def test_bank_map_png_when_nothing_is_swizzled(tmp_path):
    pytest.importorskip("matplotlib")
    plan, _ = compiled_plan(MATMUL, swizzle="off")
    path = viz.bank_map_png(plan, plan.operand("B"), tmp_path / "b.png", kernel_name="matmul")
    assert path == tmp_path / "b.png" and path.stat().st_size > 20_000


@pytest.mark.parametrize("argv, message", [
    (["--kernel", "nope"], "has no tile function 'nope'"),
    (["--const", "BQ=3"], "has no constant BQ"),
    (["--const", "BK=24"], "BK=24 is not a multiple of the mma k"),
])
def test_viz_errors_are_worded(tmp_path, capsys, argv, message):
    pytest.importorskip("matplotlib")
    code = viz.main([str(MATMUL), "--out", str(tmp_path), *argv])
    captured = capsys.readouterr()
    assert code == 1 and message in captured.err
    assert captured.out == ""


# ------------------------------------------------------------------- the FFMA kind

def test_an_ffma_plan_has_no_ldmatrix_bank_views():
    plan, _ = compiled_plan(SGEMM)
    assert plan.kind == "simt"
    with pytest.raises(ValueError, match="viz draws mma fragment layouts.*uses FFMA"):
        viz.bank_views(plan, plan.operand("A"))


def test_viz_refuses_an_ffma_kernel_and_writes_nothing(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "pictures"
    code = viz.main([str(SGEMM), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert captured.err.startswith("tilec: error: viz draws mma fragment layouts and ldmatrix "
                                   "bank maps; kernel 'sgemm' uses FFMA (f32 tiles")
    assert "Traceback" not in captured.err
    assert not out.exists()


def test_a_tf32_plan_is_refused_naming_its_instructions():
    plan, _ = compiled_plan(SGEMM, f32_math="tf32")
    assert plan.kind == "tf32"
    with pytest.raises(ValueError, match=r"kernel 'sgemm' uses TF32 tensor cores \(f32 tiles: "
                                         r"ldmatrix or ld\.shared\.b32 \+ mma\.sync m16n8k8"):
        viz.require_mma(plan, "sgemm")
