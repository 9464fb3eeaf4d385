"""Thread-block clusters of two or four blocks along M on the sm_90a path (cluster=2, 4):
the schedule (empty barriers counting every block's consumers, B multicast, the cluster
barrier after the barriers' initialisation, the producer's tail), the PTX it becomes, the
launch shape, what the CPU executor and the mbarrier checker make of it, and the errors for
what it cannot take. ptxas runs on cluster kernels in tests/test_ptxas.py (HOPPER)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tilec.analysis.hazards import HazardError, check_schedule
from tilec.backend import tile_order
from tilec.backend.grid import cluster_group
from tilec.errors import TileConfigError
from tilec.families.tma import ALLOC, ARRIVE, CLUSTER_SYNC, WAIT
from tilec.families.tma_boxes import LOAD, tensor_map_box
from tilec.launch.binding import launch_cluster, launch_grid
from tilec.options import Options
from tilec.pipeline import run_pipeline

from .test_hopper import check_product
from .test_ptxas import SAMPLES, load_sample

TILE = dict(BM=128, BN=256, BK=64)


CLUSTERS = pytest.mark.parametrize("cluster", [2, 4])


def lowered(sample="matmul", dtype="f16", stages=3, persistent=False, cluster=2, **consts):
    kernel = load_sample(sample, dtype).lower(**{**TILE, **consts})
    return run_pipeline(kernel, Options(arch="sm_90a", stages=stages, cluster=cluster,
                                        persistent=persistent)).kernel


def ops_named(kernel, name):
    return [op for op in kernel.walk() if op.name == name]


@CLUSTERS
def test_the_schedule_shares_b_among_the_blocks(cluster):
    kernel = lowered(cluster=cluster)
    assert kernel.schedule.roles.cluster == cluster
    full, empty = ops_named(kernel, ALLOC)
    # 2 warpgroups x the cluster's blocks
    assert (full.attrs["count"], empty.attrs["count"]) == (1, 2 * cluster)
    loads = {op.attrs["tensor"]: op for op in ops_named(kernel, LOAD)}
    assert "multicast" not in loads["A"].attrs and loads["B"].attrs["multicast"] == cluster
    assert all(op.attrs["cluster"] == cluster for op in ops_named(kernel, ARRIVE))
    assert len(ops_named(kernel, CLUSTER_SYNC)) == 1
    producer = next(op for op in kernel.walk() if op.name == "ws.producer")
    tail = [op for op in producer.regions[0].ops if op.name == WAIT]
    assert len(tail) == 3  # one wait a stage after the producer's loop
    # The tensor map of B is one block's share of the box: 1/cluster of its 64 rows.
    assert tensor_map_box(kernel, "B") == (64, 64 // cluster, 128)
    assert tensor_map_box(kernel, "A") == (64, 128, 128)


def test_a_cluster_of_four_shares_whole_swizzle_atoms():
    """Each block loads a quarter of the shared tile's rows: B.T's 16-row tile (BN) would
    give each 4, half a swizzle atom; refused where B is sliced, naming the rule. Its pair's
    halves, and 32 rows in fours, are whole atoms."""
    from tilec.errors import TileError
    program = load_sample("matmul_bt", "f16")
    with pytest.raises(TileError) as info:
        program.compile(arch="sm_90a", stages=3, cluster=4, BM=64, BN=16, BK=64)
    assert "cluster=4 divides the 16 rows of B's shared tile into 4 shares of 4" in \
        info.value.message
    assert "a multiple of 32, or a smaller cluster" in str(info.value)
    program.compile(arch="sm_90a", stages=3, cluster=2, BM=64, BN=16, BK=64)
    kernel = program.compile(arch="sm_90a", stages=3, cluster=4, BM=64, BN=32, BK=64).kernel
    assert tensor_map_box(kernel, "B") == (64, 8, 128)


@CLUSTERS
def test_the_ptx_multicasts_meets_the_cluster_and_arrives_remotely(cluster):
    ptx = load_sample("matmul", "f16").ptx(arch="sm_90a", stages=3, cluster=cluster, **TILE)
    init = ptx.index("fence.mbarrier_init.release.cluster;")
    meet = ptx.index("barrier.cluster.arrive.release.aligned;")
    assert init < meet < ptx.index("barrier.cluster.wait.acquire.aligned;")
    multicasts = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.mbarrier::"
                            r"complete_tx::bytes\.multicast::cluster .*, %h\d+;", ptx)
    assert len(multicasts) == 4  # B's four slabs, each block its share of the rows
    assert all(line.endswith(("%h0;", "%h1;")) for line in multicasts)
    assert f"mov.b16 %h0, {(1 << cluster) - 1};" in ptx  # every block of the cluster
    assert "%cluster_ctarank" in ptx
    # Each of the two hand-back sites arrives on every other block's barrier.
    assert len(re.findall(r"mapa\.shared::cluster\.u32", ptx)) == 2 * (cluster - 1)
    assert len(re.findall(r"mbarrier\.arrive\.shared::cluster\.b64", ptx)) == \
        2 * (cluster - 1)


@CLUSTERS
def test_the_launch_groups_m_tiles_into_clusters(cluster):
    kernel = lowered(cluster=cluster)
    assert launch_cluster(kernel) == (cluster, 1, 1)
    # 5 M tiles round up to whole clusters (the blocks past M store nothing).
    assert launch_grid([5, 4], kernel) == (-(-5 // cluster) * cluster * 4, 1, 1)
    plain = run_pipeline(load_sample("matmul", "f16").lower(**TILE),
                         Options(arch="sm_90a", stages=3)).kernel
    assert launch_cluster(plain) is None and launch_grid([5, 4], plain) == (20, 1, 1)


@CLUSTERS
@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
@pytest.mark.parametrize("sample", ["matmul", "matmul_bt"])
def test_the_cpu_executor_computes_the_product(sample, persistent, cluster):
    check_product(sample, lowered(sample, BN=128, persistent=persistent, cluster=cluster),
                  np.random.default_rng(11))


@CLUSTERS
@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
def test_the_mbarrier_checker_accepts_the_cluster_protocol(persistent, cluster):
    check_schedule(lowered(persistent=persistent, cluster=cluster))


def test_a_persistent_pair_walks_pairs_of_m_tiles():
    """persistent + cluster=2: both blocks of a cluster number the same pairs of M tiles
    (cluster id, then every grid/2-th), each taking the M tile of its rank, so they go
    through the same ring iterations and every B stage they multicast is one both use; the
    grid is whole clusters, at most one a pair; the producer's waits for the peer's
    hand-backs come once, after the last tile, not after every tile."""
    kernel = lowered(persistent=True)
    assert kernel.schedule.roles.persistent and kernel.schedule.roles.cluster == 2
    assert launch_cluster(kernel) == (2, 1, 1)
    # 5 M tiles are 3 pairs; 3 x 4 pairs fit 66 clusters: 12 clusters of 2 blocks.
    assert launch_grid([5, 4], kernel, multiprocessors=132) == (24, 1, 1)
    # 33 x 8 tiles: 17 x 8 = 136 pairs for 66 clusters (132 SMs); an odd SM count drops one.
    assert launch_grid([33, 8], kernel, multiprocessors=132) == (132, 1, 1)
    assert launch_grid([33, 8], kernel, multiprocessors=131) == (130, 1, 1)
    # In fours: 33 M tiles are 9 clusters' worth a column, 72 for 33 clusters of 4 blocks;
    # no more than the device holds at once (GPCs whose SMs do not divide by 4).
    four = lowered(persistent=True, cluster=4)
    assert launch_grid([33, 8], four, multiprocessors=132) == (132, 1, 1)
    assert launch_grid([5, 4], four, multiprocessors=132) == (32, 1, 1)
    assert launch_grid([33, 8], four, multiprocessors=131) == (128, 1, 1)
    assert launch_grid([33, 8], four, multiprocessors=132, resident_clusters=30) == \
        (120, 1, 1)
    assert launch_grid([5, 4], four, multiprocessors=132, resident_clusters=30) == (32, 1, 1)
    # 0: the device cannot hold one; the launch asks anyway and the driver says why.
    assert launch_grid([33, 8], four, multiprocessors=132, resident_clusters=0) == \
        (132, 1, 1)
    ptx = load_sample("matmul", "f16").ptx(arch="sm_90a", stages=3, cluster=2,
                                           persistent=True, **TILE)
    producer = ptx[ptx.index("setmaxnreg.dec"):ptx.index("setmaxnreg.inc")]
    done = re.search(r"\$L_tiles_done_\d+:", producer).start()
    # The K loop's wait on the empty ring inside the tile loop, the three tail waits after.
    assert producer[:done].count("mbarrier.try_wait") == 1
    assert producer[done:].count("mbarrier.try_wait") == 3
    # Both roles number clusters: the block id halved (a shift) and the grid halved.
    assert ptx.count("%ctaid.x;") == ptx.count("%nctaid.x;") == 2


@pytest.mark.parametrize("cluster", [1, 4])
def test_a_persistent_launch_asks_how_many_clusters_the_device_holds(monkeypatch, cluster):
    """The launch's grid (tilec.kernel): in clusters, the loaded function's occupancy with
    the kernel's block and shared memory bounds the persistent clusters; alone, the SMs."""
    import tilec.runtime
    from types import SimpleNamespace
    from tilec.kernel import _launch_grid
    monkeypatch.setattr(tilec.runtime, "current_device",
                        lambda: SimpleNamespace(multiprocessor_count=132))
    asked = []

    class Function:
        def resident_clusters(self, block, shared_bytes, shape):
            asked.append((block, shared_bytes, shape))
            return 30

    compiled = load_sample("matmul", "f16").compile(arch="sm_90a", stages=3, persistent=True,
                                                    cluster=cluster, **TILE)
    grid = _launch_grid([33, 8], compiled, Function())
    if cluster == 1:
        assert grid == (132, 1, 1) and asked == []
        return
    assert grid == (120, 1, 1)
    assert asked == [((compiled.rendered.threads, 1, 1), compiled.rendered.smem_bytes,
                      (4, 1, 1))]


