"""The on-disk cache cannot be poisoned: whatever sits at an entry's name (a symlink to
/dev/zero, a FIFO, a directory, JSON nested too deep, metadata that does not describe its PTX)
is a bounded, non-blocking miss that repairs the entry; stale temporaries go; and the pass
list is part of every cache key, so a registered pass always reaches the PTX."""
from __future__ import annotations

import dataclasses
import json
import marshal
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tilec import compiler
from tilec import pipeline as pipeline_module
from tilec.compiler import metadata_for, pipeline_identity
from tilec.frontend import parse_tables
from tilec.kernel import load_file
from tilec.pipeline import Pass, pipeline, register_pass
from tilec.caching.disk import DiskCache
from tilec.caching.safe_files import UntrustedFile, loads_json, read_trusted

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CONSTS = {"BM": 64, "BN": 64, "BK": 32}
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def matmul():
    return load_file(SAMPLES / "matmul.py")["matmul"]


@pytest.fixture
def stored(tmp_path, matmul):
    """A cache holding one real compiled kernel: (cache, key, compiled)."""
    cache = DiskCache(tmp_path / "cache")
    compiled = matmul.compile(**CONSTS)
    key = cache.key_for("src", CONSTS, compiled.options)
    assert cache.put(key, compiled.ptx, metadata_for(compiled))
    assert cache.get(key) is not None
    return cache, key, compiled


def _replace(path: Path, make) -> None:
    path.unlink()
    make(path)


# -- the reader ------------------------------------------------------------------------------

def test_the_reader_refuses_what_is_not_a_small_own_regular_file(tmp_path):
    (tmp_path / "ok").write_bytes(b"data")
    assert read_trusted(tmp_path / "ok", 4) == b"data"
    with pytest.raises(UntrustedFile):
        read_trusted(tmp_path / "ok", 3)
    os.symlink("/dev/zero", tmp_path / "zero")
    with pytest.raises(UntrustedFile):
        read_trusted(tmp_path / "zero", 1 << 20)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UntrustedFile):  # and never blocks
        read_trusted(tmp_path / "fifo", 1 << 20)
    (tmp_path / "shared").write_bytes(b"x")
    os.chmod(tmp_path / "shared", 0o666)
    with pytest.raises(UntrustedFile):
        read_trusted(tmp_path / "shared", 10)
    with pytest.raises(FileNotFoundError):
        read_trusted(tmp_path / "absent", 10)


def test_deep_json_is_a_value_error():
    with pytest.raises(ValueError, match="deep"):
        loads_json(DEEP)


def test_deeply_nested_parser_tables_are_a_miss(tmp_path):
    # marshal's own nesting bound: lists 100,000 deep, as marshal writes a one-item list.
    deep = b"[\x01\x00\x00\x00" * 100_000 + b"[\x00\x00\x00\x00"
    path = tmp_path / "tables.marshal"
    path.write_bytes(marshal.dumps({"key": "k", "tables": deep,
                                    "sha256": parse_tables._digest(deep)}))
    assert parse_tables._read_tables(path, "k") is None
    path.write_bytes(deep)
    assert parse_tables._read_tables(path, "k") is None


# -- entries that must be misses, repaired --------------------------------------------------

def _dev_zero(path: Path) -> None:
    os.symlink("/dev/zero", path)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_text("x")


def _deep_json(path: Path) -> None:
    path.write_text(DEEP)


@pytest.mark.parametrize("which", ["json", "ptx"])
@pytest.mark.parametrize("make", [_dev_zero, _fifo, _directory, _deep_json])
def test_a_special_file_in_an_entry_is_a_miss_that_repairs_it(stored, which, make):
    cache, key, compiled = stored
    path = cache.directory / f"{key}.{which}"
    _replace(path, make)
    assert cache.get(key) is None and cache.discarded == 1
    assert not os.path.lexists(path)  # repaired: removed, so the next put writes it anew
    assert cache.put(key, compiled.ptx, metadata_for(compiled))
    assert cache.get(key) is not None


def test_put_replaces_a_directory_in_an_entry_files_place(stored):
    cache, key, compiled = stored
    _replace(cache.directory / f"{key}.json", _directory)
    assert cache.put(key, compiled.ptx, metadata_for(compiled))
    assert cache.get(key) is not None


def test_deep_options_in_metadata_are_a_miss(stored):
    cache, key, _ = stored
    path = cache.directory / f"{key}.json"
    record = json.loads(path.read_text())
    # Deep enough for from_json_value's recursion, not for the C JSON decoder's.
    record["options"] = "NESTED"
    nested = '{"x":' * 5000 + "1" + "}" * 5000
    path.write_text(json.dumps(record).replace('"NESTED"', nested))
    assert cache.get(key) is None and not path.exists()


def test_a_deep_tuning_result_is_a_miss(tmp_path):
    cache = DiskCache(tmp_path)
    assert cache.put_tuning("t", {"best": 1})
    (tmp_path / "tuning" / "t.json").write_text(DEEP)
    assert cache.get_tuning("t") is None
    assert not (tmp_path / "tuning" / "t.json").exists()


