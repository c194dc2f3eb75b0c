"""Secret redaction: API keys never reach disk, logs or the screen.

One process-wide registry of secret strings. The values of the provider
key environment variables are registered automatically (checked on every
call, so a key exported after import is still caught); anything else
(a key from the config file, a ``--api-key-env`` variable) is registered
by whoever reads it, see ``app.wiring.config.api_key_for``.

``redact`` uses one compiled alternation, rebuilt at its first use after the
set changes, and returns its input untouched when no secret is registered.

Each secret is also matched in the forms a tool or a model may turn it into
(``_forms``): hex, percent-encoding, and base64 / base64url at each of the
three byte offsets it can have inside a longer encoded stream, with or
without padding; and every form also with whitespace between any two of its
characters (``base64`` folds at 76 columns, PEM at 64). Kept within 30 ms a
megabyte for a few secrets (benchmark 15).
"""

from __future__ import annotations

import base64
import os
import re
import threading
from typing import Any

REDACTED = "[REDACTED]"
# Shorter values are not treated as secrets: redacting "abc" everywhere
# would mangle ordinary text and a real API key is never that short.
MIN_SECRET_LENGTH = 8
# Kept here (not imported from app.wiring.config) so redaction has no dependencies.
PROVIDER_KEY_ENV_VARS: tuple[str, ...] = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "DEEPSEEK_API_KEY")

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
# A secret registered since the pattern was compiled: compiled again at the next use, once for
# however many came meanwhile (a login or a refresh registers two tokens; each compile takes
# milliseconds, more the more secrets there are).
_stale = False
_env_snapshot: tuple[str | None, ...] | None = None
_extra_env_vars: set[str] = set()