@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
def test_the_raster_group_counts_rows_of_tiles_not_pairs(persistent):
    """Grouped order over pairs of M tiles: raster_group=16 groups 8 pairs (16 rows of
    tiles, as without a cluster), not 16 pairs (32 rows: 13% more DRAM traffic at 4096^3)."""
    assert [cluster_group(g, 2) for g in (1, 2, 3, 8, 16)] == [1, 1, 2, 4, 8]
    assert [cluster_group(g, 4) for g in (1, 2, 3, 8, 16)] == [1, 1, 1, 2, 4]
    compiled = load_sample("matmul", "f16").compile(arch="sm_90a", stages=3, cluster=2,
                                                    persistent=persistent, raster_group=16,
                                                    **TILE)
    group_factors = re.findall(r"mul\.lo\.s32 %r\d+, %r\d+, (\d+);", compiled.ptx)
    assert "16" not in group_factors
    if not persistent:
        # grouped_coords: the tiles a group (gn x group), then the group's first row.
        assert group_factors.count("8") == 2
        return
    # Each role's group's first row (x group); the tiles a group come from the host, for
    # 33 x 8 tiles: 17 pairs of M tiles, groups of 8 pairs (8 x 8 tiles), the last 1 pair.
    assert group_factors.count("8") == 2
    values = tile_order.launch_values(compiled.kernel, [33, 8])
    assert (values["$tiles.group.d"], values["$tiles.last.d"]) == (64, 1)


