"""Reading files that someone else may have replaced: the on-disk caches' one reader.

A cache directory is a place other processes write to, and a killed or hostile one may leave
anything at an entry's name: a symlink to ``/dev/zero`` (an unbounded read), a FIFO (an open
that blocks forever), a directory, a file another user can rewrite, or JSON nested deeply
enough to exhaust Python's recursion limit. :func:`read_trusted` opens without following
symlinks and without blocking, checks what it opened (a regular file, owned by this user and
writable by nobody else, no larger than the caller's bound) and reads at most that bound;
:func:`loads_json` turns every way ``json.loads`` can fail into ``ValueError``.

Both raise and never decide: the callers (:mod:`tilec.caching.disk`,
:mod:`tilec.frontend.parse_tables`) treat any failure as a miss and repair the entry. The
module imports nothing of tilec, so the parser may use it without loading the backend.
"""
from __future__ import annotations

import json
import os
import stat
from typing import Any


class UntrustedFile(OSError):
    """The path exists but is not a file a cache may read (see :func:`read_trusted`)."""


def read_trusted(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of ``path``, which must be a regular file owned by the current user, not
    writable by group or others, and at most ``max_bytes`` long. Raises FileNotFoundError
    when nothing is there, :class:`UntrustedFile` when something unfit is, and OSError for
    any other failure to read."""
    # O_NOFOLLOW refuses a symlink (ELOOP); O_NONBLOCK keeps a FIFO from blocking the open.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as err:
        if os.path.islink(path):
            raise UntrustedFile(f"{path} is a symlink") from None
        raise UntrustedFile(f"cannot open {path}: {err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFile(f"{path} is not a regular file")
        if info.st_size > max_bytes:
            raise UntrustedFile(f"{path} is {info.st_size} bytes, more than {max_bytes}")
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise UntrustedFile(f"{path} belongs to another user (uid {info.st_uid})")
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise UntrustedFile(f"{path} is writable by other users")
        chunks = []
        left = max_bytes + 1  # one byte more tells a file that grew past the bound
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise UntrustedFile(f"{path} grew past {max_bytes} bytes while being read")
        return data
    finally:
        os.close(fd)


def loads_json(data: str | bytes, **kwargs: Any) -> Any:
    """``json.loads``, with every failure a ValueError: malformed text, bytes that are not
    UTF-8, and nesting deep enough to raise RecursionError."""
    try:
        return json.loads(data, **kwargs)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"JSON is not UTF-8: {err}") from None
