#!/usr/bin/env bash
# compute-sanitizer over tilec's kernels at a ragged shape: memcheck on every sample under
# every pipeline depth, split-K, packing and tf32; racecheck and synccheck on one of each
# kind. On a compute capability 9.0 GPU, the same three tools over the Hopper path (sm_90a:
# TMA, wgmma, warp specialization) at two ragged shapes, f16 and bf16. Run on the GPU
# machine (scripts/gpu_check.sh calls it); logs go to $OUT/sanitize.log.
# Exit status 1 when any run reports an error or fails its check. SANITIZE_ONLY=TEXT runs
# only the runs whose command line contains TEXT (e.g. SANITIZE_ONLY=w8a16).
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-./out}
mkdir -p "$OUT"
LOG="$OUT/sanitize.log"
: > "$LOG"
SHAPE="M=200,N=136,K=72"
failed=0
runs=0

only() {  # only TEXT: whether SANITIZE_ONLY (if set) selects the run TEXT describes
    [ -z "${SANITIZE_ONLY:-}" ] || [[ "$1" == *"$SANITIZE_ONLY"* ]]
}

sanitize() {  # sanitize TOOL FILE SHAPE [tilec run options...]
    local tool=$1 file=$2 shape=$3
    shift 3
    only "$tool $file --shape $shape $*" || return 0
    runs=$((runs + 1))
    echo "== $tool $file --shape $shape $*" >> "$LOG"
    local what="$tool $(basename "$file" .py) $*"
    [ "$shape" = "$SHAPE" ] || what="$what --shape $shape"
    if compute-sanitizer --tool "$tool" --error-exitcode 3 --print-limit 20 \
            python3 -m tilec run "$file" --shape "$shape" "$@" >> "$LOG" 2>&1; then
        echo "ok      $what"
    else
        echo "FAILED  $what (see $LOG)"
        failed=$((failed + 1))
    fi
}

check() {  # check TOOL SAMPLE [tilec run options...]
    local tool=$1 sample=$2
    shift 2
    sanitize "$tool" "samples/$sample.py" "$SHAPE" "$@"
}

for sample in matmul matmul_bt gemm_epilogue sgemm; do
    for stages in 1 2 3 4; do
        check memcheck "$sample" --stages "$stages"
    done
done
check memcheck matmul --split-k 3
check memcheck gemm_epilogue --split-k 2 --pack always
check memcheck matmul --pack always
check memcheck sgemm --f32-math tf32
check memcheck matmul_bt --f32-math tf32 --stages 2
# Operand rows read in place as aligned words, C staged and stored by rows (the small ragged
# problems' tuned kernel), int8 split-K's integer meeting, fp8 weights converted in registers.
for tool in memcheck racecheck synccheck; do
    sanitize "$tool" samples/gemm_epilogue.py "M=1000,N=1003,K=77" --pack off \
        --misaligned-copy words --misaligned-store rows --stages 1 --warps 2x4 \
        --const BM=64 BN=128 BK=80
done
# Word copies in a pipelined K loop: vectors wholly past K (word 0 would begin before them)
# and the vector holding each operand's last element.
for shape in "M=1000,N=1003,K=77" "M=45,N=51,K=37"; do
    sanitize memcheck samples/matmul.py "$shape" --pack off --misaligned-copy words --stages 2
    sanitize memcheck samples/matmul_bt.py "$shape" --pack off --misaligned-copy words \
        --stages 3
done
check memcheck int8_gemm --split-k 3
check memcheck wfp8a16 --arch sm_90
# 8-bit weights converted at launch (the converting pack kernel, then the 16-bit product):
# the sample under --pack always, and a weight stored [K, N], which only a launch converts.
check memcheck w8a16 --pack always
sanitize memcheck tests/dequantize_programs.py "$SHAPE" --kernel kn
for tool in racecheck synccheck; do
    check "$tool" matmul --stages 3
    check "$tool" matmul_bt --stages 1
    check "$tool" gemm_epilogue --split-k 2
    check "$tool" sgemm --stages 2
    check "$tool" sgemm --f32-math tf32