# -- metadata checked against its PTX -------------------------------------------------------

def _rewrite_metadata(cache: DiskCache, key: str, **changes) -> None:
    path = cache.directory / f"{key}.json"
    record = json.loads(path.read_text())
    record.update(changes)
    path.write_text(json.dumps(record))


@pytest.mark.parametrize("change", [
    lambda r: {"entry": "other"},
    lambda r: {"threads": r["threads"] * 2},
    lambda r: {"abi": r["abi"][1:]},
    lambda r: {"abi": [dict(p, name=p["name"] + "x") for p in r["abi"]]},
    lambda r: {"abi": list(reversed(r["abi"]))},
    lambda r: {"smem_bytes": 10**9},
], ids=["entry", "threads", "abi-missing", "abi-names", "abi-order", "smem"])
def test_metadata_that_does_not_describe_its_ptx_is_a_miss(stored, change):
    cache, key, _ = stored
    record = json.loads((cache.directory / f"{key}.json").read_text())
    _rewrite_metadata(cache, key, **change(record))
    assert cache.get(key) is None and cache.discarded == 1


# -- sharing model and stale temporaries -----------------------------------------------------

def test_stale_temporaries_of_killed_writers_go_on_open(tmp_path):
    tmp_path.joinpath("tuning").mkdir()
    old = [tmp_path / ".abc.json.x1.tmp", tmp_path / "tuning" / ".t.json.x2.tmp"]
    fresh = tmp_path / ".abc.ptx.x3.tmp"
    for path in old + [fresh]:
        path.write_text("half")
    long_ago = time.time() - 3600
    for path in old:
        os.utime(path, (long_ago, long_ago))
    DiskCache(tmp_path)
    assert [p.exists() for p in old] == [False, False]
    assert fresh.exists()  # a live writer's file stays


def test_a_directory_of_another_user_gets_a_folder_per_user(tmp_path, monkeypatch):
    real_uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real_uid + 1)
    assert DiskCache(tmp_path).directory == tmp_path / f"user-{real_uid + 1}"
    monkeypatch.setattr(os, "getuid", lambda: real_uid)
    assert DiskCache(tmp_path).directory == tmp_path


def test_cache_files_are_private(stored):
    cache, key, _ = stored
    for suffix in ("json", "ptx"):
        assert (cache.directory / f"{key}.{suffix}").stat().st_mode & 0o077 == 0


# -- the pass list is in the key -------------------------------------------------------------

def _rename(kernel, options):
    return dataclasses.replace(kernel, name="renamed_by_user_pass")


def test_a_registered_pass_reaches_the_ptx_after_a_cached_compile(matmul, monkeypatch):
    monkeypatch.setattr(pipeline_module, "_REGISTERED", [])
    before = matmul.compile(**CONSTS)
    assert "renamed_by_user_pass" not in before.ptx
    register_pass(Pass("rename", _rename), after="tiling")
    after = matmul.compile(**CONSTS)
    assert ".entry renamed_by_user_pass" in after.ptx


def test_a_registered_pass_reaches_the_ptx_through_the_disk_cache(matmul, monkeypatch):
    monkeypatch.setattr(pipeline_module, "_REGISTERED", [])
    matmul.compile(**CONSTS)  # in both caches now
    monkeypatch.setattr(compiler, "_CACHE", {})  # as a new process would start
    register_pass(Pass("rename", _rename), after="tiling")
    assert ".entry renamed_by_user_pass" in matmul.compile(**CONSTS).ptx


def _identity_of(source: str) -> str | None:
    namespace: dict = {}
    exec(compile(source, "<user pass>", "exec"), namespace)
    return pipeline_identity([*pipeline(), Pass("user", namespace["run"])])


def test_the_identity_covers_every_passs_code():
    one = _identity_of("def run(kernel, options):\n    return kernel\n")
    other = _identity_of("def run(kernel, options):\n    return kernel if options else None\n")
    assert one is not None and other is not None and one != other
    assert pipeline_identity(pipeline()) not in (one, other)


def test_a_pass_whose_code_cannot_be_hashed_is_never_cached(matmul, monkeypatch):
    monkeypatch.setattr(pipeline_module, "_REGISTERED", [])
    calls = []

    def counting(kernel, options):  # a closure: what it does depends on `calls`
        calls.append(1)
        return kernel

    class Callable:
        def __call__(self, kernel, options):
            calls.append(1)
            return kernel

    assert pipeline_identity([Pass("c", counting)]) is None
    assert pipeline_identity([Pass("o", Callable())]) is None
    register_pass(Pass("counting", counting), after="tiling")
    matmul.compile(**CONSTS)
    matmul.compile(**CONSTS)
    assert len(calls) == 2


def test_the_pipeline_identity_is_the_same_in_every_process():
    code = ("from tilec.compiler import pipeline_identity; from tilec.pipeline import pipeline;"
            " print(pipeline_identity(pipeline()))")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout
            for seed in ("1", "2")}
    assert seen == {pipeline_identity(pipeline()) + "\n"}
