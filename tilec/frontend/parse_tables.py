"""The grammar's LALR tables, kept on disk so a cold start does not rebuild them.

Building the parser from ``grammar/tile.lark`` takes about half a second; loading its tables
takes a few milliseconds. The tables are stored with :mod:`marshal` (never pickle: loading a
file must not be able to run code, and marshal builds values only; JSON, which has neither
tuples nor integer keys and needed a decoding hook, took 10 ms of a cold start to read, marshal
2) in ``<cache dir>/parser/tables-<key>.marshal``, where the key is the SHA-256 of everything
the tables depend on: the grammar text, lark's version, the parser options, marshal's format
and this module's format version. So a changed grammar or a new lark never meets an old table.

A file is used only when all of these hold, else the parser is built and the file rewritten:
it is a regular file owned by the current user and writable by nobody else (opened without
following symlinks, read with a size bound), it names the same key, and the digest of its
tables matches the one stored beside them. Writes go to a temporary file in the same
folder and are renamed into place, so a reader never sees half a file. ``TILEC_PARSER_CACHE=0``
turns the cache off.
"""
from __future__ import annotations

import hashlib
import json
import marshal
import os
from pathlib import Path
from typing import Any, Callable, Optional

import lark
from lark import Lark
from lark.grammar import Rule
from lark.lexer import TerminalDef

from tilec.caching.safe_files import read_trusted

# Bumped whenever the file layout below changes.
FORMAT_VERSION = 2
# The tables are ~300 kB; anything much larger is not ours.
MAX_BYTES = 16 * 1024 * 1024


def cache_dir() -> Path:
    """``TILEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/tilec``, else ``~/.cache/tilec``: the rule of
    ``tilec.caching.disk.default_cache_dir``, repeated here because importing that module
    pulls in the whole backend, which a cold ``tilec compile`` must not wait for."""
    explicit = os.environ.get("TILEC_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec says a relative value must be ignored
        return Path(xdg) / "tilec"
    return Path.home() / ".cache" / "tilec"


def table_key(grammar: str, options: dict[str, Any]) -> str:
    """What the tables depend on, hashed: a different grammar, lark or option set gives a
    different key and so a different file."""
    described = json.dumps({"grammar": grammar, "lark": lark.__version__,
                            "format": FORMAT_VERSION, "marshal": marshal.version,
                            "options": {k: repr(v) for k, v in sorted(options.items())}},
                           sort_keys=True)
    return hashlib.sha256(described.encode("utf-8")).hexdigest()


def load_parser(grammar: str, options: dict[str, Any], postlex_factory: Callable[[], Any],
                directory: Optional[Path] = None,
                plugins: Optional[dict[str, Any]] = None) -> Lark:
    """The LALR parser for ``grammar``, from cached tables when a valid file exists, else
    built (and the file written for next time). ``options`` are Lark's keyword options
    without ``postlex``; ``postlex_factory`` makes the post-lexer and ``plugins`` are the
    classes lark makes its parts from (its ``_plugins`` option): they are code, not data, so
    they are never stored, and the tables do not depend on them."""
    code = {"postlex": postlex_factory, "_plugins": lambda: dict(plugins or {})}
    if os.environ.get("TILEC_PARSER_CACHE", "1") == "0":
        return _build(grammar, options, code)
    key = table_key(grammar, options)
    path = table_path(directory or cache_dir(), key)
    tables = _read_tables(path, key)
    if tables is not None:
        try:
            return Lark._load_from_dict(tables["data"], tables["memo"],
                                        **{name: make() for name, make in code.items()})
        except Exception:  # a table lark cannot load is a miss, repaired below
            pass
    parser = _build(grammar, options, code)
    _write_tables(path, key, parser)
    return parser


def table_path(directory: Path, key: str) -> Path:
    """Where the tables for ``key`` are kept under a cache directory."""
    return directory / "parser" / f"tables-{key}.marshal"


def _build(grammar: str, options: dict[str, Any],
           code: dict[str, Callable[[], Any]]) -> Lark:
    return Lark(grammar, **options, **{name: make() for name, make in code.items()})


# ------------------------------------------------------------------------------ the file

def _read_tables(path: Path, key: str) -> Optional[dict[str, Any]]:
    """The decoded tables in ``path`` if it is a sound file for ``key``; None otherwise."""
    try:
        # Not a symlink, FIFO or another user's file, and read with a bound. marshal raises
        # EOFError, ValueError or TypeError for bytes it cannot read (values nested too
        # deeply included).
        stored = marshal.loads(read_trusted(path, MAX_BYTES))
        if not isinstance(stored, dict) or stored.get("key") != key:
            return None
        body = stored.get("tables")
        if not isinstance(body, bytes) or stored.get("sha256") != _digest(body):
            return None
        tables = marshal.loads(body)
        return tables if isinstance(tables, dict) and {"data", "memo"} <= tables.keys() \
            else None
    except (OSError, EOFError, ValueError, TypeError):
        return None


def _write_tables(path: Path, key: str, parser: Lark) -> None:
    """Write the tables atomically; a cache that cannot be written is only slower."""
    try:
        data, memo = parser.memo_serialize([TerminalDef, Rule])
        # The post-lexer and the plugins are code; the loader gets them afresh instead.
        data["options"] = dict(data["options"], postlex=None, _plugins={})
        body = marshal.dumps({"data": data, "memo": memo})
        stored = marshal.dumps({"key": key, "lark": lark.__version__, "sha256": _digest(body),
                                "tables": body})
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        import tempfile  # writes are rare: a cold start that reads the tables never needs it
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tables-",
                                             suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(stored)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except (OSError, TypeError, ValueError):
        pass


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()

