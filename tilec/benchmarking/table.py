"""The report as text: the device and reference figures printed before the sweep, then the
table (TFLOP/s, ratios, fraction of the roofline bound), the skinny shapes' memory bounds,
and a note for each failure and each reason a contender sat out."""
from __future__ import annotations

from typing import Optional

from tilec.benchmarking.results import CaseResult, Report


def _cell(row: CaseResult, name: str) -> str:
    tflops = row.tflops(name)
    return f"{tflops:.1f}" if tflops is not None else row.measurements[name].status


def _number(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_references(report: Report) -> str:
    device = report.device
    lines = [f"tilec bench on {device['name']} ({device['arch']}, {device['sms']} SMs, "
             f"{device['l2_bytes'] / 2**20:g} MiB L2); "
             + ", ".join(f"{k} {v}" for k, v in report.software.items())]
    refs = report.references
    if refs is not None:
        if refs.copy_gbps:
            lines.append(f"  device copy bandwidth  {refs.copy_gbps:8.0f} GB/s     ("
                         f"{refs.copy_bytes / 2**30:g} GiB copied device to device, bytes read "
                         "+ written over time)")
        for dtype, tflops in refs.mma_tflops.items():
            lines.append(f"  mma.sync ceiling {dtype:<5} {tflops:8.1f} TFLOP/s  "
                         f"(m16n8k16 loop on registers: {refs.mma_launch})")
        lines += [f"  not measured: {problem}" for problem in refs.problems]
    return "\n".join(lines)


def _ratios(names: list[str]) -> list[tuple[str, str]]:
    """The ratio columns, (numerator, denominator): tilec over each other contender, but a
    tilec variant (tilec[NAME], ``--variant``) over tilec, its speed-up."""
    return [(n, "tilec") if n.startswith("tilec[") else ("tilec", n)
            for n in names if n != "tilec"]


def format_table(report: Report) -> str:
    """The results, one line per case, then the skinny cases' memory bounds and notes."""
    names = report.contenders
    ratios_of = _ratios(names)
    width = max([14] + [len(row.case.shape) for row in report.rows])
    columns = [max(8, len(n)) for n in names]
    ratio_columns = [max(12, len(a) + len(b) + 1) for a, b in ratios_of]
    head = (f"{'shape':<{width}} {'dtype':<5} "
            + " ".join(f"{n:>{c}}" for n, c in zip(names, columns))
            + "".join(f" {a + '/' + b:>{c}}" for (a, b), c in zip(ratios_of, ratio_columns))
            + f" {'tilec/bound':>12} {'tilec err':>9}  tilec config")
    lines = [f"{'':<{width + 6}} " + " ".join(f"{'TFLOP/s':>{c}}" for c in columns), head]
    for row in report.rows:
        ratios = "".join(f" {_number(row.ratio(a, b), '.2f'):>{c}}"
                         for (a, b), c in zip(ratios_of, ratio_columns))
        fraction, bound = row.fraction_of_bound(), row.bound()
        vs_bound = f"{fraction:.2f} {bound[1]}" if fraction is not None and bound else "-"
        tilec = row.measurements.get("tilec")
        error = tilec.error if tilec is not None else None
        lines.append(f"{row.case.shape:<{width}} {row.case.dtype:<5} "
                     + " ".join(f"{_cell(row, n):>{c}}" for n, c in zip(names, columns))
                     + ratios
                     + f" {vs_bound:>12} {_number(error, '.2e'):>9}  "
                     f"{tilec.config if tilec else ''}".rstrip())
    refs = report.references
    skinny = [row for row in report.rows
              if row.case.kind == "skinny" and row.memory_bound_ms is not None]
    if skinny and refs is not None and refs.copy_gbps:
        lines += ["", "memory bounds of the skinny shapes (A, B and C as tilec writes it, over "
                  "the copy bandwidth):"]
        for row in skinny:
            bound_ms = row.memory_bound_ms or 0.0
            line = (f"  {row.case.shape} {row.case.dtype}: {row.bound_bytes / 1e6:.1f} "
                    f"MB at {refs.copy_gbps:.0f} GB/s = {bound_ms * 1e3:.1f} us")
            tilec_ms = row.timed_ms("tilec")
            if tilec_ms is not None:
                line += f"; tilec {tilec_ms * 1e3:.1f} us, {bound_ms / tilec_ms:.2f} of the bound"
            lines.append(line)
    variants = (report.settings or {}).get("variants") or {}
    if variants:
        lines += ["", "variants (the command line's tilec settings, then these flags; each "
                  "row's configuration is in --json):"]
        lines += [f"  tilec[{name}]: {flags}" for name, flags in variants.items()]
    notes = format_notes(report)
    return "\n".join(lines + ([""] + notes if notes else []))


def format_notes(report: Report) -> list[str]:
    """A line for each failed check and each error; one per distinct reason for n/a."""
    notes: list[str] = []
    unavailable: dict[tuple[str, str], list[str]] = {}
    for row in report.rows:
        for name, measured in row.measurements.items():
            where = f"{row.case.shape} {row.case.dtype} {name}"
            if measured.status == "FAIL":
                detail = f"; {measured.note}" if measured.note else ""
                notes.append(f"FAIL {where}: error {_number(measured.error, '.2e')} against "
                             f"a tolerance of {measured.tolerance:g}{detail} (not timed)")
            elif measured.status == "error":
                notes.append(f"error {where}: {measured.note}")
            elif measured.status == "n/a":
                unavailable.setdefault((name, measured.note), []).append(row.case.dtype)
    for (name, note), dtypes in unavailable.items():
        notes.append(f"n/a {name} ({', '.join(dict.fromkeys(dtypes))}): {note}")
    return notes
