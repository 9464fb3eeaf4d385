"""Pictures of the layout math: shared-memory bank maps and mma fragment ownership.

    tilec viz samples/matmul.py --out pictures/

writes, for each kernel in the file, ``<kernel>_A_banks.png`` and ``<kernel>_B_banks.png``
(the operand's shared tile coloured by bank group, without and with the chosen swizzle, the
lanes of one ldmatrix phase marked and the conflicting ones in red), and ``mma_fragments.png``
(the lane and fragment element holding each element of the m16n8k16 operands).

The pictures are of the mma product family (f16/bf16 tiles: ldmatrix + mma.sync). A kernel
of another family (f32 tiles take FFMA: ld.shared.v4 + fma.rn.f32) is refused with the
family's own message (:meth:`~tilec.families.product.ProductFamily.viz_refusal`), not drawn
as if it were mma: :func:`require_mma`.

Every number drawn comes from :mod:`tilec.target.layout` and
:mod:`tilec.families.mma_sync` through the functions here that return
numpy arrays (:func:`bank_groups`, :func:`phase_conflicts`, :func:`bank_views`,
:func:`fragment_owners`); the ``*_png`` functions only draw them. matplotlib is optional
(``pip install -e '.[viz]'``, as the README says) and imported only when drawing.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

from tilec.errors import TileError
from tilec.ir.types import DType
from tilec.families.mma_sync import (FRAGMENT_SHAPES, MMA_K, MMA_N, fragment_coord,
                                     ldmatrix_addresses, ldmatrix_lane_coord)
from tilec.families.products import family_of
from tilec.target.layout import (BANK_BYTES, BANKS, WARP_SIZE, SmemLayout, Swizzle,
                                 conflict_degree, operand_storage_coord)
from tilec.passes.swizzle import operand_conflicts
from tilec.ir.schedule import OperandPlan, TilingPlan
from tilec.tools import arguments
from tilec.tools.arguments import CommandError

MATPLOTLIB_MISSING = ("tilec viz needs matplotlib: pip install -e '.[viz]' in the tilec checkout "
                      "(or pip install matplotlib)")

# One ldmatrix row and one cp.async vector: the unit that 16-byte-chunk swizzles permute.
CHUNK_BYTES = 16
# 16-byte slots in the 128 bytes one wavefront serves: 8 (group g = banks 4g..4g+3).
BANK_GROUPS = BANKS * BANK_BYTES // CHUNK_BYTES
LANES_PER_PHASE = BANKS * BANK_BYTES // CHUNK_BYTES  # 8 lanes x 16 bytes = one wavefront
MAX_ROWS_SHOWN = 32

# ColorBrewer Set3 without its salmon: light fills, distinct hues, no red, so that red marks
# and black text stand out.
GROUP_COLOURS = ("#8dd3c7", "#ffffb3", "#bebada", "#80b1d3",
                 "#fdb462", "#b3de69", "#fccde5", "#d9d9d9")
CONFLICT_COLOUR = "#d62728"
CLEAN_COLOUR = "#1f4fd8"


# ------------------------------------------------------------------------ bank-map data

def bank_group(address: int) -> int:
    """The 16-byte slot (banks 4g..4g+3) of a wavefront that byte ``address`` falls in."""
    return address // CHUNK_BYTES % BANK_GROUPS


def bank_groups(layout: SmemLayout, elem_bytes: int) -> np.ndarray:
    """Bank group of every 16-byte chunk of a shared tile, indexed ``[row, chunk]`` in
    storage coordinates (chunk c holds columns ``c * 16 / elem_bytes ...``): where
    ``layout``'s swizzle puts each chunk of the tile as the program indexes it."""
    chunk = CHUNK_BYTES // elem_bytes
    if layout.cols % chunk:
        raise ValueError(f"a row of {layout.cols} elements is not whole 16-byte chunks")
    groups = np.empty((layout.rows, layout.cols // chunk), dtype=np.int64)
    for row in range(layout.rows):
        for c in range(layout.cols // chunk):
            groups[row, c] = bank_group(layout.offset(row, c * chunk) * elem_bytes)
    return groups


def phase_conflicts(addresses: Sequence[int]) -> np.ndarray:
    """For the 16-byte accesses of one phase, whether each lane conflicts: another lane
    reads a different chunk in the same bank group, so the two need separate wavefronts.
    Lanes reading the same chunk share one read (a broadcast)."""
    reads = [(address // CHUNK_BYTES, bank_group(address)) for address in addresses]
    return np.array([any(chunk != mine and group == my_group for chunk, group in reads)
                     for mine, my_group in reads], dtype=bool)


def ldmatrix_positions(plan: TilingPlan, op_plan: OperandPlan) -> list[tuple[int, int]]:
    """(mn0, k0) of every ldmatrix.x4 the warps issue on one stage of an operand's tile:
    the accesses :func:`tilec.passes.swizzle.operand_conflicts` scores."""
    mn_extent = plan.warp_tile[0] if op_plan.role == "A" else plan.warp_tile[1]
    warps_along = plan.warps[0] if op_plan.role == "A" else plan.warps[1]
    return [(w * mn_extent + mn0, k0) for w in range(warps_along)
            for mn0 in range(0, mn_extent, 16)
            for k0 in range(0, plan.block[2], family_of(plan).k_step)]


@dataclass(frozen=True)
class PhaseView:
    """One ldmatrix phase (8 lanes, one row address each) over one layout of a tile: what a
    bank-map panel draws."""

    layout: SmemLayout
    groups: np.ndarray  # [row, chunk]: bank group of each 16-byte chunk (bank_groups)
    position: tuple[int, int]  # (mn0, k0) of the ldmatrix.x4 in the operand tile
    lanes: np.ndarray  # [8]: the lanes of the phase
    cells: np.ndarray  # [8, 2]: (storage row, chunk) each lane's 16-byte row is
    addresses: np.ndarray  # [8]: byte addresses (ldmatrix_addresses)
    conflicts: np.ndarray  # [8]: phase_conflicts
    degree: int  # conflict_degree of the phase: 1 = conflict-free


def phase_view(layout: SmemLayout, role: str, k_major: bool, position: tuple[int, int],
               phase: int, elem_bytes: int) -> PhaseView:
    """Lanes ``8 * phase ... 8 * phase + 7`` of the ldmatrix.x4 at ``position``."""
    mn0, k0 = position
    lanes = np.arange(phase * LANES_PER_PHASE, (phase + 1) * LANES_PER_PHASE)
    addresses = ldmatrix_addresses(layout, role, k_major, mn0, k0, elem_bytes)
    phase_addresses = [addresses[lane] for lane in lanes]
    cells = []
    for lane in lanes:
        mn, k = ldmatrix_lane_coord(role, k_major, int(lane))
        row, col = operand_storage_coord(k_major, mn0 + mn, k0 + k)
        cells.append((row, col * elem_bytes // CHUNK_BYTES))
    return PhaseView(layout, bank_groups(layout, elem_bytes), position, lanes,
                     np.array(cells, dtype=np.int64), np.array(phase_addresses, dtype=np.int64),
                     phase_conflicts(phase_addresses),
                     conflict_degree(phase_addresses, CHUNK_BYTES))


def require_mma(plan: TilingPlan, kernel_name: str = "") -> None:
    """Raise ValueError with the family's refusal unless viz draws the plan's product family
    (mma)."""
    kernel = f"kernel '{kernel_name}'" if kernel_name else "this kernel"
    refusal = family_of(plan).viz_refusal(plan, kernel)
    if refusal is not None:
        raise ValueError(refusal)


def bank_views(plan: TilingPlan, op_plan: OperandPlan) -> tuple[PhaseView, PhaseView]:
    """The operand's tile unswizzled and with its chosen layout, at the same ldmatrix phase:
    the one that conflicts most without the swizzle (then most with it; the first such).
    ValueError for a plan that is not of the mma kind."""
    require_mma(plan)
    elem_bytes = DType.parse(plan.dtype).bytes
    chosen = op_plan.layout
    linear = chosen.with_swizzle(Swizzle())
    best: Optional[tuple[tuple[int, int], tuple[int, int], int]] = None
    for position in ldmatrix_positions(plan, op_plan):
        per_layout = [ldmatrix_addresses(layout, op_plan.role, op_plan.k_major, *position,
                                         elem_bytes) for layout in (linear, chosen)]
        for phase in range(WARP_SIZE // LANES_PER_PHASE):
            lanes = slice(phase * LANES_PER_PHASE, (phase + 1) * LANES_PER_PHASE)
            key = (conflict_degree(per_layout[0][lanes], CHUNK_BYTES),
                   conflict_degree(per_layout[1][lanes], CHUNK_BYTES))
            if best is None or key > best[0]:
                best = (key, position, phase)
    assert best is not None, "an operand tile has at least one ldmatrix"
    _, position, phase = best
    return (phase_view(linear, op_plan.role, op_plan.k_major, position, phase, elem_bytes),
            phase_view(chosen, op_plan.role, op_plan.k_major, position, phase, elem_bytes))


def describe(degree: int) -> str:
    return "conflict-free" if degree == 1 else f"{degree}-way conflict"


# ------------------------------------------------------------------------ fragment data

class FragmentMap(NamedTuple):
    """Who holds each element of an mma operand: ``lane[row, col]`` and ``element[row, col]``,
    the element's index in that lane's fragment as the PTX ISA numbers them (a0..a7, b0..b3,
    c0..c3). A and B pack two f16 per 32-bit register (register ``element // 2``, half
    ``element % 2``); C holds one f32 per register (register ``element``)."""

    lane: np.ndarray
    element: np.ndarray


def fragment_owners() -> dict[str, FragmentMap]:
    """The inverse of ``mma_a_coord``, ``mma_b_coord`` and ``mma_c_coord``, per operand;
    raises ValueError unless every element is held by exactly one (lane, element)."""
    owners = {}
    for role, (rows, cols, regs, halves) in FRAGMENT_SHAPES.items():
        lane_of = np.full((rows, cols), -1, dtype=np.int64)
        element_of = np.full((rows, cols), -1, dtype=np.int64)
        for lane in range(WARP_SIZE):
            for reg in range(regs):
                for half in range(halves):
                    row, col = fragment_coord(role, lane, reg, half)
                    if lane_of[row, col] != -1:
                        raise ValueError(f"{role}[{row}, {col}] is held by lanes "
                                         f"{lane_of[row, col]} and {lane}")
                    lane_of[row, col] = lane
                    element_of[row, col] = reg * halves + half
        if (lane_of < 0).any():
            row, col = np.argwhere(lane_of < 0)[0]
            raise ValueError(f"no lane holds {role}[{row}, {col}]")
        owners[role] = FragmentMap(lane_of, element_of)
    return owners


# ------------------------------------------------------------------------------ drawing

def require_matplotlib() -> None:
    """Raise ImportError carrying the install hint when matplotlib is missing."""
    try:
        # The package itself: `from matplotlib.figure import ...` is answered from sys.modules
        # when an earlier import loaded the submodule, and would hide that matplotlib is gone.
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise ImportError(MATPLOTLIB_MISSING) from err


def _new_figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure
    # A bare Figure (no pyplot): no GUI backend, no global state.
    return Figure(figsize=(width, height), layout="constrained")


def _shown_rows(rows: int, cells: np.ndarray) -> range:
    """At most MAX_ROWS_SHOWN rows (more only to reach the phase), including the phase."""
    first, last = int(cells[:, 0].min()), int(cells[:, 0].max())
    start = 0 if last < MAX_ROWS_SHOWN else first // 8 * 8
    return range(start, min(rows, max(start + MAX_ROWS_SHOWN, last + 1)))


def _dim_names(role: str, k_major: bool) -> tuple[str, str]:
    """Names of the storage (row, column) dims of an operand's tile."""
    mn = "m" if role == "A" else "n"
    return (mn, "k") if k_major else ("k", mn)


def _draw_bank_panel(ax: Any, view: PhaseView, shown: range, elem_bytes: int,
                     dims: tuple[str, str]) -> None:
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Rectangle

    groups = view.groups[shown.start:shown.stop]
    chunk = CHUNK_BYTES // elem_bytes
    ax.imshow(groups, cmap=ListedColormap(GROUP_COLOURS), vmin=-0.5, vmax=BANK_GROUPS - 0.5,
              aspect="auto", interpolation="nearest",
              extent=(-0.5, groups.shape[1] - 0.5, shown.stop - 0.5, shown.start - 0.5))
    marked = {(int(row), int(c)): (int(lane), bool(bad))
              for (row, c), lane, bad in zip(view.cells, view.lanes, view.conflicts)}
    for row in shown:
        for c in range(groups.shape[1]):
            group = int(view.groups[row, c])
            if (row, c) in marked:
                lane, bad = marked[(row, c)]
                colour = CONFLICT_COLOUR if bad else CLEAN_COLOUR
                ax.add_patch(Rectangle((c - 0.5, row - 0.5), 1, 1, fill=False,
                                       edgecolor=colour, linewidth=3, zorder=3))
                ax.text(c, row, f"T{lane} g{group}", ha="center", va="center", fontsize=7,
                        fontweight="bold", color=CONFLICT_COLOUR if bad else "black",
                        zorder=4)
            else:
                ax.text(c, row, str(group), ha="center", va="center", fontsize=6,
                        color="#555555")
    ax.set_xticks(range(groups.shape[1]))
    ax.set_xticklabels([f"{c * chunk}-{c * chunk + chunk - 1}" for c in range(groups.shape[1])],
                       fontsize=6, rotation=90 if groups.shape[1] > 8 else 0)
    ax.set_yticks(list(shown))
    ax.set_yticklabels([str(row) for row in shown], fontsize=6)
    ax.set_xticks(np.arange(-0.5, groups.shape[1]), minor=True)
    ax.set_yticks(np.arange(shown.start - 0.5, shown.stop), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.8)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel(f"storage column ({dims[1]}, contiguous): 16-byte chunks of {chunk} elements",
                  fontsize=8)
    ax.set_ylabel(f"storage row ({dims[0]}), rows {shown.start}-{shown.stop - 1} of "
                  f"{view.layout.rows}", fontsize=8)
    title_colour = CONFLICT_COLOUR if view.degree > 1 else "#1a7f37"
    ax.set_title(f"{view.layout.swizzle}\nldmatrix: {describe(view.degree)}", fontsize=11,
                 color=title_colour, fontweight="bold")


def bank_map_png(plan: TilingPlan, op_plan: OperandPlan, path: str | Path,
                 kernel_name: str = "") -> Path:
    """Draw an operand's bank map, linear beside its chosen swizzle (see :func:`bank_views`),
    to ``path`` (PNG). Needs matplotlib."""
    require_matplotlib()
    from matplotlib.patches import Patch

    linear, chosen = bank_views(plan, op_plan)
    elem_bytes = DType.parse(plan.dtype).bytes
    shown = _shown_rows(linear.layout.rows, linear.cells)
    dims = _dim_names(op_plan.role, op_plan.k_major)
    panel_width = max(0.55 * linear.groups.shape[1], 3.2)  # inches
    legend_width = 1.9
    fig = _new_figure(2 * panel_width + legend_width + 1.2, len(shown) * 0.26 + 2.6)
    panels = fig.subplots(1, 3, gridspec_kw={"width_ratios": [panel_width, panel_width,
                                                              legend_width]})
    for ax, view in zip(panels, (linear, chosen)):
        _draw_bank_panel(ax, view, shown, elem_bytes, dims)
    legend_ax = panels[2]
    legend_ax.axis("off")
    handles = [Patch(facecolor=colour, edgecolor="#888888",
                     label=f"group {g}: banks {4 * g}-{4 * g + 3}")
               for g, colour in enumerate(GROUP_COLOURS)]
    handles += [Patch(facecolor="white", edgecolor=CONFLICT_COLOUR, linewidth=2.5,
                      label="lane in conflict"),
                Patch(facecolor="white", edgecolor=CLEAN_COLOUR, linewidth=2.5,
                      label="lane without conflict")]
    legend_ax.legend(handles=handles, loc="upper left", fontsize=7, frameon=False,
                     title="16-byte bank group\n(Tn gN: lane, its group)", title_fontsize=7)

    worst = {name: operand_conflicts(plan, op_plan, view.layout, elem_bytes)
             for name, view in (("linear", linear), ("chosen", chosen))}
    rows, cols = linear.layout.rows, linear.layout.cols
    mn0, k0 = linear.position
    instruction = "ldmatrix.x4" + ("" if op_plan.k_major else ".trans")
    fig.suptitle(
        f"{kernel_name + ': ' if kernel_name else ''}operand {op_plan.role} in shared memory, "
        f"{rows}x{cols} {plan.dtype} ({dims[0]} x {dims[1]})\n"
        f"lanes {linear.lanes[0]}-{linear.lanes[-1]} of the {instruction} at "
        f"({'m' if op_plan.role == 'A' else 'n'} {mn0}, k {k0}): one phase, 8 rows of "
        f"16 bytes\nworst over the tile: linear: ldmatrix "
        f"{describe(worst['linear']['ldmatrix'])}, copy stores "
        f"{describe(worst['linear']['copy'])}; {chosen.layout.swizzle}: ldmatrix "
        f"{describe(worst['chosen']['ldmatrix'])}, copy stores "
        f"{describe(worst['chosen']['copy'])}", fontsize=9)
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


FRAGMENT_COLOURS = ("#cbd5e8", "#fdcdac", "#b3e2cd", "#f4cae4")
FRAGMENT_TITLES = {
    "A": "A: 16x16 (m x k), four .f16x2 registers per lane\n"
         "elements a0..a7; register = element // 2",
    "B": "B: 16x8 (k x n), two .f16x2 registers per lane\n"
         "elements b0..b3; register = element // 2",
    "C": "C, D: 16x8 (m x n), four .f32 registers per lane\nelements c0..c3, one per register",
}
FRAGMENT_DIMS = {"A": ("m", "k"), "B": ("k", "n"), "C": ("m", "n")}


def fragment_png(path: str | Path) -> Path:
    """Draw the mma.m16n8k16 fragment ownership (see :func:`fragment_owners`) to ``path``
    (PNG): every element labelled with its lane and fragment element ("T5 a2"), coloured by
    the register pair. Needs matplotlib."""
    require_matplotlib()
    from matplotlib.colors import ListedColormap

    owners = fragment_owners()
    fig = _new_figure(17, 9.6)
    panels = fig.subplots(1, 3, gridspec_kw={"width_ratios": [MMA_K, MMA_N, MMA_N]})
    for ax, (role, owner) in zip(panels, owners.items()):
        rows, cols = owner.lane.shape
        colour_index = owner.element // 2
        ax.imshow(colour_index, cmap=ListedColormap(FRAGMENT_COLOURS), vmin=-0.5, vmax=3.5,
                  interpolation="nearest", aspect="auto")
        for row in range(rows):
            for col in range(cols):
                ax.text(col, row, f"T{owner.lane[row, col]}\n{role.lower()}"
                        f"{owner.element[row, col]}", ha="center", va="center", fontsize=7,
                        linespacing=1.1)
        ax.set_xticks(range(cols))
        ax.set_yticks(range(rows))
        ax.tick_params(labelsize=7)
        ax.set_xticks(np.arange(-0.5, cols), minor=True)
        ax.set_yticks(np.arange(-0.5, rows), minor=True)
        ax.grid(which="minor", color="white", linewidth=1)
        ax.tick_params(which="minor", length=0)
        ax.set_xlabel(f"col {FRAGMENT_DIMS[role][1]}", fontsize=9)
        ax.set_ylabel(f"row {FRAGMENT_DIMS[role][0]}", fontsize=9)
        ax.set_title(FRAGMENT_TITLES[role], fontsize=10)
    fig.suptitle("mma.sync.aligned.m16n8k16 fragments (PTX ISA 9.7.14.5.8): the lane Tn "
                 "holding each element and its place in that lane's fragment\n"
                 "colour: the 32-bit register (A, B), the register pair (C); computed by "
                 "inverting tilec.families.mma_sync.mma_a_coord, mma_b_coord, mma_c_coord",
                 fontsize=11)
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


# ---------------------------------------------------------------------------------- CLI

DESCRIPTION = ("Draw the bank maps of a kernel's shared operand tiles (linear and swizzled) "
               "and the mma.m16n8k16 fragment layout, as PNG files.")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``tilec viz`` arguments, on ``parser`` (a subcommand's, or :func:`main`'s)."""
    arguments.add_program_arguments(parser, "draw")
    arguments.add_flags(parser, "arch", "stages", "warps", "swizzle",
                        arch={"help": "target (default: sm_80)"})
    parser.add_argument("--out", metavar="DIR", type=Path, default=Path("."),
                        help="folder for the pictures (default: the current one)")
    parser.set_defaults(handler=run)
    return parser


def build_parser() -> argparse.ArgumentParser:
    return add_arguments(arguments.Parser(prog="tilec viz", description=DESCRIPTION))


def run(args: argparse.Namespace) -> int:
    """Compile each selected kernel (no GPU needed) and write its pictures; prints the
    paths. Exit status: 0, 1 for an error in the program or the request, 2 without
    matplotlib."""
    try:
        require_matplotlib()
    except ImportError as err:
        print(err, file=sys.stderr)
        return 2
    options = arguments.compile_options(args)
    try:
        functions = arguments.select_functions(args.file, args.kernel)
        plans = []
        for fn in functions:
            compiled = fn.compile(**options, **arguments.constants(fn, args))
            plan = compiled.kernel.schedule.tiling
            if plan is None:
                raise CommandError(f"kernel '{fn.name}' has no tiling plan to draw")
            try:
                require_mma(plan, fn.name)
            except ValueError as err:
                raise CommandError(str(err)) from None
            plans.append((fn, plan))
        # Drawn once every kernel is known to be drawable: a refusal writes nothing.
        args.out.mkdir(parents=True, exist_ok=True)
        written = []
        for fn, plan in plans:
            for op_plan in plan.operands:
                written.append(bank_map_png(plan, op_plan,
                                            args.out / f"{fn.name}_{op_plan.role}_banks.png",
                                            kernel_name=fn.name))
        written.append(fragment_png(args.out / "mma_fragments.png"))
    except (TileError, CommandError, OSError) as err:
        print(arguments.error_message(err), file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``tilec viz FILE [--kernel NAME] [--const ...] [--arch SM] [--stages N] [--warps MxN]
    [--swizzle auto|off] [--out DIR]``"""
    return run(build_parser().parse_args(argv))