def test_explain_says_how_the_cluster_walks_the_tiles():
    from tilec.tools.explain import explain, render_explanation
    compiled = load_sample("matmul", "f16").compile(arch="sm_90a", stages=3, cluster=2,
                                                    raster_group=8, **TILE)
    text = render_explanation(explain(compiled, ptxas=False))
    line = next(line for line in text.splitlines()
                if line.strip().startswith("cluster tiles"))
    assert "block r of cluster p takes M tile 2p + r" in line
    assert "4 a group (8 rows of tiles" in line
    assert "batch" not in line and "persistent" not in line


@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
def test_a_pair_half_past_m_keeps_the_m_mask_of_its_stores(persistent):
    """640 rows are 5 tiles of 128: the launch rounds them up to 3 pairs, so M divisible by
    BM no longer proves the stores in bounds; the sixth block's f32 stores need their M
    mask (without it they wrote past M: into the next batch, in a batched program). 768
    rows (3 whole pairs) and N keep no mask; without a cluster, 640 keeps none either."""
    def masks(cluster, m):
        kernel = load_sample("matmul", "f16").compile(
            arch="sm_90a", stages=3, cluster=cluster, persistent=persistent, M=m, N=1024,
            K=512, **TILE).kernel
        (store,) = [op for op in kernel.walk() if op.name == "tile.store"]
        return store.attrs["masked"]
    assert masks(2, 640) == [True, False]
    assert masks(2, 768) == masks(1, 640) == [False, False]
    # In fours, 768 rows (6 tiles) leave two blocks of the second cluster past M. 1024 (two
    # whole clusters) keeps the mask too: a launch's spec records the powers of two a size
    # divides up to 256 (MAX_DIVISOR), so the classes of shapes it compiles for stay few,
    # and 512 rows a cluster are past what it proves.
    assert masks(4, 768) == masks(4, 1024) == [True, False]


