"""The autotuner on the CPU: the search space, pruning with tiling's own checks, the error
when nothing fits, and whole tuning runs with a fake prepare and a fake timer, cached on
disk. The GPU test at the end tunes a real kernel with CUDA events."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.tools.autotune import (FINAL_ROUNDS, NoFittingConfigError, autotune, config_problem,
                            cuda_event_timer, describe, prune, search_space)
from tilec.caching.disk import DiskCache
from tilec.errors import TileConfigError
from tilec.kernel import load_file
from tilec.options import ARCHS, Options
from tilec.passes import tiling
from tilec.runtime import driver

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def matmul():
    return load_file(SAMPLES / "matmul.py")["matmul"]


def config(BM=128, BN=128, BK=32, warps=None, stages=3, swizzle="auto",  # noqa: N803
           raster_group=8) -> dict:
    return {"BM": BM, "BN": BN, "BK": BK, "warps": warps, "stages": stages,
            "swizzle": swizzle, "raster_group": raster_group}


# -- the space ------------------------------------------------------------------------------

def test_search_space_is_the_product_in_order():
    space = search_space(BM=(64, 128), BN=(128,), BK=(32,), stages=(2, 3),
                         swizzle=("auto", "off"))
    assert len(space) == 8
    assert space[0] == config(BM=64, stages=2)
    assert space[1] == config(BM=64, stages=2, swizzle="off")
    assert space[-1] == config(BM=128, stages=3, swizzle="off")


def test_search_space_takes_single_values_and_drops_repeats():
    space = search_space(BM=128, BN=[128, 128], BK=32, warps=(2, 4), stages=3)
    assert space == [config(warps=(2, 4))]
    space = search_space(BM=(64,), BN=(64,), BK=(32,), warps=[None, [2, 2]], stages=(3,))
    assert [c["warps"] for c in space] == [None, (2, 2)]
    with pytest.raises(ValueError, match="no choices for stages"):
        search_space(stages=())


def test_describe_is_one_readable_line():
    assert describe(config(warps=(2, 4))) == \
        "BM=128 BN=128 BK=32 warps=2x4 stages=3 swizzle=auto raster_group=8"
    assert describe({"stages": 2, "BM": 64}) == "BM=64 stages=2"


# -- pruning --------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg, arch, reason", [
    # 4 stages of (256x64 + 64x256) f16 tiles: 262144 bytes.
    (config(BM=256, BN=256, BK=64, stages=4), "sm_86",
     "4 stages of 256x64 and 64x256 tiles need 262144 bytes of shared memory; sm_86 allows "
     "101376"),
    (config(BM=128, BN=128, BK=64, stages=4), "sm_86",
     "4 stages of 128x64 and 64x128 tiles need 131072 bytes of shared memory; sm_86 allows "
     "101376"),
    (config(warps=(1, 1)), "sm_80",
     "a 128x128 warp tile needs about 680 registers per thread, more than 255"),
    (config(BM=64, warps=(3, 1)), "sm_80", "the 64x128 block does not divide among 3x1 warps"),
    (config(BK=24), "sm_80", "BK=24 is not a multiple of the mma k (16)"),
    (config(BK=40), "sm_90", "BK=40 is not a multiple of the mma k (16)"),
    (config(BM=256, BN=256, warps=(8, 8)), "sm_80",
     "8x8 warps make 2048 threads, more than 1024"),
    (config(BM=64, BN=64, warps=(8, 1)), "sm_80",
     "each warp's 8x64 tile must be a multiple of 16x16 (m16n8k16 instructions, B loaded two "
     "n8 tiles at a time)"),
    (config(stages=0), "sm_80", "stages must be an integer >= 1, got 0"),
    (config(swizzle="on"), "sm_80", "swizzle must be 'auto', 'off' or a Swizzle, got 'on'"),
    (config(BM=0), "sm_80", "BM must be a positive integer, got 0"),
])
def test_prune_gives_tilings_reason(cfg, arch, reason):
    kept, pruned = prune([cfg], "f16", arch)
    assert kept == [] and pruned == [(cfg, reason)]


def test_shared_memory_depends_on_the_arch():
    cfg = config(BM=128, BN=128, BK=64, stages=4)  # 131072 bytes
    assert config_problem(cfg, "f16", "sm_80") is None
    assert config_problem(cfg, "f16", "sm_90") is None
    assert "sm_86 allows" in config_problem(cfg, "f16", "sm_86")


def test_prune_checks_each_dtype_against_its_product_kind():
    assert config_problem(config(), "bf16", "sm_80") is None
    assert config_problem(config(), "f32", "sm_80") is None  # FFMA: k step 4, not 16
    assert config_problem(config(BK=10), "f32", "sm_80") == \
        "BK=10 is not a multiple of the simt k (4)"
    # f32 stages take twice the bytes: 3 stages of 128x64 + 64x128 f32 exceed sm_86's limit.
    assert "196608 bytes of shared memory" in config_problem(config(BK=64), "f32", "sm_86")
    assert config_problem(config(BK=64), "f16", "sm_86") is None


def test_prune_checks_f32_against_the_kind_the_fixed_options_pick():
    # BK=12 is whole FFMA k-steps (4) but not whole tf32 k-steps (8).
    tf32 = {"f32_math": "tf32", "stages": 3}
    assert config_problem(config(BK=12), "f32", "sm_80") is None
    assert config_problem(config(BK=12), "f32", "sm_80", tf32) == \
        "BK=12 is not a multiple of the tf32 k (8)"
    # A 64x16 warp tile is whole m16n8 tiles for tf32; FFMA needs 32 columns a warp.
    narrow = config(BM=64, BN=32, BK=16, warps=(1, 2))
    assert "multiple of 16x32" in config_problem(narrow, "f32", "sm_80")
    assert config_problem(narrow, "f32", "sm_80", tf32) is None
    kept, pruned = prune([config(BK=12), narrow], "f32", "sm_80", tf32)
    assert kept == [narrow] and [c for c, _ in pruned] == [config(BK=12)]


def test_prune_keeps_order_and_splits_the_space():
    space = [config(BK=24), config(), config(warps=(1, 1)), config(BM=64)]
    kept, pruned = prune(space, "f16", "sm_80")
    assert kept == [config(), config(BM=64)]
    assert [c for c, _ in pruned] == [config(BK=24), config(warps=(1, 1))]


@pytest.mark.parametrize("arch", list(ARCHS))
def test_prune_agrees_with_the_tiling_pass(arch):
    """Whatever prune keeps, tiling accepts; whatever it prunes, tiling refuses with the
    same message."""
    function = matmul()
    space = search_space(BM=(32, 64, 128, 256), BN=(64, 128, 256), BK=(16, 48, 64),
                         warps=[None, (1, 1), (2, 2), (4, 2), (8, 4)], stages=(2, 4))
    kept, pruned = prune(space, "f16", arch)
    assert kept and pruned
    for cfg in space:
        kernel = function.lower(BM=cfg["BM"], BN=cfg["BN"], BK=cfg["BK"])
        options = Options(arch=arch, warps=cfg["warps"], stages=cfg["stages"])
        problem = config_problem(cfg, "f16", arch)
        if problem is None:
            tiling.run(kernel, options)
        else:
            with pytest.raises(TileConfigError) as info:
                tiling.run(kernel, options)
            assert info.value.message == problem


# -- tuning runs with a fake prepare and timer -----------------------------------------------

class FakeLaunch:
    def __init__(self, settings: dict):
        self.settings = settings

    def __call__(self) -> None:
        pass


class Harness:
    """A real tile function whose ``prepare`` records its calls and compiles on the CPU
    (so options and constants are checked as the real one checks them), and a timer that
    gives each configuration a deterministic time."""

    def __init__(self, monkeypatch, fail=None):
        self.function = matmul()
        self.prepared: list[dict] = []
        self.fail = fail or (lambda settings: None)
        monkeypatch.setattr(self.function, "prepare", self.prepare)

    def prepare(self, *args, **kwargs):
        self.prepared.append(kwargs)
        problem = self.fail(kwargs)
        if problem:
            raise problem
        params = {p.name for p in self.function.signature.params}
        self.function.compile(**{k: v for k, v in kwargs.items() if k not in params})
        return FakeLaunch(kwargs)

    @staticmethod
    def timer(launch: FakeLaunch) -> float:
        s = launch.settings
        # Fastest: BM=128, BN=128, stages=3.
        return 1.0 + abs(s["BM"] - 128) / 64 + abs(s["BN"] - 128) / 128 \
            + abs(s["stages"] - 3) / 10


def arrays(m=256, n=256, k=64):
    return (np.zeros((m, k), np.float16), np.zeros((k, n), np.float16),
            np.zeros((m, n), np.float32))


SPACE = search_space(BM=(64, 128), BN=(64, 128, 256), BK=(32,), stages=(2, 3))


def test_autotune_picks_the_fastest_and_caches_it(monkeypatch, tmp_path, capsys):
    harness = Harness(monkeypatch)
    cache = DiskCache(tmp_path)
    best = autotune(harness.function, arrays(), SPACE, timer=harness.timer, arch="sm_80",
                    cache=cache)
    assert best == config(BM=128, BN=128, stages=3)
    assert len(harness.prepared) == len(SPACE)
    assert all(p["arch"] == "sm_80" for p in harness.prepared)

    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "autotune matmul on sm_80: timing 12 configurations (0 pruned)"
    assert lines[1] == ("autotune matmul [1/12] BM=64 BN=64 BK=32 warps=auto stages=2 "
                        "swizzle=auto raster_group=8: 2.6000 ms")
    assert lines[12].startswith("autotune matmul [12/12] BM=128 BN=256 ")
    assert lines[13] == ("autotune matmul: best BM=128 BN=128 BK=32 warps=auto stages=3 "
                         "swizzle=auto raster_group=8 (1.0000 ms)")

    stored = [p for p in (tmp_path / "tuning").iterdir()]
    assert len(stored) == 1
    result = cache.get_tuning(stored[0].stem)
    assert result["best"] == best and result["time_ms"] == 1.0
    assert len(result["timed"]) == 12 and result["program"] == "matmul"
    assert (result["arch"], result["dtype"]) == ("sm_80", "f16")

    # The same program, shape class, dtype, arch and space: nothing is compiled or timed.
    harness.prepared.clear()
    again = autotune(harness.function, arrays(), SPACE, timer=harness.timer, arch="sm_80",
                     cache=cache)
    assert again == best and harness.prepared == []
    assert capsys.readouterr().err == ("autotune matmul: cached best BM=128 BN=128 BK=32 "
                                       "warps=auto stages=3 swizzle=auto raster_group=8 "
                                       "(1.0000 ms)\n")


@pytest.mark.parametrize("changed", [
    {"shapes": (1024, 256, 64)},  # M in another power-of-two class
    {"shapes": (255, 256, 64)},  # the same class, but M no longer divides by the tiles
    {"arch": "sm_90"},
    {"space": SPACE[:6]},
    {"kwargs": {"mma_order": "m"}},
], ids=["size", "divisibility", "arch", "space", "options"])
def test_each_part_of_the_key_separates_results(monkeypatch, tmp_path, changed):
    harness = Harness(monkeypatch)
    cache = DiskCache(tmp_path)
    autotune(harness.function, arrays(), SPACE, timer=harness.timer, arch="sm_80",
             cache=cache, progress=False)
    harness.prepared.clear()
    space = changed.get("space", SPACE)
    autotune(harness.function, arrays(*changed.get("shapes", (256, 256, 64))), space,
             timer=harness.timer, arch=changed.get("arch", "sm_80"), cache=cache,
             kwargs=changed.get("kwargs"), progress=False)
    # Every configuration timed afresh (the finalists prepared once more).
    assert len({repr(sorted(p.items())) for p in harness.prepared}) == len(space)
    assert len(list((tmp_path / "tuning").iterdir())) == 2


def test_a_final_round_ranks_the_close_ones_by_their_median(monkeypatch, tmp_path, capsys):
    """BM=128 BN=128 stages=2 looks fastest in the sweep (its first timing caught a cool
    GPU) but is slower in every later turn; the final round picks stages=3."""
    harness = Harness(monkeypatch)
    timings: dict[str, list[float]] = {}

    def timer(launch: FakeLaunch) -> float:
        s = launch.settings
        seen = timings.setdefault(describe({k: s[k] for k in s if k != "arch"}), [])
        fast_once = (s["BM"], s["BN"], s["stages"]) == (128, 128, 2) and not seen
        ms = 0.98 if fast_once else 1.03 if s["stages"] == 2 else harness.timer(launch)
        seen.append(ms)
        return ms

    best = autotune(harness.function, arrays(), SPACE, timer=timer, arch="sm_80",
                    cache=DiskCache(tmp_path))
    assert best == config(BM=128, BN=128, stages=3)
    err = capsys.readouterr().err
    assert ("final round, 2 configurations within 5% of the best, 3 turns each") in err
    finalists = {k: v for k, v in timings.items() if len(v) > 1}
    assert sorted(len(v) for v in finalists.values()) == [1 + FINAL_ROUNDS] * 2
    stored = DiskCache(tmp_path).get_tuning(next((tmp_path / "tuning").iterdir()).stem)
    assert [entry["time_ms"] for entry in stored["final"]] == [1.03, 1.0]
    assert stored["time_ms"] == 1.0


def test_no_final_round_without_a_close_second(monkeypatch, tmp_path, capsys):
    harness = Harness(monkeypatch)
    autotune(harness.function, arrays(), SPACE, timer=harness.timer, arch="sm_80",
             cache=DiskCache(tmp_path))
    assert "final round" not in capsys.readouterr().err
    assert len(harness.prepared) == len(SPACE)


def test_same_shape_class_reuses_the_result(monkeypatch, tmp_path):
    harness = Harness(monkeypatch)
    cache = DiskCache(tmp_path)
    autotune(harness.function, arrays(1024), SPACE, timer=harness.timer, arch="sm_80",
             cache=cache, progress=False)
    harness.prepared.clear()
    # 768 rounds up to 1024 and, like 1024, divides by every power of two up to 256.
    autotune(harness.function, arrays(768), SPACE, timer=harness.timer, arch="sm_80",
             cache=cache, progress=False)
    assert harness.prepared == []


def test_pruned_configurations_are_never_compiled(monkeypatch, tmp_path, capsys):
    harness = Harness(monkeypatch)
    space = search_space(BM=(128, 256), BN=(128, 256), BK=(64,), stages=(3,))
    best = autotune(harness.function, arrays(), space, timer=harness.timer, arch="sm_86",
                    cache=DiskCache(tmp_path))
    # Only 128x128 fits sm_86's shared memory with 3 stages of BK=64 (98304 bytes).
    assert [p["BM"] for p in harness.prepared] == [128]
    assert best["BM"] == 128
    assert "timing 1 configurations (3 pruned)" in capsys.readouterr().err


def test_nothing_fits_lists_every_configuration_and_why(monkeypatch, tmp_path):
    harness = Harness(monkeypatch)
    space = [config(BM=256, BN=256, BK=64, stages=4), config(BK=24), config(warps=(1, 1))]
    with pytest.raises(NoFittingConfigError) as info:
        autotune(harness.function, arrays(), space, timer=harness.timer, arch="sm_86",
                 cache=DiskCache(tmp_path))
    assert harness.prepared == []
    text = str(info.value)
    assert text.startswith("config error: no configuration in the autotune space fits "
                           "'matmul' on sm_86 (f16):\n")
    assert ("  BM=256 BN=256 BK=64 warps=auto stages=4 swizzle=auto raster_group=8: 4 stages "
            "of 256x64 and 64x256 tiles need 262144 bytes of shared memory; sm_86 allows "
            "101376") in text
    assert "  BM=128 BN=128 BK=24 warps=auto stages=3 swizzle=auto raster_group=8: BK=24 is " \
        "not a multiple of the mma k (16)" in text
    assert "warps=1x1 stages=3 swizzle=auto raster_group=8: a 128x128 warp tile needs" in text
    assert [c for c, _ in info.value.rejected] == space
    assert isinstance(info.value, TileConfigError)


def test_configurations_failing_later_are_skipped_and_reported(monkeypatch, tmp_path, capsys):
    def fail(settings):
        if settings["BN"] == 128:
            return TileConfigError("the fragments pass cannot map this epilogue")
        if settings["BN"] == 256:
            return driver.CudaError(701, "cuLaunchKernel")
        return None
    harness = Harness(monkeypatch, fail)
    cache = DiskCache(tmp_path)
    best = autotune(harness.function, arrays(), SPACE, timer=harness.timer, arch="sm_80",
                    cache=cache)
    assert best == config(BM=128, BN=64, stages=3)
    err = capsys.readouterr().err
    assert ("[3/12] BM=64 BN=128 BK=32 warps=auto stages=2 swizzle=auto raster_group=8: "
            "failed: the fragments pass cannot map this epilogue") in err
    assert "[5/12] BM=64 BN=256 BK=32 warps=auto stages=2 swizzle=auto raster_group=8: " \
        "failed: CudaError: cuLaunchKernel failed" in err
    result = cache.get_tuning(next((tmp_path / "tuning").iterdir()).stem)
    assert len(result["failed"]) == 8 and len(result["timed"]) == 4


def test_everything_failing_raises_with_the_reasons(monkeypatch, tmp_path):
    harness = Harness(monkeypatch, lambda s: TileConfigError(f"no BN={s['BN']} today"))
    space = [config(BK=24), config(), config(BN=64)]
    with pytest.raises(NoFittingConfigError) as info:
        autotune(harness.function, arrays(), space, timer=harness.timer, arch="sm_80",
                 cache=DiskCache(tmp_path), progress=False)
    reasons = dict((describe(c), r) for c, r in info.value.rejected)
    assert reasons[describe(config(BK=24))] == "BK=24 is not a multiple of the mma k (16)"
    assert reasons[describe(config())] == "no BN=128 today"
    assert reasons[describe(config(BN=64))] == "no BN=64 today"
    assert not (tmp_path / "tuning").exists()


@pytest.mark.parametrize("bad", [float("nan"), 0.0, -1.0, float("inf")])
def test_a_timer_giving_no_time_fails_that_configuration(monkeypatch, tmp_path, bad):
    harness = Harness(monkeypatch)

    def timer(launch):
        return bad if launch.settings["BM"] == 128 else harness.timer(launch)
    best = autotune(harness.function, arrays(), SPACE, timer=timer, arch="sm_80",
                    cache=DiskCache(tmp_path), progress=False)
    assert best["BM"] == 64


def test_progress_off_writes_nothing(monkeypatch, tmp_path, capsys):
    harness = Harness(monkeypatch)
    autotune(harness.function, arrays(), SPACE, timer=harness.timer, arch="sm_80",
             cache=DiskCache(tmp_path), progress=False)
    assert capsys.readouterr().err == ""


def test_fixed_arguments_reach_every_compile(monkeypatch, tmp_path):
    harness = Harness(monkeypatch)
    space = search_space(BM=(64, 128), BN=(128,), BK=(32,), stages=(3,))
    autotune(harness.function, arrays()[:2], space, timer=harness.timer, arch="sm_80",
             cache=DiskCache(tmp_path), progress=False,
             kwargs={"C": arrays()[2], "mma_order": "m"})
    assert all(p["mma_order"] == "m" and "C" in p for p in harness.prepared)


def test_a_space_without_the_block_tile_uses_the_programs_defaults(monkeypatch, tmp_path):
    harness = Harness(monkeypatch)
    best = autotune(harness.function, arrays(), [{"stages": 2}, {"stages": 3}],
                    timer=harness.timer, arch="sm_80", cache=DiskCache(tmp_path),
                    progress=False, kwargs={"BK": 64})
    assert best == {"BM": 128, "BN": 128, "BK": 64, "stages": 3}
    assert [p["BK"] for p in harness.prepared] == [64, 64]


@pytest.mark.parametrize("space, kwargs, message", [
    ([], None, "the autotune space is empty"),
    ([config()], {"stages": 2}, "stages given both in the space and in kwargs"),
    ([{**config(), "TILE": 3}], None, "'matmul' has no constant or option TILE"),
    ([config()], {"arch": "sm_86"}, "arch='sm_80' and kwargs arch='sm_86' disagree"),
])
def test_malformed_requests_are_refused(monkeypatch, tmp_path, space, kwargs, message):
    harness = Harness(monkeypatch)
    with pytest.raises(ValueError, match=message):
        autotune(harness.function, arrays(), space, timer=harness.timer, arch="sm_80",
                 cache=DiskCache(tmp_path), kwargs=kwargs)
    assert harness.prepared == []


def test_a_stored_result_outside_the_space_is_tuned_again(monkeypatch, tmp_path):
    harness = Harness(monkeypatch)
    cache = DiskCache(tmp_path)
    autotune(harness.function, arrays(), SPACE, timer=harness.timer, arch="sm_80",
             cache=cache, progress=False)
    path = next((tmp_path / "tuning").iterdir())
    result = cache.get_tuning(path.stem)
    cache.put_tuning(path.stem, {**result, "best": config(BM=512)})
    harness.prepared.clear()
    best = autotune(harness.function, arrays(), SPACE, timer=harness.timer, arch="sm_80",
                    cache=cache, progress=False)
    assert best == config(BM=128, BN=128, stages=3) and len(harness.prepared) == len(SPACE)
    assert cache.get_tuning(path.stem)["best"]["BM"] == 128


# -- the CUDA event timer, with a fake clock -------------------------------------------------

class FakeClock:
    """A launch that advances a clock, and an Event class standing in for driver.Event
    whose events read that clock."""

    def __init__(self, durations, stream):
        self.now = 0.0
        self.durations = iter(durations)
        self.launches = 0
        self.stream = stream  # events must be recorded on the launch's stream
        self.streams = []
        clock = self

        class Event:
            def __init__(self):
                self.at = None

            def record(self, stream=None):
                clock.streams.append(stream)
                self.at = clock.now

            @staticmethod
            def elapsed_ms(start, end):
                return end.at - start.at
        self.Event = Event

    def __call__(self):
        self.launches += 1
        self.now += next(self.durations)


def test_event_timer_warms_up_then_takes_the_median(monkeypatch):
    # Three warm-up launches (slow: not counted), then five timed ones.
    clock = FakeClock([100.0, 50.0, 20.0, 3.0, 1.0, 9.0, 2.0, 4.0], stream="s1")
    monkeypatch.setattr(driver, "Event", clock.Event)
    assert cuda_event_timer(clock, warmup=3, repeat=5) == 3.0
    assert clock.launches == 8
    assert clock.streams == ["s1"] * 10
    with pytest.raises(ValueError, match="repeat"):
        cuda_event_timer(clock, repeat=0)


def test_autotune_times_with_cuda_events_by_default(monkeypatch, tmp_path):
    durations = {64: 2.0, 128: 1.5}
    state = {"now": 0.0}

    class Event:
        def record(self, stream=None):
            self.at = state["now"]

        @staticmethod
        def elapsed_ms(start, end):
            return end.at - start.at
    monkeypatch.setattr(driver, "Event", Event)
    function = matmul()

    def prepare(*args, **kwargs):
        def launch():
            state["now"] += durations[kwargs["BM"]]
        return launch
    monkeypatch.setattr(function, "prepare", prepare)
    space = search_space(BM=(64, 128), BN=(128,), BK=(32,), stages=(3,))
    best = autotune(function, arrays(), space, arch="sm_80", cache=DiskCache(tmp_path),
                    progress=False)
    assert best["BM"] == 128
    result = DiskCache(tmp_path).get_tuning(next((tmp_path / "tuning").iterdir()).stem)
    assert [t["time_ms"] for t in result["timed"]] == [2.0, 1.5]


# -- on a GPU -------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not driver.has_gpu(), reason="needs an NVIDIA GPU")
def test_autotune_on_the_gpu(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    function = matmul()
    a = torch.randn(512, 256, device="cuda").half()
    b = torch.randn(256, 512, device="cuda").half()
    c = torch.zeros(512, 512, device="cuda")
    space = search_space(BM=(64, 128), BN=(128,), BK=(32, 64), stages=(2, 3))
    best = autotune(function, (a, b, c), space, cache=DiskCache(tmp_path))
    assert best in space
    err = capsys.readouterr().err
    assert err.count(" ms\n") >= len(space)
    c.fill_(float("nan"))
    function(a, b, c, **best)
    torch.cuda.synchronize()
    assert torch.allclose(c.double(), a.double() @ b.double(), rtol=1e-3, atol=1e-2)
    assert DiskCache(tmp_path).get_tuning(next((tmp_path / "tuning").iterdir()).stem)
