"""The disk cache: stable keys, plain-file entries read back exactly, corrupt entries
discarded as misses, atomic writes that concurrent processes cannot corrupt."""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilec.backend.abi import I32_PARAM, POINTER, AbiParam
from tilec.backend.ptx import Rendered
from tilec.caching.disk import (CacheEntryError, CachedEntry, DiskCache, canonical_json,
                         default_cache_dir, options_from_json, to_json_value)
from tilec.compiler import COMPILER_VERSION, metadata_for
from tilec.kernel import load_file
from tilec.target.layout import Swizzle
from tilec.options import Options, Spec, TensorSpec

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
ABI = (AbiParam("A_ptr", POINTER, "A", "ptr"), AbiParam("A_stride0", I32_PARAM, "A", "stride", 0),
       AbiParam("dim_M", I32_PARAM, "M", "symbol"))
OPTIONS = Options(arch="sm_90", stages=4, warps=(2, 4), swizzle=Swizzle(3, 3, 3),
                  disable=("swizzle",),
                  spec=Spec((("A", TensorSpec(1, 8)), ("B", TensorSpec(None, 1))),
                            (("K", 64), ("M", 128))))
# The smallest PTX the metadata below describes (get() checks it against the metadata).
PTX = ("//\n// test kernel\n.version 8.0\n.target sm_90\n"
       ".extern .shared .align 128 .b8 tilec_smem[];\n"
       ".visible .entry k(\n\t.param .u64 A_ptr,\n\t.param .u32 A_stride0,\n"
       "\t.param .u32 dim_M\n)\n.maxntid 128, 1, 1\n{ ret; }\n")


def metadata(**changes) -> dict:
    meta = {"entry": "k", "threads": 128, "smem_bytes": 49152, "abi": list(ABI),
            "options": OPTIONS}
    meta.update(changes)
    return meta


@pytest.fixture
def cache(tmp_path) -> DiskCache:
    return DiskCache(tmp_path / "cache")


def key_of(cache: DiskCache, **changes) -> str:
    args = {"source_key": "src", "consts": {"BM": 128, "BN": 64}, "options": Options()}
    args.update(changes)
    return cache.key_for(**args)


# -- directory and keys ---------------------------------------------------------------------