# Between two characters of a secret (or of an encoded form), a copy folded over lines.
_FOLD = r"\s*"
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _base64_cores(data: bytes) -> set[str]:
    """The base64 characters that depend on ``data`` alone, wherever it sits in a longer
    stream: at byte offset 0, 1 or 2 of a 3-byte group its first and last characters share
    bits with its neighbours, so only the characters between are the same in every copy
    (padding, which lies outside them, never matters)."""
    cores: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data + bytes(2)).decode("ascii")
        first = -(-8 * offset // 6)  # the first character made only of data's bits
        end = (8 * offset + 8 * len(data)) // 6  # past the last one
        cores.add(encoded[first:end])
    return cores


# A form is a sequence of positions, each the characters that may stand there: hex and
# percent-escapes in either case, base64 with its standard or URL-safe alphabet. One regex
# branch per form, not one per spelling, keeps the pass within its time.
_Form = tuple[str, ...]


def _either_case(text: str) -> _Form:
    return tuple("".join(sorted({c.lower(), c.upper()})) for c in text)


def _percent(byte: int) -> _Form:
    return ("%", *_either_case(f"{byte:02x}"))


def _forms(secret: str) -> set[_Form]:
    """``secret`` and the encodings of it that a tool output or a reply may carry."""
    data = secret.encode("utf-8")
    forms: set[_Form] = {
        tuple(secret),
        _either_case(data.hex()),
        tuple(p for byte in data for p in _percent(byte)),
        # URL-encoded as quote() does it: only the reserved characters escaped
        tuple(p for c in secret for p in ((c,) if c in _UNRESERVED else
                                         tuple(q for byte in c.encode() for q in _percent(byte)))),
    }
    for core in _base64_cores(data):
        forms.add(tuple({"+": "+-", "/": "/_"}.get(c, c) for c in core))
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


def _position(chars: str) -> str:
    return re.escape(chars) if len(chars) == 1 else "[" + "".join(re.escape(c) for c in chars) + "]"


def _rebuild() -> None:
    global _pattern
    if not _secrets:
        _pattern = None
        return
    forms = {form for secret in _secrets for form in _forms(secret)}
    # Longest first so a secret that contains another is replaced whole; grouped by their
    # first character, so a position that starts no form costs one test, not one per form.
    by_first: dict[str, list[_Form]] = {}
    for form in sorted(forms, key=lambda form: (-len(form), form)):
        by_first.setdefault(form[0], []).append(form)
    _pattern = re.compile("|".join(
        _position(first) + _FOLD + "(?:" + "|".join(_FOLD.join(_position(chars) for chars in form[1:])
                                                     for form in group) + ")"
        for first, group in by_first.items()))


def register_secret(value: str | None) -> bool:
    """Add a secret; returns True when it was new. Short or empty values are ignored."""
    if not value:
        return False
    value = value.strip()
    if len(value) < MIN_SECRET_LENGTH:
        return False
    global _stale
    with _lock:
        if value in _secrets:
            return False
        _secrets.add(value)
        _stale = True
    return True


def register_env_var(name: str) -> None:
    """Watch one more environment variable (e.g. the one named by ``--api-key-env``)."""
    global _env_snapshot
    with _lock:
        _extra_env_vars.add(name)
        _env_snapshot = None  # force a re-read
    _refresh_from_env()


def clear_secrets() -> None:
    """Forget every secret (tests). Environment keys come back on the next call."""
    global _env_snapshot, _stale
    with _lock:
        _secrets.clear()
        _env_snapshot = None
        _rebuild()
        _stale = False


def secret_count() -> int:
    _refresh_from_env()
    return len(_secrets)


def _refresh_from_env() -> None:
    """Register the key env vars' values if they changed since the last look, and compile the
    pattern again if a secret came since (cheap otherwise). Every reader calls it (``_current_pattern``)."""
    global _env_snapshot, _stale
    names = PROVIDER_KEY_ENV_VARS + tuple(sorted(_extra_env_vars))
    snapshot = _env_values(names)
    if snapshot != _env_snapshot:
        for value in snapshot:
            register_secret(value)
        _env_snapshot = snapshot
    if _stale:
        with _lock:
            if _stale:
                _rebuild()
                _stale = False


def _env_values(names: tuple[str, ...]) -> tuple[str | None, ...]:
    """``os.environ.get`` of each name. An unset name is first looked for in the environment's
    own table: ``get`` raises and catches a KeyError for it, and the key variables are mostly
    unset while every reader looks at them (the refresh: 8.5 us with three unset names, 2.1 this way)."""
    environ = os.environ
    table = getattr(environ, "_data", None)  # what os.environ keeps, its keys encoded
    if not isinstance(table, dict):  # not CPython's os.environ (a test may replace it): ask it
        return tuple(environ.get(n) for n in names)
    return tuple(environ.get(n) if environ.encodekey(n) in table else None for n in names)


def _current_pattern() -> re.Pattern[str] | None:
    """The pattern of every secret registered so far, the environment's keys looked at again:
    what each reader below matches with, so none can use one compiled before a secret came."""
    _refresh_from_env()
    return _pattern


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``[REDACTED]``."""
    pattern = _current_pattern()
    if pattern is None or not text:
        return text
    return pattern.sub(REDACTED, text)


# Streams are written in pieces; this many characters are held back at the end of each, more
# than any copy of a key (its percent-encoded form of a 1,000-character key, folded, included).
STREAM_HOLD_BACK = 4096


def safe_cut(text: str, cut: int) -> int:
    """Where to cut ``text`` at or before ``cut`` so that no copy of a secret lies across it:
    ``redact`` of each side then replaces every copy whole (a key folded over lines has no
    whitespace to cut at safely). Assumes a copy is shorter than ``STREAM_HOLD_BACK``."""
    pattern = _current_pattern()
    if pattern is None:
        return cut
    for match in pattern.finditer(text, max(0, cut - STREAM_HOLD_BACK), min(len(text), cut + STREAM_HOLD_BACK)):
        if match.start() < cut < match.end():
            return match.start()
        if match.start() >= cut:
            break
    return cut


def holds_secret(text: str) -> bool:
    """Does ``text`` contain a registered secret? (A search: no redacted copy is built.)"""
    pattern = _current_pattern()
    return pattern is not None and bool(text) and pattern.search(text) is not None


def redact_obj(obj: Any) -> Any:
    """Redact every string inside dicts, lists and tuples (keys too); other values pass through."""
    pattern = _current_pattern()
    if pattern is None:
        return obj
    return _redact_obj(obj, pattern)


def _redact_obj(obj: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(obj, str):
        return pattern.sub(REDACTED, obj) if obj else obj
    if isinstance(obj, dict):
        return {_redact_obj(k, pattern): _redact_obj(v, pattern) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact_obj(v, pattern) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_redact_obj(v, pattern) for v in obj)
    return obj


_refresh_from_env()
