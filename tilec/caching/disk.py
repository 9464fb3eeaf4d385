"""The on-disk cache: compiled PTX with its launch facts, and autotuning results.

Layout of the cache directory (``TILEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/tilec``, else
``~/.cache/tilec``)::

    <key>.ptx            the PTX text
    <key>.json           its metadata: entry, threads, shared bytes, ABI, options, the PTX's
                         sha256, creation time, compiler version
    tuning/<key>.json    one autotuning result

Plain JSON and text, never pickle: an entry is data, and a corrupt one is detected (bad JSON,
a missing field, a PTX hash mismatch, another compiler version), removed and reported as a
miss. Every file is written to a temporary file in the same directory, fsynced and renamed
over the final name, so a reader sees either the whole old file or the whole new one, and
processes compiling the same kernel at once never corrupt it.

Nothing found in the directory is trusted. Every read is bounded and goes through
:func:`tilec.caching.safe_files.read_trusted` (no symlinks followed, no blocking on a FIFO, a
regular file owned by this user and writable by no one else), JSON however deeply nested fails as a
ValueError, and any failure at all is a miss that repairs the entry: its files are removed
(a directory in an entry file's place included) and the compile writes them anew. On a hit
the metadata is checked against the PTX it describes: the entry is declared (``.entry
NAME``), ``.maxntid`` is the thread count, the ABI's parameter names are the entry's
``.param`` list in order, and the shared-memory bytes fit the target.

Sharing model: one cache directory per user. Entries are trusted only when the reader owns
them, since anyone who can write an entry chooses the PTX that runs. The default directory
is already per-user; when the directory (``TILEC_CACHE_DIR``) belongs to another user, a
shared ``/scratch/tilec`` say, each user's entries go to its own ``user-<uid>`` folder in
it, created 0700, so users sharing a directory neither see nor remove each other's files.
Files are created 0600. A writer killed between creating its temporary file and renaming it
leaves a ``.<name>.tmp``: opening a cache removes such files of its user older than
:data:`STALE_TEMP_SECONDS`.

Use from the compiler (:func:`tilec.compiler.metadata_for` takes the metadata from a compile
result: this module knows nothing of the compiler, which imports it)::

    cache = DiskCache()
    key = cache.key_for(source_key, kernel.consts, options)
    entry = cache.get(key)              # CachedEntry or None
    if entry is None:
        compiled = ...                  # compile as usual
        cache.put(key, compiled.ptx, metadata_for(compiled))
    else:
        rendered = entry.rendered()     # the backend's Rendered, ready to load and launch
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import shutil
import stat
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tilec.backend.abi import AbiParam
from tilec.backend.ptx import Rendered
from tilec.target.layout import Swizzle
from tilec.options import MAX_THREADS, Options, Spec, TensorSpec
from tilec.caching.safe_files import loads_json, read_trusted
from tilec.version import COMPILER_VERSION

log = logging.getLogger(__name__)

# The dataclasses an Options value is built from; JSON names them by class to decode them.
_DATACLASSES = {cls.__name__: cls for cls in (Options, Spec, TensorSpec, Swizzle)}
# Keys become file names: no separators, no leading dot (temporary files start with one).
_KEY = re.compile(r"[A-Za-z0-9_-]{1,128}")
_ENTRY_FILE = re.compile(r"[A-Za-z0-9_-]{1,128}\.(json|ptx)")
_TEMP_FILE = re.compile(r"\..+\.tmp")
TUNING_DIR = "tuning"
# Other folders of the cache directory that writers put temporary files in (the parser's).
_TEMP_FOLDERS = (TUNING_DIR, "parser")
# Bounds on what a read takes in: far above any real entry (a large kernel's PTX is ~1 MB).
MAX_PTX_BYTES = 64 * 1024 * 1024
MAX_JSON_BYTES = 4 * 1024 * 1024
# A temporary file this old belongs to a writer that was killed: a write takes milliseconds.
STALE_TEMP_SECONDS = 15 * 60


class CacheEntryError(ValueError):
    """An entry's files do not form a valid entry (raised inside ``get``, which turns it into
    a miss; raised by ``put`` for metadata that could never be read back)."""


def default_cache_dir() -> Path:
    """``TILEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/tilec``, else ``~/.cache/tilec``."""
    explicit = os.environ.get("TILEC_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says a relative value is invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "tilec"
    return Path.home() / ".cache" / "tilec"


# -- canonical JSON -------------------------------------------------------------------------

def to_json_value(value: Any) -> Any:
    """``value`` as plain JSON data: dataclasses become objects tagged with ``__type__``,
    tuples become lists. Anything else that JSON cannot hold is refused."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: to_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
        data["__type__"] = type(value).__name__
        return data
    if isinstance(value, (list, tuple)):
        return [to_json_value(item) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"cannot serialise a dict with non-string keys: {value!r}")
        return {k: to_json_value(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"cannot serialise the non-finite number {value!r}")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot serialise a {type(value).__name__} ({value!r})")


def from_json_value(data: Any) -> Any:
    """The inverse of :func:`to_json_value` for the option dataclasses: lists become tuples
    (every sequence in Options is one) and tagged objects become their dataclass."""
    if isinstance(data, list):
        return tuple(from_json_value(item) for item in data)
    if isinstance(data, dict):
        fields = {k: from_json_value(v) for k, v in data.items() if k != "__type__"}
        if "__type__" not in data:
            return fields
        cls = _DATACLASSES.get(data["__type__"])
        if cls is None:
            raise ValueError(f"unknown type {data['__type__']!r} in cached JSON")
        return cls(**fields)
    return data


def canonical_json(value: Any) -> str:
    """One text per value: sorted keys, no spaces, ASCII, tuples as lists."""
    return json.dumps(to_json_value(value), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False)


def stable_hash(value: Any) -> str:
    """The sha256 of the canonical JSON of ``value``: the same in every process and run."""
    return hashlib.sha256(canonical_json(value).encode("ascii")).hexdigest()


def options_from_json(data: Any) -> Options:
    options = from_json_value(data)
    if not isinstance(options, Options):
        raise ValueError(f"expected serialised Options, got {type(options).__name__}")
    return options


# -- entries --------------------------------------------------------------------------------

@dataclass(frozen=True)
class CachedEntry:
    """One compiled kernel read back from disk, checked against its metadata."""

    key: str
    ptx: str
    entry: str  # the PTX entry point's name
    threads: int
    smem_bytes: int
    abi: tuple[AbiParam, ...]
    options: Options
    ptx_sha256: str
    created: float  # seconds since the epoch
    compiler_version: str
    extra: dict[str, Any] = field(default_factory=dict)  # metadata beyond the fields above

    def rendered(self) -> Rendered:
        """The backend's result, as if the kernel had just been compiled."""
        return Rendered(self.ptx, self.entry, self.threads, self.smem_bytes, self.abi)


def _require(record: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in record:
        raise CacheEntryError(f"metadata has no '{name}'")
    value = record[name]
    # bool is an int to isinstance, never a count.
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CacheEntryError(f"metadata '{name}' is {value!r}, not a {kind}")
    return value


def _abi_from_json(items: Any) -> tuple[AbiParam, ...]:
    if not isinstance(items, list):
        raise CacheEntryError("metadata 'abi' is not a list")
    try:
        return tuple(AbiParam.from_json(item) for item in items)
    except ValueError as error:
        raise CacheEntryError(str(error)) from None


_FIELDS = ("key", "compiler_version", "entry", "threads", "smem_bytes", "abi", "options",
           "ptx_sha256", "created")


def _entry_from_record(key: str, record: Any, ptx: str, version: str) -> CachedEntry:
    """Check a metadata record against its key, the compiler version and the PTX text."""
    if not isinstance(record, dict):
        raise CacheEntryError("metadata is not a JSON object")
    if _require(record, "key", str) != key:
        raise CacheEntryError(f"metadata is for key {record['key']!r}")
    if _require(record, "compiler_version", str) != version:
        raise CacheEntryError(f"written by compiler version {record['compiler_version']!r}, "
                              f"this is {version!r}")
    entry = _require(record, "entry", str)
    threads = _require(record, "threads", int)
    smem_bytes = _require(record, "smem_bytes", int)
    if not entry or threads <= 0 or smem_bytes < 0:
        raise CacheEntryError(f"metadata has entry={entry!r}, threads={threads}, "
                              f"smem_bytes={smem_bytes}")
    abi = _abi_from_json(record.get("abi"))
    try:
        options = options_from_json(_require(record, "options", dict))
    except (TypeError, ValueError) as err:
        raise CacheEntryError(f"metadata 'options' do not decode: {err}") from None
    digest = _require(record, "ptx_sha256", str)
    if hashlib.sha256(ptx.encode("utf-8")).hexdigest() != digest:
        raise CacheEntryError("the PTX does not match its sha256")
    created = float(_require(record, "created", (int, float)))
    extra = {k: v for k, v in record.items() if k not in _FIELDS}
    return CachedEntry(key, ptx, entry, threads, smem_bytes, abi, options, digest, created,
                       version, extra)


_PARAM_NAME = re.compile(r"([A-Za-z_$%][A-Za-z0-9_$]*)\s*(?:\[\d*\]\s*)?$")


def _entry_parameters(ptx: str, entry: str) -> Optional[list[str]]:
    """The parameter names of ``.entry NAME(...)`` in ``ptx``, in order; None when the PTX
    declares no such entry."""
    match = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(([^)]*)\)", ptx)
    if match is None:
        return None
    names = []
    for declaration in filter(str.strip, match.group(1).split(",")):
        name = _PARAM_NAME.search(declaration.strip())
        if not declaration.strip().startswith(".param") or name is None:
            raise CacheEntryError(f"cannot read the parameter {declaration.strip()!r}")
        names.append(name.group(1))
    return names


def check_against_ptx(entry: CachedEntry) -> None:
    """Raise CacheEntryError unless the metadata describes its PTX: the entry point it
    names, its ``.maxntid``, its ``.param`` list (the ABI's names, in order) and a shared
    memory size the target can give."""
    params = _entry_parameters(entry.ptx, entry.entry)
    if params is None:
        raise CacheEntryError(f"the PTX declares no '.entry {entry.entry}'")
    abi_names = [p.name for p in entry.abi]
    if params != abi_names:
        raise CacheEntryError(f"the PTX's parameters {params} are not the ABI's {abi_names}")
    maxntid = re.search(r"\.maxntid\s+(\d+)\s*,\s*(\d+)\s*,\s*(\d+)", entry.ptx)
    threads = None if maxntid is None else [int(n) for n in maxntid.groups()]
    if threads != [entry.threads, 1, 1] or entry.threads > MAX_THREADS:
        raise CacheEntryError(f"metadata says {entry.threads} threads, the PTX's .maxntid is "
                              f"{threads}")
    if entry.smem_bytes > entry.options.smem_limit:
        raise CacheEntryError(f"metadata says {entry.smem_bytes} bytes of shared memory, more "
                              f"than {entry.options.arch} gives ({entry.options.smem_limit})")
    if entry.smem_bytes and ".shared" not in entry.ptx:
        raise CacheEntryError(f"metadata says {entry.smem_bytes} bytes of shared memory, the "
                              "PTX declares none")


def _user_directory(directory: Path) -> Path:
    """``directory``, or this user's folder in it when it belongs to another user (the
    sharing model in the module docstring)."""
    try:
        owner = os.stat(directory).st_uid
    except OSError:  # absent (it will be created, ours) or unreadable (writes will warn)
        return directory
    if not hasattr(os, "getuid") or owner == os.getuid():
        return directory
    return directory / f"user-{os.getuid()}"


# -- the cache ------------------------------------------------------------------------------

class DiskCache:
    """Compiled kernels and tuning results under one directory (see the module docstring).

    ``version`` defaults to ``tilec.version.COMPILER_VERSION``; entries another version
    wrote are misses. ``hits``, ``misses`` and ``discarded`` count ``get`` outcomes (a
    discarded entry also counts as a miss); ``last_discard`` says why the latest went.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None,
                 version: Optional[str] = None):
        if version is None:
            version = COMPILER_VERSION
        root = Path(directory) if directory is not None else default_cache_dir()
        self.directory = _user_directory(root)
        self.version = version
        self.hits = 0
        self.misses = 0
        self.discarded = 0
        self.last_discard = ""
        self._warned_unwritable = False
        self.remove_stale_temporaries()

    def __repr__(self) -> str:
        return f"DiskCache({str(self.directory)!r}, version={self.version!r})"

    # -- keys -----------------------------------------------------------------------------
    def key_for(self, source_key: str, consts: dict[str, Any], options: Options,
                pipeline: str = "", backend: str = "") -> str:
        """The entry key of a program (``compiler.source_key``), its constants and options
        (the spec included) under this compiler version, compiled by the pass list
        ``pipeline`` identifies (``compiler.pipeline_identity``). Raises TypeError for a
        constant JSON cannot hold (such a kernel is not disk-cacheable). ``backend``: what
        else names the backend's output (``compiler.backend_identity``: LLVM's version)."""
        fields = {"kind": "kernel", "compiler_version": self.version,
                  "source": source_key, "consts": dict(consts),
                  "options": options, "arch": options.arch, "pipeline": pipeline}
        if backend:
            fields["backend"] = backend
        return stable_hash(fields)

    @staticmethod
    def _check_key(key: str) -> str:
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ValueError(f"cache keys are 1-128 letters, digits, '_' or '-', got {key!r}")
        return key

    def _paths(self, key: str) -> tuple[Path, Path]:
        self._check_key(key)
        return self.directory / f"{key}.json", self.directory / f"{key}.ptx"

    def _tuning_path(self, key: str) -> Path:
        return self.directory / TUNING_DIR / f"{self._check_key(key)}.json"

    # -- kernels --------------------------------------------------------------------------
    def get(self, key: str) -> Optional[CachedEntry]:
        """The entry for ``key``, or None: absent, or found invalid (then it is removed)."""
        meta_path, ptx_path = self._paths(key)
        try:
            # The metadata first: it is written last, so its PTX is already in place.
            meta_raw = read_trusted(meta_path, MAX_JSON_BYTES)
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError as err:
            self._discard(key, f"unreadable metadata: {err}")
            return None
        try:
            record = loads_json(meta_raw)
            ptx = read_trusted(ptx_path, MAX_PTX_BYTES).decode("utf-8")
            entry = _entry_from_record(key, record, ptx, self.version)
            check_against_ptx(entry)
        # Whatever a hand-made entry makes decoding raise (ValueError, TypeError from
        # fields a class lacks, RecursionError from nested options...) is a miss, never a
        # failed compile.
        except Exception as err:  # noqa: BLE001 - see above
            self._discard(key, f"{type(err).__name__}: {err}")
            return None
        self.hits += 1
        return entry

    def put(self, key: str, ptx: str, metadata: dict[str, Any]) -> bool:
        """Store ``ptx`` with ``metadata`` (``entry``, ``threads``, ``smem_bytes``, ``abi``
        as AbiParams or their dicts, ``options`` as an Options, and any other JSON values;
        see :func:`tilec.compiler.metadata_for`). Returns False, with a warning the first
        time, when the directory cannot be written: a cache that cannot write never fails a
        compile.
        Metadata that could never be read back raises CacheEntryError."""
        meta_path, ptx_path = self._paths(key)
        if "abi" not in metadata:
            raise CacheEntryError("metadata has no 'abi'")
        record = {k: to_json_value(v) for k, v in metadata.items() if k != "abi"}
        # ABI parameters are stored as plain objects of their fields, untagged.
        record["abi"] = [p.to_json() if isinstance(p, AbiParam) else p
                         for p in metadata["abi"]]
        record.update(key=key, compiler_version=self.version, created=time.time(),
                      ptx_sha256=hashlib.sha256(ptx.encode("utf-8")).hexdigest())
        # What get() would refuse.
        check_against_ptx(_entry_from_record(key, record, ptx, self.version))
        text = json.dumps(record, sort_keys=True, indent=1, allow_nan=False)
        # PTX first, metadata last: metadata on disk means its PTX is there too.
        return (self._write(ptx_path, ptx) and self._write(meta_path, text))

    # -- tuning results -------------------------------------------------------------------
    def get_tuning(self, key: str) -> Optional[dict[str, Any]]:
        """A stored tuning result, or None (absent, or invalid and then removed)."""
        path = self._tuning_path(key)
        try:
            record = loads_json(read_trusted(path, MAX_JSON_BYTES))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            self._remove(path, f"tuning result {key}: {err}")
            return None
        valid = (isinstance(record, dict) and record.get("key") == key
                 and record.get("compiler_version") == self.version
                 and isinstance(record.get("result"), dict))
        if not valid:
            self._remove(path, f"tuning result {key}: not a result of this compiler version")
            return None
        return record["result"]

    def put_tuning(self, key: str, result: dict[str, Any]) -> bool:
        """Store a JSON-serialisable tuning result (False when the directory cannot be
        written, as for ``put``)."""
        path = self._tuning_path(key)
        if not isinstance(result, dict):
            raise TypeError(f"a tuning result is a dict, got {type(result).__name__}")
        record = {"key": key, "compiler_version": self.version, "created": time.time(),
                  "result": to_json_value(result)}
        return self._write(path, json.dumps(record, sort_keys=True, indent=1, allow_nan=False))

    # -- housekeeping ---------------------------------------------------------------------
    def clear(self) -> int:
        """Remove every entry, tuning result and left-over temporary file; other files in
        the directory are left alone. Returns how many files went."""
        removed = 0
        for folder in (self.directory, self.directory / TUNING_DIR):
            try:
                names = os.listdir(folder)
            except FileNotFoundError:
                continue
            for name in names:
                if _ENTRY_FILE.fullmatch(name) or _TEMP_FILE.fullmatch(name):
                    try:
                        os.unlink(folder / name)
                        removed += 1
                    except FileNotFoundError:  # another process cleared it first
                        pass
        return removed

    def remove_stale_temporaries(self, max_age: float = STALE_TEMP_SECONDS) -> int:
        """Remove this user's temporary files older than ``max_age`` seconds, left by
        writers killed before their rename; returns how many went. A live writer's file is
        younger, and another user's is not ours to judge."""
        removed = 0
        now = time.time()
        for folder in (self.directory, *(self.directory / name for name in _TEMP_FOLDERS)):
            try:
                names = [n for n in os.listdir(folder) if _TEMP_FILE.fullmatch(n)]
            except OSError:
                continue
            for name in names:
                try:
                    info = os.lstat(folder / name)
                    mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
                    if mine and not stat.S_ISDIR(info.st_mode) and now - info.st_mtime > max_age:
                        os.unlink(folder / name)
                        removed += 1
                except OSError:  # gone already, or not removable: a later open tries again
                    continue
        return removed

    def _discard(self, key: str, reason: str) -> None:
        """Count a miss and remove the entry's files."""
        self.misses += 1
        self.discarded += 1
        self.last_discard = f"{key}: {reason}"
        for path in self._paths(key):
            self._remove(path, reason)

    def _remove(self, path: Path, reason: str) -> None:
        log.info("tilec cache: removing %s (%s)", path, reason)
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):  # a directory where a file belongs
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as err:
            log.warning("tilec cache: cannot remove %s: %s", path, err)

    def _write(self, path: Path, text: str) -> bool:
        """Write atomically: a temporary file in the same directory (so the rename never
        crosses file systems), fsynced, then renamed over ``path``."""
        temp = None
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                        dir=path.parent)
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            if stat.S_ISDIR(_lstat_mode(path)):  # os.replace cannot replace a directory
                self._remove(path, "a directory in the place of an entry file")
            os.replace(temp, path)
            temp = None
            _fsync_directory(path.parent)
            return True
        except OSError as err:
            if not self._warned_unwritable:
                warnings.warn(f"tilec cache: cannot write {path}: {err}; not caching",
                              RuntimeWarning, stacklevel=3)
                self._warned_unwritable = True
            return False
        finally:
            if temp is not None:
                try:
                    os.unlink(temp)
                except OSError:
                    pass


def _lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable; not every platform can open a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