def test_default_directory_order(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "explicit"
    assert DiskCache().directory == tmp_path / "explicit"
    monkeypatch.delenv("TILEC_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "xdg" / "tilec"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # invalid per the XDG spec
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "tilec"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "tilec"


def test_default_version_is_the_compilers(cache):
    assert cache.version == COMPILER_VERSION


def test_options_serialise_deterministically_and_round_trip():
    text = canonical_json(OPTIONS)
    assert '"swizzle":{"__type__":"Swizzle","base":3,"bits":3,"shift":3}' in text
    assert '"warps":[2,4]' in text
    assert options_from_json(json.loads(text)) == OPTIONS
    assert options_from_json(to_json_value(Options())) == Options()


def test_key_is_stable_across_processes(cache):
    key = key_of(cache, options=OPTIONS)
    code = ("from tilec.caching.disk import DiskCache; from tests.test_cache import OPTIONS; "
            "print(DiskCache('unused').key_for('src', {'BN': 64, 'BM': 128}, OPTIONS))")
    root = Path(__file__).resolve().parent.parent
    for seed in ("1", "2"):  # str hashes differ between these processes
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, check=True,
                             capture_output=True, text=True).stdout.strip()
        assert out == key
    assert len(key) == 64 and int(key, 16) >= 0


@pytest.mark.parametrize("changes", [
    {"source_key": "other"},
    {"consts": {"BM": 128, "BN": 128}},
    {"consts": {"BM": 128, "BN": 64, "BK": 32}},
    {"consts": {"BM": 128.0, "BN": 64}},
    {"options": Options(arch="sm_90")},
    {"options": Options(stages=4)},
    {"options": Options(warps=(2, 2))},
    {"options": Options(swizzle="off")},
    {"options": Options(swizzle=Swizzle(2, 3, 3))},
    {"options": Options(spec=Spec(divisible=(("K", 32),)))},
    {"options": Options(spec=Spec(tensors=(("A", TensorSpec(1, 4)),)))},
    {"options": Options(disable=("swizzle",))},
], ids=lambda c: canonical_json(c)[:60])
def test_key_changes_with_every_input(cache, changes):
    assert key_of(cache, **changes) != key_of(cache)


def test_key_ignores_how_equal_inputs_were_written(cache):
    assert key_of(cache, consts={"BN": 64, "BM": 128}) == key_of(cache)
    assert key_of(cache, options=Options(disable="swizzle")) == \
        key_of(cache, options=Options(disable=("swizzle",)))


def test_key_changes_with_the_compiler_version(tmp_path):
    assert key_of(DiskCache(tmp_path, version="9.9")) != key_of(DiskCache(tmp_path))


def test_constants_json_cannot_hold_are_refused(cache):
    with pytest.raises(TypeError, match="cannot serialise"):
        key_of(cache, consts={"BM": object()})
    with pytest.raises(ValueError, match="non-finite"):
        key_of(cache, consts={"alpha": float("nan")})


@pytest.mark.parametrize("key", ["../escape", "a/b", ".hidden", "", "x" * 129, "a.ptx"])
def test_keys_that_are_not_plain_names_are_refused(cache, key):
    with pytest.raises(ValueError, match="cache keys"):
        cache.get(key)
    with pytest.raises(ValueError, match="cache keys"):
        cache.put_tuning(key, {})


# -- entries --------------------------------------------------------------------------------

def test_put_then_get_returns_the_entry(cache):
    key = key_of(cache)
    assert cache.get(key) is None and cache.misses == 1
    assert cache.put(key, PTX, metadata(name="matmul"))
    entry = cache.get(key)
    assert isinstance(entry, CachedEntry) and cache.hits == 1
    assert entry.ptx == PTX
    assert (entry.entry, entry.threads, entry.smem_bytes) == ("k", 128, 49152)
    assert entry.abi == ABI
    assert entry.options == OPTIONS
    assert entry.compiler_version == COMPILER_VERSION
    assert entry.ptx_sha256 == hashlib.sha256(PTX.encode()).hexdigest()
    assert entry.extra == {"name": "matmul"}
    assert entry.rendered() == Rendered(PTX, "k", 128, 49152, ABI)


def test_an_entry_is_two_plain_files(cache):
    key = key_of(cache)
    cache.put(key, PTX, metadata())
    assert sorted(p.name for p in cache.directory.iterdir()) == [f"{key}.json", f"{key}.ptx"]
    assert (cache.directory / f"{key}.ptx").read_text() == PTX
    record = json.loads((cache.directory / f"{key}.json").read_text())
    assert record["ptx_sha256"] == hashlib.sha256(PTX.encode()).hexdigest()
    assert record["compiler_version"] == COMPILER_VERSION
    assert record["key"] == key and isinstance(record["created"], float)
    assert record["abi"][1] == {"name": "A_stride0", "kind": "i32", "source": "A",
                                "role": "stride", "dim": 0}


def test_a_compiled_kernel_round_trips(cache):
    matmul = load_file(SAMPLES / "matmul.py")["matmul"]
    compiled = matmul.compile(BM=64, BN=128, BK=32, arch="sm_86", raster_group=4)
    key = cache.key_for("matmul-src", {"BM": 64, "BN": 128, "BK": 32}, compiled.options)
    assert cache.put(key, compiled.ptx, metadata_for(compiled))
    entry = cache.get(key)
    assert entry.rendered() == compiled.rendered
    assert entry.options == compiled.options
    assert entry.extra == {"name": "matmul", "grid_raster_group": 4}


def _corrupt_json(path: Path) -> None:
    path.write_text(path.read_text()[:40])


def _edit_record(**changes):
    def edit(path: Path) -> None:
        record = json.loads(path.read_text())
        for name, value in changes.items():
            if value is None:
                del record[name]
            else:
                record[name] = value
        path.write_text(json.dumps(record))
    return edit


CORRUPTIONS = {
    "truncated json": ("json", _corrupt_json),
    "not an object": ("json", lambda p: p.write_text("[1, 2]")),
    "binary json": ("json", lambda p: p.write_bytes(b"\xff\xfe\x00")),
    "missing entry": ("json", _edit_record(entry=None)),
    "missing sha": ("json", _edit_record(ptx_sha256=None)),
    "threads not a number": ("json", _edit_record(threads="128")),
    "threads a bool": ("json", _edit_record(threads=True)),
    "wrong version": ("json", _edit_record(compiler_version="0.0.1")),
    "other key": ("json", _edit_record(key="f" * 64)),
    "bad abi": ("json", _edit_record(abi=[{"name": "x"}])),
    "bad options": ("json", _edit_record(options={"__type__": "Options", "arch": "sm_70"})),
    "unknown type": ("json", _edit_record(options={"__type__": "Pickle"})),
    "ptx edited": ("ptx", lambda p: p.write_text(PTX.replace("ret", "trap"))),
    "ptx truncated": ("ptx", lambda p: p.write_text(PTX[:20])),
    "ptx missing": ("ptx", lambda p: p.unlink()),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupt_entry_is_a_miss_and_is_removed(cache, corruption):
    key = key_of(cache)
    cache.put(key, PTX, metadata())
    suffix, damage = CORRUPTIONS[corruption]
    damage(cache.directory / f"{key}.{suffix}")
    assert cache.get(key) is None
    assert (cache.misses, cache.discarded, cache.hits) == (1, 1, 0)
    assert key in cache.last_discard
    assert list(cache.directory.iterdir()) == []
    cache.put(key, PTX, metadata())  # the key is usable again
    assert cache.get(key).ptx == PTX


def test_another_versions_entries_are_misses(tmp_path):
    old, new = DiskCache(tmp_path, version="0.0.9"), DiskCache(tmp_path, version="0.1.0")
    key = "a" * 64  # the same name, so only the version check can tell them apart
    old.put(key, PTX, metadata())
    assert new.get(key) is None and new.discarded == 1
    assert old.get(key) is None  # it was removed


@pytest.mark.parametrize("bad", [{"entry": None}, {"threads": 0}, {"abi": [1]},
                                 {"options": {"arch": "sm_80"}}, {"smem_bytes": -1}])
def test_put_refuses_metadata_get_would_discard(cache, bad):
    meta = {k: v for k, v in metadata(**bad).items() if v is not None}
    with pytest.raises(CacheEntryError):
        cache.put(key_of(cache), PTX, meta)
    assert not cache.directory.exists() or list(cache.directory.iterdir()) == []


def test_an_unwritable_directory_warns_once_and_caches_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = DiskCache(blocker / "cache")
    with pytest.warns(RuntimeWarning, match="cannot write"):
        assert cache.put(key_of(cache), PTX, metadata()) is False
    assert cache.put_tuning("k", {"best": {}}) is False  # no second warning
    assert cache.get(key_of(cache)) is None


def test_a_failed_write_keeps_the_old_entry_and_leaves_no_temporary(cache, monkeypatch):
    key = key_of(cache)
    cache.put(key, PTX, metadata())

    def fail(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.warns(RuntimeWarning, match="disk full"):
        assert not cache.put(key, PTX + "// new\n", metadata())
    monkeypatch.undo()
    assert sorted(p.name for p in cache.directory.iterdir()) == [f"{key}.json", f"{key}.ptx"]
    assert cache.get(key).ptx == PTX


# -- tuning results and clearing -------------------------------------------------------------

def test_tuning_results_round_trip_as_json(cache):
    result = {"best": {"BM": 128, "warps": [2, 2]}, "time_ms": 0.25}
    assert cache.get_tuning("t1") is None
    assert cache.put_tuning("t1", result)
    assert cache.get_tuning("t1") == result
    record = json.loads((cache.directory / "tuning" / "t1.json").read_text())
    assert record["result"] == result and record["compiler_version"] == COMPILER_VERSION


@pytest.mark.parametrize("text", ['{"key": "t1", "compiler_version": "0.0.1", "result": {}}',
                                  '{"key": "t2", "compiler_version": "%s", "result": {}}'
                                  % COMPILER_VERSION,
                                  '{"key": "t1", "compiler_version": "%s", "result": []}'
                                  % COMPILER_VERSION,
                                  '{"key": "t1", "compiler_versi', "\xff"])
def test_an_invalid_tuning_result_is_a_miss_and_is_removed(cache, text):
    cache.put_tuning("t1", {"best": {}})
    path = cache.directory / "tuning" / "t1.json"
    path.write_text(text, encoding="latin-1")
    assert cache.get_tuning("t1") is None
    assert not path.exists()


def test_tuning_results_must_be_json(cache):
    with pytest.raises(TypeError):
        cache.put_tuning("t1", [1, 2])
    with pytest.raises(ValueError):
        cache.put_tuning("t1", {"time_ms": float("inf")})
    with pytest.raises(TypeError):
        cache.put_tuning("t1", {"launch": object()})


def test_clear_removes_only_cache_files(cache):
    cache.put(key_of(cache), PTX, metadata())
    cache.put_tuning("t1", {"best": {}})
    (cache.directory / ".abc.json.x1y2.tmp").write_text("left by a killed process")
    (cache.directory / "notes.txt").write_text("the user's")
    assert cache.clear() == 4
    assert sorted(p.name for p in cache.directory.iterdir()) == ["notes.txt", "tuning"]
    assert list((cache.directory / "tuning").iterdir()) == []
    assert cache.get(key_of(cache)) is None and cache.get_tuning("t1") is None
    assert DiskCache(cache.directory / "absent").clear() == 0


# -- concurrency ----------------------------------------------------------------------------

# Big enough that a non-atomic write would be seen half done.
BIG_PTX = "".join(f"    mov.u32 %r{i}, {i};\n" for i in range(60000))
ROUNDS = 30


def _ptx_of(writer: int) -> str:
    """A large PTX whose entry is the metadata's (``w<writer>``, w0 for the shared one)."""
    entry = PTX.replace(".entry k(", f".entry w{max(writer, 0)}(")
    return entry + BIG_PTX if writer < 0 else f"// writer {writer}\n{entry}" + BIG_PTX


def _hammer(directory: str, key: str, writer: int, distinct: bool) -> tuple[int, int, int]:
    """Put and get the same key ROUNDS times; returns (valid reads, misses, discards).
    A read that is neither a miss nor a consistent entry fails the worker."""
    cache = DiskCache(directory)
    ptx = _ptx_of(writer if distinct else -1)
    valid = misses = 0
    for _ in range(ROUNDS):
        if writer >= 0:
            cache.put(key, ptx, metadata(entry=f"w{writer if distinct else 0}"))
        entry = cache.get(key)
        if entry is None:
            misses += 1
            continue
        source = int(entry.entry[1:]) if distinct else -1
        if entry.ptx != _ptx_of(source) or entry.abi != ABI or entry.options != OPTIONS:
            raise AssertionError(f"read an inconsistent entry written by {entry.entry}")
        valid += 1
    return valid, misses, cache.discarded


def _run_workers(directory: Path, key: str, distinct: bool) -> list[tuple[int, int, int]]:
    context = multiprocessing.get_context("spawn")
    # Four writers and two pure readers (writer -1 only reads).
    jobs = [(str(directory), key, w, distinct) for w in (0, 1, 2, 3, -1, -1)]
    with context.Pool(len(jobs)) as pool:
        return pool.starmap(_hammer, jobs)


def test_concurrent_writers_of_the_same_kernel_never_corrupt_it(tmp_path):
    key = DiskCache(tmp_path).key_for("src", {"BM": 128}, OPTIONS)
    results = _run_workers(tmp_path, key, distinct=False)
    # Writers always find their own complete entry; nothing is ever found damaged.
    assert all(valid == ROUNDS for valid, _, _ in results[:4])
    assert sum(discards for _, _, discards in results) == 0
    assert DiskCache(tmp_path).get(key).ptx == _ptx_of(-1)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_concurrent_writers_of_different_ptx_give_consistent_reads(tmp_path):
    """Two files per entry can pair one writer's metadata with another's PTX; the hash
    check turns that into a miss, never into a wrong entry (checked in the workers)."""
    key = DiskCache(tmp_path).key_for("src", {"BM": 128}, OPTIONS)
    results = _run_workers(tmp_path, key, distinct=True)
    assert sum(valid for valid, _, _ in results) > 0
    final = DiskCache(tmp_path)
    entry = final.get(key)
    if entry is not None:  # a mismatch discarded last is a miss too
        assert entry.ptx == _ptx_of(int(entry.entry[1:]))
    final.put(key, _ptx_of(0), metadata(entry="w0"))
    assert final.get(key).ptx == _ptx_of(0)
