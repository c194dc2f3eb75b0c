"""Files a tidegauge process keeps beside Python's bytecode for the next one to read.

What a process computes once for every later one (dataclasses' compiled methods, the dashboard's
parsed CSS) is kept in the ``__pycache__`` folder of the package it belongs to, where Python keeps
that package's ``.pyc`` files (or under ``sys.pycache_prefix``): whoever can write one can write
the other. Each file starts with a header naming its format and is read only up to a size bound;
it is written only where Python itself writes bytecode, to a temporary file renamed over the old
one, so a reader never sees half a file, and a read-only installation simply keeps nothing.
"""

from __future__ import annotations

import os
import stat
import sys
from importlib.util import cache_from_source


def path_beside_bytecode(package_folder: str, stem: str, suffix: str) -> str:
    """``<package>/__pycache__/<stem>.<interpreter tag>.<suffix>``, honouring ``sys.pycache_prefix``."""
    folder = os.path.dirname(cache_from_source(os.path.join(package_folder, "__init__.py")))
    return os.path.join(folder, f"{stem}.{sys.implementation.cache_tag}.{suffix}")


def read_kept(path: str, header: bytes, max_bytes: int) -> bytes | None:
    """What follows ``header`` in the file, or None: no file, not a regular file, another header, or
    over ``max_bytes``. Opened without blocking and checked before it is read: a FIFO planted under
    the file's name would otherwise hold the process at start-up until someone wrote to it."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(descriptor, "rb") as file:
            status = os.fstat(file.fileno())
            if not stat.S_ISREG(status.st_mode) or status.st_size > max_bytes or file.read(len(header)) != header:
                return None
            return file.read(max_bytes)
    except OSError:
        return None


def can_keep(path: str) -> bool:
    """Could ``write_kept`` write ``path``: bytecode is written, and its folder (or, not made yet,
    the nearest folder above it that is) is writable. Asked before work done only to be kept."""
    if sys.dont_write_bytecode:
        return False
    folder = os.path.dirname(path)
    while not os.path.isdir(folder):
        above = os.path.dirname(folder)
        if above == folder:
            return False
        folder = above
    return os.access(folder, os.W_OK)


def write_kept(path: str, data: bytes) -> bool:
    """Replace the file with ``data`` at once, where Python writes bytecode; nothing if it cannot.
    Whether it was written."""
    if sys.dont_write_bytecode:
        return False
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except OSError:  # a read-only installation: the next process computes again
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return False
    return True