done

# The Hopper path: a producer warp loads A and B tiles by TMA into an mbarrier ring, wgmma
# consumer warpgroups read them from shared memory. Two tiles (wgmma needs BK a multiple of
# 64) at two ragged shapes: 1000x1003x77 has rows that are not 16-byte aligned, so the
# launch packs A and B and pads K to BK; 300x520x200 loads in place and leaves TMA to
# zero-fill the last K box. Each run first checks that this compiles to TMA + wgmma (explain's
# schedule names the producer's tma.load) rather than the mma.sync fallback.
HOPPER_BIG="BM=128 BN=256 BK=64 --stages 4"
HOPPER_MID="BM=128 BN=128 BK=64 --stages 3"
RAGGED_PACKED="M=1000,N=1003,K=77"
RAGGED_IN_PLACE="M=300,N=520,K=200"
# More tiles than an H100 has SMs (192 of 64x256 or 128x128), so pingpong blocks hand turns on.
RAGGED_TURNS="M=2000,N=1500,K=200"
SAMPLE_DIR=$(mktemp -d)
trap 'rm -rf "$SAMPLE_DIR"' EXIT

sample_file() {  # sample_file SAMPLE DTYPE: the sample's path, with A and B read as DTYPE
    local sample=$1 dtype=$2
    if [ "$dtype" = f16 ]; then
        echo "samples/$sample.py"
        return
    fi
    local file="$SAMPLE_DIR/${sample}_$dtype.py"
    sed -e "s/A: f16\[/A: $dtype[/" -e "s/B: f16\[/B: $dtype[/" "samples/$sample.py" > "$file"
    echo "$file"
}

hopper() {  # hopper TOOL SAMPLE DTYPE SHAPE BM=.. BN=.. BK=.. --stages N
    local tool=$1 sample=$2 dtype=$3 shape=$4
    shift 4
    only "$tool samples/$sample.py --shape $shape $*" || return 0
    local file consts=() options=()
    file=$(sample_file "$sample" "$dtype")
    while [ $# -gt 0 ]; do
        case $1 in
            --stages) options+=("$1" "$2"); shift 2 ;;
            --persistent|--stream-k) options+=("$1"); shift ;;
            --split-k) options+=("$1" "$2"); shift 2 ;;
            --cluster|--cluster-n|--tma-swizzle|--swap-product) options+=("$1" "$2"); shift 2 ;;
            --consumers) options+=("$1" "$2"); shift 2 ;;
            --warpgroup-rows) options+=("$1" "$2"); shift 2 ;;
            --raster-group) options+=("$1" "$2"); shift 2 ;;
            *) consts+=("$1"); shift ;;
        esac
    done
    local plan
    plan=$(python3 -m tilec explain "$file" --arch sm_90a --const "${consts[@]}" \
        "${options[@]}" --shape "$shape" 2>&1)
    if ! grep -q "producer tma.load" <<< "$plan" || ! grep -q "wgmma.mma_async" <<< "$plan"
    then
        runs=$((runs + 1))
        failed=$((failed + 1))
        { echo "== $tool $file --shape $shape --arch sm_90a ${consts[*]} ${options[*]}"
          echo "not on the Hopper path (no producer tma.load or no wgmma.mma_async in explain):"
          echo "$plan"; } >> "$LOG"
        echo "FAILED  $tool $sample $dtype $shape ${consts[*]} ${options[*]}: no TMA + wgmma"
        return
    fi
    { echo "-- the plan of the next run (tilec explain): $(grep -m1 'warp tile' <<< "$plan" |
          sed 's/^ *//')"
      grep -E "packed at launch|producer tma.load|epilogue  " <<< "$plan"; } >> "$LOG"
    # Selected above by the run as written here (the sanitize line names a retyped sample's
    # temporary file and the flags in their tilec run form).
    SANITIZE_ONLY='' sanitize "$tool" "$file" "$shape" --arch sm_90a --const "${consts[@]}" \
        "${options[@]}"
}

cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
if [ "$cc" = 9.0 ]; then
    for sample in matmul matmul_bt gemm_epilogue; do
        for dtype in f16 bf16; do
            hopper memcheck "$sample" "$dtype" "$RAGGED_PACKED" $HOPPER_BIG
            hopper memcheck "$sample" "$dtype" "$RAGGED_IN_PLACE" $HOPPER_MID
        done
    done
    hopper memcheck matmul f16 "$RAGGED_IN_PLACE" $HOPPER_BIG
    hopper memcheck matmul bf16 "$RAGGED_PACKED" $HOPPER_MID
    # C through the staging tile and TMA stores (N = 520: 16-byte aligned rows), one tile a
    # block and persistent blocks reusing the staging tile.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 "$RAGGED_IN_PLACE" BM=128 BN=256 BK=64 --stages 3 \
            --persistent
    done
    # Clusters of two blocks sharing B (multicast, remote arrivals); 300 rows: an odd count
    # of M tiles, the last cluster's second block past M.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" matmul bf16 "$RAGGED_IN_PLACE" $HOPPER_BIG --cluster 2
        hopper "$tool" gemm_epilogue f16 "$RAGGED_IN_PLACE" $HOPPER_MID --cluster 2
    done
    # Clusters of four (a quarter of B's rows a block, three remote hand-backs): 300 rows
    # are 5 M tiles of 64, the second cluster's last three blocks past M; persistent pingpong
    # in fours over 2100 rows (33 M tiles of 64).
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" matmul f16 "$RAGGED_IN_PLACE" BM=64 BN=128 BK=64 --stages 6 --cluster 4
        hopper "$tool" gemm_epilogue bf16 "M=2100,N=1000,K=200" BM=64 BN=224 BK=64 --stages 5 \
            --persistent --consumers pingpong --cluster 4
    done
    # Clusters along N too: 4x2 (A's stage multicast along each M row, B's down each
    # column, four remote hand-backs), 300 rows in 5 M tiles of 64 and 520 columns in 4 of
    # 160 (the second cluster's last three blocks past M); persistent 2x2 over 2100x1000
    # (17 x 8 tiles of 128: the last cluster row half past M).
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" matmul f16 "$RAGGED_IN_PLACE" BM=64 BN=160 BK=64 --stages 7 --cluster 4 \
            --cluster-n 2
        hopper "$tool" gemm_epilogue bf16 "M=2100,N=1000,K=200" BM=128 BN=128 BK=64 \
            --stages 4 --persistent --cluster 2 --cluster-n 2
    done
    for tool in racecheck synccheck; do
        hopper "$tool" gemm_epilogue bf16 "$RAGGED_IN_PLACE" $HOPPER_MID
        hopper "$tool" matmul f16 "$RAGGED_PACKED" $HOPPER_BIG
        hopper "$tool" matmul bf16 "$RAGGED_IN_PLACE" $HOPPER_MID
        hopper "$tool" matmul_bt bf16 "$RAGGED_IN_PLACE" $HOPPER_BIG
        hopper "$tool" gemm_epilogue f16 "$RAGGED_PACKED" $HOPPER_MID
    done
    # Pingpong consumers (each warpgroup its own 64-row tiles, turns on named barriers),
    # persistent blocks over batches x tiles, and wgmma8 on int8 operands (K = 200: A and B
    # packed as bytes at launch).
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" matmul f16 "$RAGGED_TURNS" BM=64 BN=256 BK=64 --stages 4 \
            --persistent --consumers pingpong
        hopper "$tool" bmm f16 "Bt=3,$RAGGED_IN_PLACE" BM=128 BN=256 BK=64 --stages 3 \
            --persistent
        hopper "$tool" int8_gemm f16 "$RAGGED_IN_PLACE" BM=128 BN=128 BK=128 --stages 3
    done
    # Consumer warpgroups of 128 rows (two m64 wgmmas a k step): the 256x128 cooperative tile
    # and 128x128 pingpong; batched blocks in clusters of two (Bt=3, 300 rows: an odd count
    # of M tiles per batch, the last pair's second block past M).
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 "$RAGGED_IN_PLACE" BM=256 BN=128 BK=64 --stages 3 \
            --persistent --warpgroup-rows 128
        hopper "$tool" matmul bf16 "$RAGGED_TURNS" BM=128 BN=128 BK=64 --stages 4 \
            --persistent --consumers pingpong --warpgroup-rows 128
        hopper "$tool" bmm f16 "Bt=3,$RAGGED_IN_PLACE" BM=128 BN=256 BK=64 --stages 3 \
            --persistent --cluster 2
    done
    # 128x256 beside four stages: the slabs stored in turn through two one-slab buffers,
    # one tile a block and persistent blocks carrying the buffers' turns across tiles.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 "$RAGGED_TURNS" $HOPPER_BIG --persistent
        hopper "$tool" gemm_epilogue bf16 "$RAGGED_IN_PLACE" $HOPPER_BIG
    done
    # Split-K's slices (K = 200: 4 steps, 3 slices) meeting on the consumers' barrier after
    # the producer has left, a fused epilogue after the meeting; and stream-K's persistent
    # grid of every SM's block over fewer tiles (12 of 128x256), the tiles split in parts.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 "$RAGGED_IN_PLACE" $HOPPER_MID --split-k 3
        hopper "$tool" matmul bf16 "$RAGGED_IN_PLACE" BM=128 BN=256 BK=64 --stages 3 \
            --persistent --stream-k
    done
    # The tuning's short slices in the skinny six-stage tile: 16 slices of 5 steps over 65
    # (3 of them empty), the last block adding all 16 partials before the fused epilogue.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 M=130,N=1030,K=4100 BM=64 BN=128 BK=64 --stages 6 \
            --split-k 16
    done
    # The tuning's tall tiles split along K: three consumer warpgroups of 64 rows, and two of
    # 128 rows, over ragged M, N and K.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 M=300,N=1030,K=4100 BM=192 BN=128 BK=64 --stages 4 \
            --split-k 4
        hopper "$tool" gemm_epilogue bf16 M=1000,N=1000,K=4100 BM=256 BN=128 BK=64 \
            --stages 3 --warpgroup-rows 128 --split-k 4
    done
    # The swapped 16-bit product (swap_product always): C.T's tiles of 152 rows of C along
    # wgmma's n over ragged M, N and K: an f32 C stored transposed by each thread, on one
    # warpgroup; an f16 C staged transposed (stmatrix.trans) and stored with TMA, on two
    # split along K under a fused epilogue.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" matmul f16 M=300,N=1030,K=4100 BM=152 BN=64 BK=64 --stages 6 \
            --swap-product always
        hopper "$tool" gemm_epilogue bf16 M=300,N=1030,K=4100 BM=152 BN=128 BK=64 \
            --stages 4 --split-k 2 --swap-product always
    done
    # Clusters of 2 split along K (a pair on one slice): 3 M tiles, so the second pair's
    # second block lies past M and meets in a workspace slot of its own; the swapped product
    # in clusters (sharing B's tile, the swapped A), 3 M tiles of 104 split in two.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 M=300,N=1030,K=4100 BM=128 BN=128 BK=64 --stages 4 \
            --split-k 3 --cluster 2
        hopper "$tool" matmul bf16 M=310,N=1030,K=4100 BM=104 BN=128 BK=64 --stages 4 \
            --split-k 2 --cluster 2 --swap-product always
    done
    # wgmma's register form (the wgmma_rs family): int8 weights as A, loaded and converted
    # by the consumers while earlier wgmmas read their other register set. The w8a16
    # sample as written (BK 128: the swap_product pass transposes it), one tile a block
    # and persistent; the hand-swapped sample in persistent clusters of two.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" w8a16 f16 "$RAGGED_IN_PLACE" BM=128 BN=128 BK=128 --stages 4
        hopper "$tool" w8a16 f16 "$RAGGED_TURNS" BM=64 BN=128 BK=128 --stages 4 --persistent
        hopper "$tool" w8a16_swapped f16 "$RAGGED_IN_PLACE" BW=128 BA=128 BK=128 --stages 3 \
            --persistent --cluster 2
    done
    # TMA's 64- and 32-byte swizzles (SW64 / SW32 descriptors, boxes of 64 or 32 bytes): an
    # N-major B of 208 columns (32-byte slabs, A's 128) in persistent clusters of two; BK 32
    # in 64-byte slabs (asked for: such a 16-bit block stays on mma.sync otherwise); and the
    # w8a16 sample at its default BK 64 (the weights' rows 64 bytes) on the register form.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" matmul f16 "$RAGGED_IN_PLACE" BM=128 BN=208 BK=64 --stages 4 \
            --persistent --cluster 2
        hopper "$tool" matmul_bt bf16 "$RAGGED_IN_PLACE" BM=128 BN=128 BK=32 --stages 6 \
            --tma-swizzle 64
        hopper "$tool" w8a16 f16 "$RAGGED_IN_PLACE" BM=128 BN=128 BK=64 --stages 4
    done
    # TMA stores from 64- and 32-byte staging slabs (C's rows not whole 128-byte lines):
    # pair writes in 32-byte slabs one tile a block, stmatrix in 64-byte slabs persistent
    # (256 tiles: blocks reuse the staging tile), and 64-byte slabs in persistent clusters
    # of two. C's rows 16-byte aligned (N = 520, 1504), so TMA, not the row stores.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 "$RAGGED_IN_PLACE" BM=128 BN=208 BK=64 --stages 4
        hopper "$tool" gemm_epilogue bf16 "M=2000,N=1504,K=200" BM=128 BN=96 BK=64 \
            --stages 4 --persistent
        hopper "$tool" gemm_epilogue f16 "$RAGGED_IN_PLACE" BM=128 BN=160 BK=64 --stages 3 \
            --persistent --cluster 2
    done
    # An f32 C through TMA stores: 128x256 beside three stages, its eight 32-column slabs in
    # turn through two buffers, one tile a block and persistent (2000x1500: 16 x 6 tiles).
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" matmul f16 "$RAGGED_TURNS" BM=128 BN=256 BK=64 --stages 3 --persistent
        hopper "$tool" matmul_bt bf16 "$RAGGED_IN_PLACE" BM=128 BN=256 BK=64 --stages 3
    done
    # A [K, N] B whose rows are 16-byte aligned but off 128-byte lines (N = 1000), re-read
    # by 4096 rows of A: repacked at launch to a 1024-element pitch, then read by TMA.
    sanitize memcheck samples/matmul.py "M=4096,N=1000,K=256" --arch sm_90a \
        --const BM=128 BN=256 BK=64 --stages 3
    # The bench's schedules for such a B below 8192 rows of A: read in place, each box
    # multicast to a cluster of two persistent blocks (M = 300: an odd count of M tiles), in
    # 256x128 tiles of 128-row warpgroups and in 128x128 tiles.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 "M=300,N=1000,K=256" BM=256 BN=128 BK=64 --stages 3 \
            --warpgroup-rows 128 --persistent --raster-group 16 --cluster 2
    done
    hopper memcheck matmul bf16 "M=300,N=1000,K=256" BM=128 BN=128 BK=64 --stages 4 \
        --persistent --raster-group 16 --cluster 2
    # The bench's whole-round tiles (tuning.WHOLE_ROUND_TILES) in persistent clusters of two
    # over several rounds: 2100 rows are 17 M tiles of 128 (11 of 192), so the last pair's
    # second block lies past M; 378 (264) tiles for 132 blocks. 128x144's B has its last
    # 128-byte slab padded: each box of it loads 48 columns past the tile, and past N = 4000
    # (28 N tiles, the last 32 columns deep) zeros.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 "M=2100,N=4000,K=200" BM=128 BN=192 BK=64 --stages 4 \
            --persistent --raster-group 16 --cluster 2
        hopper "$tool" matmul f16 "M=2100,N=4000,K=200" BM=128 BN=144 BK=64 --stages 4 \
            --persistent --raster-group 16 --cluster 2
    done
    hopper memcheck matmul bf16 "M=2100,N=4000,K=200" BM=192 BN=192 BK=64 --stages 3 \
        --persistent --raster-group 16 --cluster 2
    # Slabs in turn through two buffers, persistent blocks writing them again for the next
    # tile: 256x144 in 128-row warpgroups, C's 9 slabs a strip at a time (18 units); 128x208
    # beside four stages, 13 slabs, an odd count: the leader waits for the last store's
    # read before the next tile's first write.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 "M=2100,N=4000,K=200" BM=256 BN=144 BK=64 --stages 3 \
            --warpgroup-rows 128 --persistent --raster-group 16
        hopper "$tool" gemm_epilogue f16 "M=2100,N=4000,K=200" BM=128 BN=208 BK=64 --stages 4 \
            --persistent
    done
    # The cluster tiles (tuning.CLUSTER_TILES) as the bench runs them: 192x176 beside four
    # stages (B's last slab padded, C's 11 slabs in turn: an odd count), 256x64 in 128-row
    # warpgroups; 2100 rows are 11 M tiles of 192 and 9 of 256, so the last pair's second
    # block lies past M.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" gemm_epilogue f16 "M=2100,N=4000,K=200" BM=192 BN=176 BK=64 --stages 4 \
            --persistent --raster-group 16 --cluster 2
        hopper "$tool" matmul f16 "M=2100,N=4000,K=200" BM=256 BN=64 BK=64 --stages 4 \
            --warpgroup-rows 128 --persistent --raster-group 16 --cluster 2
    done
    # The skinny tiles (tuning.SKINNY_TILES) and a strip tile one a block, as the bench runs
    # them in one wave: 200 rows leave the last M tile part empty (the 256-row one mostly
    # past M), 3000 columns the last N tile, K 1100 a ragged last step.
    for tool in memcheck racecheck synccheck; do
        hopper "$tool" matmul f16 "M=200,N=3000,K=1100" BM=64 BN=192 BK=64 --stages 6
        hopper "$tool" gemm_epilogue f16 "M=200,N=3000,K=1100" BM=64 BN=256 BK=64 --stages 4
        hopper "$tool" matmul bf16 "M=200,N=3000,K=1100" BM=256 BN=160 BK=64 --stages 3 \
            --warpgroup-rows 128
    done
    # An fp8 output of wgmma8: e4m3 C staged two bytes a write and TMA-stored (N = 528: its
    # rows 16-byte aligned), persistent blocks reusing the staging tile.
    FP8_OUT="$SAMPLE_DIR/fp8_out.py"
    sed -e 's/C: f16\[/C: f8e4m3[/' -e 's/\.to(f16)/.to(f8e4m3)/' samples/fp8_gemm.py > "$FP8_OUT"
    for tool in memcheck racecheck synccheck; do
        sanitize "$tool" "$FP8_OUT" "M=300,N=528,K=256" --arch sm_90a \
            --const BM=128 BN=256 BK=128 --stages 4 --persistent
    done
else
    echo "sanitize: compute capability '${cc:-unknown}' is not 9.0; the sm_90a runs are skipped"
fi
echo "sanitize: $runs runs, $failed failed"
[ "$failed" = 0 ]
