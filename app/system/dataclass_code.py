"""Dataclasses' generated methods, compiled once and kept beside tidegauge's own bytecode.

``@dataclass`` writes each method it generates (``__init__``, ``__repr__``, ``__eq__``, a frozen
class's ``__setattr__`` ...) as source text and compiles it with ``exec``, in every process, for
every class: some 850 compiles before a headless run's first request, about a sixth of the run's
CPU (sampled over six runs). The text says everything the method depends on (the fields, their
defaults and the class's options are names bound when the text runs), so the same text always
compiles to the same code. ``install`` gives the ``dataclasses`` module an ``exec`` of its own
that compiles each text once and keeps the code in one file beside app's ``.pyc`` files; the
classes, their methods and what they do are exactly those of the builtin ``exec``.

Trust: the file holds code tidegauge runs, as the ``.pyc`` files beside it do, and it is where
they are (``app/__pycache__``, or under ``sys.pycache_prefix``): whoever can write it can already
write those, which Python runs without asking. It is read only if its header is this
interpreter's bytecode magic number and it is at most ``MAX_BYTES``; any other file (another
Python, truncated, not a mapping of text to code) is left unread, and the texts compile as usual.
It is written only where Python itself would write bytecode (not under ``-B`` or
``PYTHONDONTWRITEBYTECODE``), at exit and only if a text was new, to a temporary file renamed
over the old one, so a reader never sees half a file.
"""

from __future__ import annotations

import atexit
import builtins
import marshal
import os
from importlib.util import MAGIC_NUMBER
from types import CodeType
from typing import Any

from app.system.kept_files import path_beside_bytecode, read_kept, write_kept

# A dashboard run and a headless run together keep ~1,500 short methods (~1.5 MB); anything far
# larger is not a file this module wrote.
MAX_BYTES = 8 * 1024 * 1024
# Texts from older versions of tidegauge's classes stay in the file until it holds this many;
# then it keeps only what the last process used.
MAX_ENTRIES = 5_000
FILE_STEM = "dataclass-methods"

# Each text's code, marshalled: unmarshalled only when a class asks for it, since unmarshalling
# every code object in the file (~1,500 after a dashboard run) cost 33 ms, a third of what it saved.
_kept: dict[str, bytes] = {}
_used: set[str] = set()
_new = 0
_path: str | None = None


def cache_path() -> str:
    """Where the compiled methods are kept: app's own bytecode folder, named for this interpreter."""
    return path_beside_bytecode(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), FILE_STEM, "bin")


def install() -> None:
    """From now on, classes made with ``@dataclass`` reuse the methods compiled before."""
    global _path
    # Here, not at the top: the module is loaded before anything else, and this is its one use.
    import dataclasses

    if getattr(dataclasses, "exec", None) is _exec:
        return
    _path = cache_path()
    _kept.update(read(_path))
    # A module global of that name comes before the builtin in the module's own lookups: only
    # ``dataclasses`` sees it; nothing else in the process does.
    setattr(dataclasses, "exec", _exec)  # noqa: B010  (the module declares no such name for mypy)
    atexit.register(save)


def read(path: str) -> dict[str, bytes]:
    """The file's mapping of text to marshalled code, or nothing if it is not one this interpreter wrote."""
    data = read_kept(path, MAGIC_NUMBER, MAX_BYTES)
    if data is None:
        return {}
    try:
        loaded = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    return {text: code for text, code in loaded.items() if isinstance(text, str) and isinstance(code, bytes)}


def save() -> None:
    """Write the file if this process compiled a text it did not hold (where bytecode is written)."""
    if not _new or _path is None:
        return
    keep = _kept if len(_kept) <= MAX_ENTRIES else {t: _kept[t] for t in _used}
    write_kept(_path, MAGIC_NUMBER + marshal.dumps(keep))


def _code_for(text: str) -> CodeType:
    global _new
    _used.add(text)
    if (kept := _kept.get(text)) is not None:
        try:
            code = marshal.loads(kept)
        except (EOFError, ValueError, TypeError):
            code = None
        if isinstance(code, CodeType):
            return code
    # The builtin exec compiles a text under the name "<string>": the same name here.
    code = compile(text, "<string>", "exec")
    _kept[text] = marshal.dumps(code)
    _new += 1
    return code


def _exec(source: Any, globals: Any = None, locals: Any = None, /) -> None:
    builtins.exec(_code_for(source) if isinstance(source, str) else source, globals, locals)
