"""Launch the bench's kernels a few times each, for a profiler to measure: tilec in its tuned
configuration, tilec with each ``--variant``'s flags, and cuBLAS (torch.matmul), on the same
random inputs as ``tilec bench`` makes.

Why: the bench says how fast a kernel is, a profiler why; ncu needs the launches alone in a
process, without the bench's timing loop, its checks and its other contenders. Every launch
is announced on stdout first (``launch 3: 4096x4104x4096 f16 tilec[t128] ...``), so the
profiler's kernels can be matched to the contenders: a tilec launch that packs an operand
shows its pack kernel before the matmul.

    ncu --metrics gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum \\
        python benchmarks/profile_launch.py --sizes 4096x4104x4096 \\
        --variant t128='--const BM=128 BN=128 BK=64 --stages 4 --persistent' --repeat 2
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tilec.benchmarking.array_libraries import open_arrays  # noqa: E402
from tilec.benchmarking.cases import Case, parse_sizes  # noqa: E402
from tilec.benchmarking.contenders import (CublasContender, TilecContender,  # noqa: E402
                                           VariantTilecContender)
from tilec.tools import arguments  # noqa: E402
from tilec.tools.bench import VARIANT_FLAGS, _tilec_settings, parse_variant  # noqa: E402


def contenders(variants: list[tuple[str, list[str]]], arrays) -> list:
    chosen = [TilecContender({}, {})]
    for name, flags in variants:
        parser = arguments.Parser(prog=f"--variant {name}", add_help=False)
        arguments.add_flags(parser, *VARIANT_FLAGS)
        consts, options = _tilec_settings(parser.parse_args(flags))
        chosen.append(VariantTilecContender(name, consts, options))
    chosen.append(CublasContender(arrays))
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", required=True, help="as tilec bench's")
    parser.add_argument("--dtype", default="f16")
    parser.add_argument("--variant", action="append", default=[], type=parse_variant)
    parser.add_argument("--repeat", type=int, default=2, help="launches per contender")
    args = parser.parse_args()
    arrays = open_arrays(0)
    number = 0
    for size in [size for text in args.sizes for size in parse_sizes(text)]:
        *batch, m, n, k = size
        case = Case(m, n, k, args.dtype, batch[0] if batch else 1)
        outer = tuple(batch)
        a = arrays.random((*outer, m, k), args.dtype)
        b = arrays.random((*outer, k, n), args.dtype)
        for contender in contenders(args.variant, arrays):
            c = arrays.empty((*outer, m, n), contender.out_dtype(case))
            run, config = contender.prepare(case, [(a, b)], [c])
            for _ in range(args.repeat):
                print(f"launch {number}: {case.shape} {args.dtype} {contender.name}: {config}",
                      flush=True)
                run(0)
                arrays.synchronize()
                number += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
