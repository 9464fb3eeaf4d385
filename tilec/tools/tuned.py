"""``--tuned`` (``tilec explain`` and ``tilec run``): start from the configuration ``tilec bench``
runs for the program's product, so the kernel the bench times can be read and run alone.

    tilec explain samples/matmul.py --arch sm_90a --tuned --shape M=64,N=12288,K=4096

The configuration is :func:`tilec.benchmarking.tuning.tuned_config`'s for an M x N x K case
(``--shape``'s sizes of the symbols M, N and K; a 3-D first tensor's leading size as the batch,
two at least)
in the first tensor's dtype, on the target. Its tile goes to the program's BM, BN and BK,
the rest (stages, warps, schedule, split-K, packing) to the compile options; options given on
the command line win. A tile size given with ``--const`` is refused: a tile half from the
command line and half tuned is neither, and the tuned knobs belong to the tuned tile.
"""
from __future__ import annotations

from typing import Any

from tilec.kernel import TileFunction
from tilec.options import Options
from tilec.tools.arguments import CommandError

TILE = ("BM", "BN", "BK")
PRODUCT_SIZES = ("M", "N", "K")
HELP = ("start from the configuration `tilec bench` runs for this product (its M, N and K "
        "from --shape, the first tensor's dtype, the target); flags given win")


def with_tuned(fn: TileFunction, consts: dict[str, Any], options: dict[str, Any],
               sizes: dict[str, int], arch: str
               ) -> tuple[dict[str, Any], dict[str, Any], str]:
    """``consts`` and ``options`` over the tuned configuration of ``fn``'s product on
    ``arch``: (the tile as constants, the other knobs as compile options, why: ``tuned: ``
    lines); a usage error where the options given cannot go with the tuned ones."""
    from tilec.benchmarking.tuning import config_words
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
    config, unswapped = _tuned(fn, consts, options, sizes, arch)
    tile = {knob: config[knob] for knob in TILE}
    knobs = {knob: value for knob, value in config.items() if knob not in TILE}
    merged = {**knobs, **options}
    try:
        Options(**{**merged, "arch": arch})
    except ValueError as err:
        given = ", ".join(f"{knob} {value}" for knob, value in options.items()
                          if knob != "arch")
        raise CommandError(f"--tuned chose {config_words(config)}, which the options given "
                           f"({given}) cannot go with: {err}") from None
    return {**tile, **consts}, merged, _note(fn, options, sizes, arch, unswapped)


def _note(fn: TileFunction, options: dict[str, Any], sizes: dict[str, int], arch: str,
          unswapped: str) -> str:
    """Why :func:`with_tuned` chose what it did, given the command line's ``options``: why
    not the swapped product (``unswapped``, where the tuning chose it first), the tuning's
    table entry, the rules that moved the case off it, the configuration, and the options
    given over it; ``tuned: `` lines."""
    from tilec.benchmarking.tuning import describe_tuned
    lines = []
    if unswapped:
        lines.append(f"the swapped product the tuning chose first does not apply: "
                     f"{unswapped}; chosen without it")
    lines += describe_tuned(_case(fn, sizes), arch, options.get("backend", "ptx"),
                            options.get("fp8_accumulation", "fast"), swap=not unswapped)
    given = [f"{knob} {value}" for knob, value in options.items() if knob != "arch"]
    if given:
        lines.append(f"over it, as given: {', '.join(given)}")
    return "".join(f"tuned: {line}\n" for line in lines)


def _tuned(fn: TileFunction, consts: dict[str, Any], options: dict[str, Any],
           sizes: dict[str, int], arch: str) -> tuple[dict[str, Any], str]:
    """The tuned configuration of ``fn``'s product, and why not the swapped product the
    tuning chose first ("" when it chose none or the swap_product pass swaps ``fn`` in it;
    the tuning knows the bench's program, not this one)."""
    from tilec.benchmarking.tuning import tuned_config
    case = _case(fn, sizes)
    backend, accumulation = options.get("backend", "ptx"), options.get("fp8_accumulation",
                                                                        "fast")
    try:
        config = tuned_config(case, arch, backend, accumulation)
    except KeyError:
        raise CommandError(f"--tuned: `tilec bench` has no tuned configuration for "
                           f"{case.dtype} products") from None
    why = _not_swapped(fn, consts, {**config, **options}, arch) \
        if config.get("swap_product") == "always" else ""
    if why:
        config = tuned_config(case, arch, backend, accumulation, swap=False)
    return config, why


def _not_swapped(fn: TileFunction, consts: dict[str, Any], config: dict[str, Any],
                 arch: str) -> str:
    """Why the swap_product pass does not swap ``fn``'s product under ``config`` (the
    tuned one, the command line's options over it); "" when it does."""
    from tilec.passes import swap_product
    if config.get("swap_product") != "always":
        return "swap_product is not 'always' (as given)"
    tile = {knob: config[knob] for knob in TILE}
    try:
        options = Options(**{**{knob: value for knob, value in config.items()
                                if knob not in TILE}, "arch": arch})
    except ValueError:
        return ""  # options at odds with each other: the compile says so, as it would anyway
    swap = swap_product.run(fn.lower(**{**consts, **tile}), options).schedule.swap
    return "" if swap is not None and swap.swapped else \
        (swap.why if swap is not None else "the pass has nothing to say of the program")


def _case(fn: TileFunction, sizes: dict[str, int]):
    """The bench case of ``fn``'s product at ``sizes``: M, N and K, the first tensor's dtype,
    a 3-D first tensor's leading size as the batch."""
    from tilec.benchmarking.cases import Case
    tensor = next((p for p in fn.signature.params if p.kind == "tensor"), None)
    if tensor is None:
        raise CommandError(f"--tuned: '{fn.name}' has no tensor parameter to take a dtype from")
    # A 3-D program is batched whatever its batch size (its grid's third axis leaves split-K
    # no room): the bench's batched rows, of two batches at least.
    batch = max(2, sizes.get(tensor.dims[0], 2)) if len(tensor.dims) == 3 else 1
    return Case(*(sizes[symbol] for symbol in PRODUCT_SIZES), str(tensor.dtype), batch)