@CLUSTERS
def test_an_empty_barrier_counting_one_block_is_caught(cluster):
    """Counting only this block's consumers, a stage looks free before every consumer of
    the cluster has read it: in a pair the checker reports the refill racing the read; in
    a cluster of 4 the 8 hand-backs complete the phase four times over, and the producer's
    parity waits lose step with it: a deadlock."""
    kernel = lowered(cluster=cluster)
    _, empty = ops_named(kernel, ALLOC)
    empty.attrs["count"] = 2
    caught = "is refilled while consumer warpgroup" if cluster == 2 else "deadlock"
    with pytest.raises(HazardError, match=caught):
        check_schedule(kernel)


def _with_grid_line(old: str, new: str):
    from tilec.kernel import load_file
    source = SAMPLES / "matmul.py"
    text = source.read_text(encoding="utf-8")
    assert old in text
    return load_file(source, text=text.replace(old, new))["matmul"]


@CLUSTERS
def test_a_grid_pairing_n_tiles_shares_a(cluster) -> None:
    """``for n, m in grid(...)`` folds N tiles first: the cluster takes consecutive N tiles,
    whose A tile is one, so A is the tile multicast (B's moves along n)."""
    program = _with_grid_line("for m, n in grid(cdiv(M, BM), cdiv(N, BN)):",
                              "for n, m in grid(cdiv(N, BN), cdiv(M, BM)):")
    kernel = run_pipeline(program.lower(**{**TILE, "BN": 128}),
                          Options(arch="sm_90a", stages=3, cluster=cluster)).kernel
    loads = {op.attrs["tensor"]: op for op in ops_named(kernel, LOAD)}
    assert loads["A"].attrs["multicast"] == cluster and "multicast" not in loads["B"].attrs
    # 1/cluster of A's 128 rows a block
    assert tensor_map_box(kernel, "A") == (64, 128 // cluster, 128)
    check_schedule(kernel)
    check_product("matmul", kernel, np.random.default_rng(5))


def test_a_grid_where_both_tiles_move_along_the_pair_is_refused() -> None:
    """No tile to share: both operands' tiles move along m. Refused where the last operand
    is sliced, naming the axis."""
    from tilec.errors import TileError
    program = _with_grid_line("B[k : +BK, n * BN : +BN]", "B[k : +BK, (n + m) * BN : +BN]")
    program.compile(arch="sm_90a", stages=3, **TILE)  # without a cluster it compiles
    with pytest.raises(TileError) as info:
        program.compile(arch="sm_90a", stages=3, cluster=2, **TILE)
    assert "pairs the blocks of consecutive tiles along grid axis 0 (m)" in info.value.message
    assert "both operands' tiles move along that axis" in info.value.message
    source_line, caret = str(info.value).split("\n")[1:3]
    assert source_line[caret.index("^"):].startswith("B[k : +BK, (n + m) * BN : +BN]")


def test_cluster_needs_the_warp_specialized_path():
    with pytest.raises(TileConfigError, match="cluster=2 shares tiles"):
        load_sample("matmul", "f16").ptx(arch="sm_90", cluster=2)


@pytest.mark.parametrize("options, message", [
    (dict(cluster=3), "cluster must be one of"),
    (dict(cluster=8), "cluster must be one of"),
    (dict(cluster=2, blocks_per_sm=2), "cannot be combined with blocks_per_sm=2"),
    (dict(cluster=4, blocks_per_sm=2), "cluster=4 runs with one block per SM"),
])
def test_bad_cluster_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        Options(arch="sm_90a", **options)


# -- clusters along N too (cluster_n): A shared along each M row of the cluster ---------------

SHAPES_2D = pytest.mark.parametrize("cluster, cluster_n", [(1, 2), (2, 2), (4, 2), (2, 4)])


def lowered_2d(cluster, cluster_n, sample="matmul", persistent=False, **consts):
    kernel = load_sample(sample, "f16").lower(**{**TILE, "BN": 128, **consts})
    return run_pipeline(kernel, Options(arch="sm_90a", stages=3, cluster=cluster,
                                        cluster_n=cluster_n, persistent=persistent)).kernel


@SHAPES_2D
def test_a_two_dimensional_cluster_shares_both_operands(cluster, cluster_n):
    """The blocks of one N column share B (cluster of them, consecutive ranks), those of one
    M row share A (cluster_n of them, cluster ranks apart); a block's stage is filled by
    itself and the other blocks of its row and column, so each of its two warpgroups hands
    it back to all of them."""
    kernel = lowered_2d(cluster, cluster_n)
    roles = kernel.schedule.roles
    assert (roles.cluster, roles.cluster_n, roles.cluster_blocks) == \
        (cluster, cluster_n, cluster * cluster_n)
    full, empty = ops_named(kernel, ALLOC)
    assert (full.attrs["count"], empty.attrs["count"]) == (1, 2 * (cluster + cluster_n - 1))
    loads = {op.attrs["tensor"]: op.attrs for op in ops_named(kernel, LOAD)}
    assert loads["A"]["multicast"] == cluster_n
    assert loads["A"].get("multicast_stride", 1) == cluster
    if cluster > 1:
        assert loads["B"]["multicast"] == cluster and "multicast_stride" not in loads["B"]
    else:
        assert "multicast" not in loads["B"]
    for op in ops_named(kernel, ARRIVE):
        assert op.attrs.get("cluster", 1) == cluster and op.attrs["cluster_n"] == cluster_n
    assert tensor_map_box(kernel, "A") == (64, 128 // cluster_n, 128)
    assert tensor_map_box(kernel, "B") == (64, 64 // cluster, 128)
    assert launch_cluster(kernel) == (cluster * cluster_n, 1, 1)


@pytest.mark.parametrize("cluster, cluster_n, rank", [(4, 2, 5), (2, 4, 5), (1, 2, 1)])
def test_the_ptx_masks_each_operand_to_its_row_or_column(cluster, cluster_n, rank):
    """Rank r = m + cluster * n: B goes to the blocks of r's column (cluster consecutive
    ranks), A to those of its row (cluster_n ranks cluster apart), each block loading its
    share; the hand-backs go to every other block of the row and column. The masks and
    shares are worked out in PTX from %cluster_ctarank: checked here by running that
    arithmetic for one rank."""
    ptx = load_sample("matmul", "f16").ptx(arch="sm_90a", stages=3, cluster=cluster,
                                           cluster_n=cluster_n, **{**TILE, "BN": 128})
    peers = cluster + cluster_n - 2
    assert len(re.findall(r"mapa\.shared::cluster\.u32", ptx)) == 2 * peers
    row = sum(1 << (rank % cluster + j * cluster) for j in range(cluster_n))
    column = ((1 << cluster) - 1) << (rank - rank % cluster)
    masks = _multicast_masks(ptx, rank)
    assert masks["A"] == row
    assert masks.get("B") == (column if cluster > 1 else None)


def _multicast_masks(ptx: str, rank: int) -> dict:
    """Each operand's multicast mask for the block of cluster ``rank``: the PTX from the
    rank's read to the operand's first load, evaluated for that rank (:func:`_step`)."""
    lines = ptx.splitlines()
    masks = {}
    for i, line in enumerate(lines):
        if ".multicast::cluster [" not in line:
            continue
        tensor = "A" if "A_tensor_map" in _map_of(lines, line) else "B"
        if tensor in masks:
            continue
        start = max(j for j in range(i) if "%cluster_ctarank" in lines[j])
        regs: dict = {}
        for text in lines[start:i]:
            _step(text.strip(), regs, rank)
        masks[tensor] = regs.get(line.rsplit(",", 1)[1].strip(" ;"))
    return masks


def _map_of(lines, line) -> str:
    """The tensor map a load reads: the cvta'd param its %rd register holds."""
    reg = re.search(r"\[(%rd\d+), \{", line).group(1)
    for text in lines:
        if re.match(rf"\s*mov\.u64 {re.escape(reg)}, (\w+);", text):
            return text
    return ""


def _step(text: str, regs: dict, rank: int) -> None:
    """One integer instruction of the share and mask arithmetic, on known registers."""
    match = re.match(r"([\w.]+) (%\w+), (.*);", text)
    if match is None:
        return
    name, dest, args = match.groups()
    if args == "%cluster_ctarank":
        regs[dest] = rank
        return
    values = [regs.get(a) if a.startswith("%") else int(a) if a.lstrip("-").isdigit()
              else None for a in (arg.strip() for arg in args.split(","))]
    ops = {"shr.s32": lambda a, b: a >> b, "and.b32": lambda a, b: a & b,
           "sub.s32": lambda a, b: a - b, "mul.lo.s32": lambda a, b: a * b,
           "shl.b32": lambda a, b: a << b, "mov.b16": lambda a: a,
           "cvt.u16.u32": lambda a: a & 0xFFFF}
    if name in ops and None not in values:
        regs[dest] = ops[name](*values)


@SHAPES_2D
def test_the_launch_rounds_both_axes_to_whole_clusters(cluster, cluster_n):
    kernel = lowered_2d(cluster, cluster_n)
    # 5 x 3 tiles: M to whole clusters along M, N along N.
    whole_m, whole_n = -(-5 // cluster) * cluster, -(-3 // cluster_n) * cluster_n
    assert launch_grid([5, 3], kernel) == (whole_m * whole_n, 1, 1)
    persistent = lowered_2d(cluster, cluster_n, persistent=True)
    blocks = cluster * cluster_n
    clusters = min(whole_m * whole_n // blocks, 132 // blocks)
    assert launch_grid([5, 3], persistent, multiprocessors=132) == (clusters * blocks, 1, 1)
    values = tile_order.launch_values(persistent, [5, 3])
    # Grouped order over clusters: 3 M units (or fewer) a group, across the N units.
    assert values["$tiles.group.d"] == -(-3 // cluster_n) * tile_order.group_rows(persistent)


@SHAPES_2D
@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
@pytest.mark.parametrize("sample", ["matmul", "matmul_bt"])
def test_the_cpu_executor_computes_a_two_dimensional_cluster(sample, persistent, cluster,
                                                            cluster_n):
    check_product(sample, lowered_2d(cluster, cluster_n, sample, persistent),
                  np.random.default_rng(13))


@SHAPES_2D
@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
def test_the_mbarrier_checker_accepts_the_two_dimensional_protocol(persistent, cluster,
                                                                    cluster_n):
    check_schedule(lowered_2d(cluster, cluster_n, persistent=persistent))


def test_an_empty_barrier_counting_only_the_column_is_caught():
    """A 2x2 cluster's stage is filled by 3 blocks: counting only the column's 2 (as a
    cluster along M alone does), the stage looks free before the row's peer has read it."""
    kernel = lowered_2d(2, 2)
    _, empty = ops_named(kernel, ALLOC)
    empty.attrs["count"] = 2 * 2
    with pytest.raises(HazardError):
        check_schedule(kernel)


def test_a_cluster_past_n_keeps_the_n_mask_of_its_stores():
    """1152 columns are 9 tiles of 128: clusters of 2 along N round them up to 10, so the
    tenth block's stores need their N mask; 1024 (8 tiles) needs none."""
    def masks(n):
        kernel = load_sample("matmul", "f16").compile(
            arch="sm_90a", stages=3, cluster=2, cluster_n=2, M=1024, N=n, K=512,
            **{**TILE, "BN": 128}).kernel
        (store,) = [op for op in kernel.walk() if op.name == "tile.store"]
        return store.attrs["masked"]
    assert masks(1152) == [False, True]
    assert masks(1024) == [False, False]


def test_a_grid_where_both_tiles_move_along_n_is_refused_a_cluster_along_n() -> None:
    from tilec.errors import TileError
    program = _with_grid_line("A[m * BM : +BM, k : +BK]", "A[(m + n) * BM : +BM, k : +BK]")
    program.compile(arch="sm_90a", stages=3, cluster=2, **TILE)  # B still shared along M
    with pytest.raises(TileError) as info:
        program.compile(arch="sm_90a", stages=3, cluster=2, cluster_n=2, **TILE)
    assert "cluster_n=2 pairs the blocks of consecutive tiles along grid axis 1 (n)" in \
        info.value.message


def test_explain_names_the_two_dimensional_cluster():
    from tilec.tools.explain import explain, render_explanation
    compiled = load_sample("matmul", "f16").compile(arch="sm_90a", stages=3, cluster=4,
                                                    cluster_n=2, raster_group=8,
                                                    **{**TILE, "BM": 64, "BN": 128})
    text = render_explanation(explain(compiled, ptxas=False))
    assert "4x2 blocks (4 along M, 2 along N)" in text
    assert "A's tile (the product's A) among the blocks of one M row" in text
    assert "B's tile (the product's B) among the blocks of one N column" in text
    assert "takes M tile 4P + r % 4 and N tile 2Q + r / 4" in text


@pytest.mark.parametrize("options, message", [
    (dict(cluster=4, cluster_n=4), "clusters of 16 blocks; at most 8"),
    (dict(cluster_n=3), "cluster_n must be one of"),
    (dict(cluster_n=2, blocks_per_sm=2), "cluster=1 and cluster_n=2 run with one block"),
    (dict(cluster_n=2, persistent=True, stream_k=True), "and no cluster"),
])
def test_bad_two_dimensional_cluster_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        Options(arch="sm_90a", **options)
