"""The report as a PNG (``tilec bench --plot``): TFLOP/s against size, through matplotlib,
which is optional (the ``viz`` extra)."""
from __future__ import annotations

from pathlib import Path

from tilec.benchmarking.results import Report

MATPLOTLIB_MISSING = ("--plot needs matplotlib: python -m pip install matplotlib "
                      "(or pip install -e '.[viz]'); no plot written")


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise ImportError(MATPLOTLIB_MISSING) from err


CONTENDER_COLORS = {"tilec": "tab:blue", "tilec-llvm": "tab:purple", "cuBLAS": "tab:green",
                    "Triton": "tab:orange"}
DTYPE_STYLES = {"f16": "-", "bf16": "--", "f32": ":", "tf32": "-."}


def write_plot(report: Report, path: Path) -> None:
    """TFLOP/s against size, a line per contender and dtype: square sizes on a log axis,
    the other shapes side by side; the mma.sync ceilings as grey lines."""
    require_matplotlib()
    from matplotlib.figure import Figure

    square = [row for row in report.rows if row.case.kind == "square"]
    other = [row for row in report.rows if row.case.kind != "square"]
    panels = [(title, rows, is_square) for title, rows, is_square in (
        ("square sizes (N = M = K)", square, True), ("other shapes (M x N x K)", other, False))
        if rows]
    figure = Figure(figsize=(6.5 * max(1, len(panels)), 4.8), layout="constrained")
    axes = figure.subplots(1, max(1, len(panels)), squeeze=False)[0]
    dtypes = list(dict.fromkeys(row.case.dtype for row in report.rows))
    for axis, (title, rows, is_square) in zip(axes, panels):
        labels = list(dict.fromkeys(row.case.shape for row in rows))
        # Square sizes sit at their size on a log axis; other shapes side by side.
        positions = {label: int(label) if is_square else index
                     for index, label in enumerate(labels)}
        for name in report.contenders:
            for dtype in dtypes:
                points = [(positions[row.case.shape], row.tflops(name)) for row in rows
                          if row.case.dtype == dtype and row.tflops(name) is not None]
                if points:
                    axis.plot(*zip(*sorted(points)), marker="o",
                              color=CONTENDER_COLORS.get(name), label=f"{name} {dtype}",
                              linestyle=DTYPE_STYLES.get(dtype, "-"))
        if report.references is not None:
            for dtype, tflops in report.references.mma_tflops.items():
                axis.axhline(tflops, color="grey", linewidth=0.8,
                             linestyle=DTYPE_STYLES.get(dtype, "-"),
                             label=f"mma.sync ceiling {dtype}")
        if is_square:
            axis.set_xscale("log", base=2)
        axis.set_xticks(list(positions.values()))
        axis.set_xticklabels(labels, rotation=0 if is_square else 20,
                             ha="center" if is_square else "right")
        axis.set_title(title)
        axis.set_ylabel("TFLOP/s")
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="small")
    figure.suptitle(f"matmul on {report.device.get('name', 'GPU')}")
    figure.savefig(path, dpi=120)
