"""``--tuned`` (``tilec explain`` and ``tilec run``): start from the configuration ``tilec bench``
runs for the program's product, so the kernel the bench times can be read and run alone.

    tilec explain samples/matmul.py --arch sm_90a --tuned --shape M=64,N=12288,K=4096

The configuration is :func:`tilec.benchmarking.tuning.tuned_config`'s for an M x N x K case
(``--shape``'s sizes of the symbols M, N and K; a 3-D first tensor's leading size as the batch)
in the first tensor's dtype, on the target. Its tile goes to the program's BM, BN and BK,
the rest (stages, warps, schedule, split-K, packing) to the compile options; options given on
the command line win. A tile size given with ``--const`` is refused: a tile half from the
command line and half tuned is neither, and the tuned knobs belong to the tuned tile.
"""
from __future__ import annotations

from typing import Any

from tilec.kernel import TileFunction
from tilec.tools.arguments import CommandError

TILE = ("BM", "BN", "BK")
PRODUCT_SIZES = ("M", "N", "K")
HELP = ("start from the configuration `tilec bench` runs for this product (its M, N and K "
        "from --shape, the first tensor's dtype, the target); flags given win")


def with_tuned(fn: TileFunction, consts: dict[str, Any], options: dict[str, Any],
               sizes: dict[str, int], arch: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``consts`` and ``options`` over the tuned configuration of ``fn``'s product on
    ``arch``: (the tile as constants, the other knobs as compile options)."""
    from tilec.benchmarking.tuning import tuned_config

    name = fn.name
    if set(TILE) & set(consts):
        raise CommandError(f"--tuned chooses the tile of '{name}': drop "
                           f"--const {', '.join(sorted(set(TILE) & set(consts)))}, or --tuned")
    if not set(TILE) <= set(fn.signature.consts):
        raise CommandError(f"--tuned sets BM, BN and BK, which '{name}' does not declare "
                           f"(its constants: {', '.join(fn.signature.consts) or 'none'})")
    missing = [symbol for symbol in PRODUCT_SIZES if symbol not in sizes]
    if missing:
        raise CommandError(f"--tuned needs the product's sizes: --shape "
                           f"{','.join(f'{symbol}=..' for symbol in missing)} (the tuned "
                           "configuration depends on them)")
    case = _case(fn, sizes)
    try:
        config = tuned_config(case, arch, options.get("backend", "ptx"),
                              options.get("fp8_accumulation", "fast"))
    except KeyError:
        raise CommandError(f"--tuned: `tilec bench` has no tuned configuration for "
                           f"{case.dtype} products") from None
    tile = {knob: config[knob] for knob in TILE}
    knobs = {knob: value for knob, value in config.items() if knob not in TILE}
    return {**tile, **consts}, {**knobs, **options}


def tuned_note(fn: TileFunction, options: dict[str, Any], sizes: dict[str, int],
               arch: str) -> str:
    """Why :func:`with_tuned` chose what it did (after it succeeded, given the command
    line's ``options``): the tuning's table entry, the rules that moved the case off it, the
    configuration, and the options given over it; ``tuned: `` lines."""
    from tilec.benchmarking.tuning import describe_tuned
    lines = describe_tuned(_case(fn, sizes), arch, options.get("backend", "ptx"),
                           options.get("fp8_accumulation", "fast"))
    given = [f"{knob} {value}" for knob, value in options.items() if knob != "arch"]
    if given:
        lines.append(f"over it, as given: {', '.join(given)}")
    return "".join(f"tuned: {line}\n" for line in lines)


def _case(fn: TileFunction, sizes: dict[str, int]):
    """The bench case of ``fn``'s product at ``sizes``: M, N and K, the first tensor's dtype,
    a 3-D first tensor's leading size as the batch."""
    from tilec.benchmarking.cases import Case
    tensor = next((p for p in fn.signature.params if p.kind == "tensor"), None)
    if tensor is None:
        raise CommandError(f"--tuned: '{fn.name}' has no tensor parameter to take a dtype from")
    batch = sizes.get(tensor.dims[0], 1) if len(tensor.dims) == 3 else 1
    return Case(*(sizes[symbol] for symbol in PRODUCT_SIZES), str(tensor.dtype), batch)
