"""The dashboard's CSS, parsed once and kept beside the bytecode of the ``styles`` package.

Textual parses every CSS source from its text in every process: styles/tidegauge.tcss and the
``DEFAULT_CSS`` of each widget class on screen, about 15,000 characters, some 92M instructions
(callgrind) of the first frame, where ``import textual.app`` is about 790M. What a source parses to
depends only on its text, where it was read from, its three flags and the theme's variables, so
the same inputs always give the same rules. ``KeptStylesheet`` looks each source up among the
rules an earlier process parsed and parses only those it does not find; the rules it parsed are
written at exit, each source's on its own, so a source the first frame does not need (a dialog's)
costs the next start only its bytes.

Written against Textual's ``Stylesheet._parse_rules`` (textual is pinned in pyproject.toml): same
arguments, and the same rules as Textual's own parse (tests/test_kept_stylesheet.py compares them).

Trust: the file is in the ``styles`` package's own bytecode folder (``styles/__pycache__``, or under
``sys.pycache_prefix``): whoever can write it can already write the ``.pyc`` files there, which
Python runs without asking. Even so it is read by an unpickler that builds nothing but what parsed
rules are made of (``_RESOLVABLE``; ``getattr`` only for an enum's member or a rules dict's lookups): a
file naming anything else (``os.system``, ``builtins.eval`` ...) is not read, and the CSS is parsed
as without it. It is read only if it starts with ``HEADER``, is at most ``MAX_BYTES`` and was
written for these files of Textual and these variables; written only where Python itself writes
bytecode, to a temporary file renamed over the old one.
"""

from __future__ import annotations

import atexit
import functools
import io
import os
import pickle
import sys
from typing import Any

import textual
from textual.color import Color
from textual.css import model as css_model
from textual.css import parse as css_parse
from textual.css import styles as css_styles
from textual.css.model import CombinatorType, RuleSet, Selector, SelectorSet, SelectorType
from textual.css.scalar import Scalar, ScalarOffset, Unit
from textual.css.stylesheet import CSSLocation, Stylesheet
from textual.css.styles import Styles
from textual.geometry import Spacing

import styles as tidegauge_styles
from app.system.kept_files import path_beside_bytecode, read_kept, write_kept

HEADER = b"tidegauge kept css 1\n"
# The dashboard's sources and its dialogs' come to ~0.1 MB; a file far larger is not one this wrote.
MAX_BYTES = 4 * 1024 * 1024
FILE_STEM = "kept-css"
# Sources no longer asked for (an older tidegauge.tcss, another theme's) stay in the file until it
# holds this many; then it keeps only what the last process used.
MAX_ENTRIES = 400

# (css, read_from, is_default_rules, tie_breaker, scope): Stylesheet._parse_rules's arguments.
SourceKey = tuple[str, CSSLocation, bool, int, str]


# The layouts a rule's ``layout:`` names, imported (as Textual's parser does) when a rule names one.
_LAYOUTS = {("textual.layouts.grid", "GridLayout"), ("textual.layouts.horizontal", "HorizontalLayout"),
            ("textual.layouts.stream", "StreamLayout"), ("textual.layouts.vertical", "VerticalLayout")}


# Everything a parsed rule is made of, and nothing else: the unpickler builds these or refuses.
_RESOLVABLE: dict[tuple[str, str], Any] = {
    **{(thing.__module__, thing.__qualname__): thing for thing in (
        Color, CombinatorType, RuleSet, Selector, SelectorSet, SelectorType, Scalar, ScalarOffset, Unit,
        Styles, Spacing, functools.partial,
        css_model._check_universal, css_model._check_type, css_model._check_class, css_model._check_id)},
}
_ENUMS = (CombinatorType, SelectorType, Unit)


# A ``Styles`` keeps its rules dict's ``get`` and ``__contains__`` as attributes (bound methods).
_DICT_METHODS = frozenset({"get", "__contains__"})


def _member(owner: Any, name: str) -> Any:
    """``getattr`` as the unpickler may call it: a member of one of the rules' enums, or a rules
    dict's ``get`` or ``__contains__``; nothing else."""
    if type(owner) is dict and name in _DICT_METHODS:
        return getattr(owner, name)
    if owner in _ENUMS and isinstance(name, str) and name in owner.__members__:
        return owner.__members__[name]
    raise pickle.UnpicklingError(f"not a CSS enum's member nor a rules dict's method: {name!r}")


class _RulesUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "getattr"):
            return _member
        if (module, name) in _LAYOUTS:
            import importlib  # only the four layout modules above

            return getattr(importlib.import_module(module), name)
        try:
            return _RESOLVABLE[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"not part of a parsed CSS rule: {module}.{name}") from None


def _unpickle(data: bytes) -> Any:
    return _RulesUnpickler(io.BytesIO(data)).load()


def textual_stamp() -> tuple[tuple[int, int], ...]:
    """The size and modification time of the Textual files that parse and make rules: the kept
    rules are those files' output, and an upgrade rewrites them."""
    stamp = []
    for module in (textual, css_parse, css_model, css_styles):
        info = os.stat(module.__file__ or "")
        stamp.append((info.st_size, info.st_mtime_ns))
    return tuple(stamp)


def cache_path() -> str:
    """Where the rules are kept: the ``styles`` package's bytecode folder, named for this interpreter."""
    return path_beside_bytecode(os.path.dirname(os.path.abspath(tidegauge_styles.__file__ or "")), FILE_STEM, "pickle")


class KeptRules:
    """The rules kept in one file: each source's pickled on its own, unpickled when first asked for."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.variables: dict[str, str] | None = None
        self._pickled: dict[SourceKey, bytes] = {}
        # Rules already unpickled and checked, for the next stylesheet of this process (a web server's
        # dashboards, a test run's): Textual reads a parsed rule and never changes it, so each
        # stylesheet gets a list of its own holding the same rules, not ~4 ms of unpickling again.
        self._unpickled: dict[SourceKey, list[RuleSet]] = {}
        self._used: set[SourceKey] = set()
        self._new = False
        self.parsed = 0  # sources this process parsed (not found kept): for tests and benchmarks
        self._read()

    def _read(self) -> None:
        data = read_kept(self.path, HEADER, MAX_BYTES)
        if data is None:
            return
        try:
            loaded = _unpickle(data)
        except (EOFError, ValueError, TypeError, AttributeError, IndexError, pickle.UnpicklingError):
            return
        if not (isinstance(loaded, dict) and loaded.get("textual") == textual_stamp()
                and isinstance(loaded.get("variables"), dict) and isinstance(loaded.get("sources"), dict)):
            return
        self.variables = loaded["variables"]
        self._pickled = {key: data for key, data in loaded["sources"].items() if isinstance(data, bytes)}

    def rules(self, key: SourceKey, variables: dict[str, str]) -> list[RuleSet] | None:
        """The rules kept for this source under these variables, or None."""
        if variables != self.variables:
            return None
        if (known := self._unpickled.get(key)) is not None:
            return list(known)
        data = self._pickled.get(key)
        if data is None:
            return None
        self._used.add(key)
        try:
            rules = _unpickle(data)
        except Exception:  # anything but what this module wrote: parsed instead, and kept anew
            del self._pickled[key]
            return None
        if not (isinstance(rules, list) and all(isinstance(rule, RuleSet) for rule in rules)):
            del self._pickled[key]
            return None
        self._unpickled[key] = rules
        return list(rules)

    def keep(self, key: SourceKey, variables: dict[str, str], rules: list[RuleSet]) -> None:
        """Keep a source's freshly parsed rules (written at exit)."""
        self.parsed += 1
        if sys.dont_write_bytecode or any(rule.errors for rule in rules):
            return
        if variables != self.variables:
            if self._used:  # a theme chosen after the start: the kept rules stay the start's
                return
            self.variables = dict(variables)  # the start's variables are no longer the file's
            self._pickled = {}
            self._unpickled = {}
        try:
            self._pickled[key] = pickle.dumps(rules, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):  # a rule made of something new: parsed each time
            return
        self._used.add(key)
        if not self._new:
            self._new = True
            atexit.register(self.save)

    def save(self) -> None:
        """Write the file if this process parsed a source it did not hold (where bytecode is written)."""
        if not self._new or sys.dont_write_bytecode or self.variables is None:
            return
        self._new = False
        sources = self._pickled
        if len(sources) > MAX_ENTRIES:
            sources = {key: data for key, data in sources.items() if key in self._used}
        data = HEADER + pickle.dumps({"textual": textual_stamp(), "variables": self.variables,
                                      "sources": sources}, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > MAX_BYTES:
            return
        write_kept(self.path, data)


_shared: KeptRules | None = None


def shared_rules() -> KeptRules:
    """This process's kept rules (read once: a web server's dashboards share them)."""
    global _shared
    if _shared is None:
        _shared = KeptRules(cache_path())
    return _shared


class KeptStylesheet(Stylesheet):
    """Textual's ``Stylesheet``, whose sources are parsed only when no earlier process kept their rules."""

    def __init__(self, kept: KeptRules, *, variables: dict[str, str] | None = None) -> None:
        super().__init__(variables=variables)
        self.kept = kept
        self._unpickled: dict[SourceKey, list[RuleSet]] = {}

    @classmethod
    def replacing(cls, stylesheet: Stylesheet, kept: KeptRules) -> KeptStylesheet:
        """A kept stylesheet with ``stylesheet``'s variables (an App's, before it has read any CSS)."""
        return cls(kept, variables=stylesheet._variables)

    def _parse_rules(self, css: str, read_from: CSSLocation, is_default_rules: bool = False,
                     tie_breaker: int = 0, scope: str = "") -> list[RuleSet]:
        key: SourceKey = (css, read_from, is_default_rules, tie_breaker, scope)
        variables = self._variables
        rules = self._unpickled.get(key)
        if rules is None:
            rules = self.kept.rules(key, variables)
        if rules is None:
            rules = super()._parse_rules(css, read_from, is_default_rules, tie_breaker, scope)
            self.kept.keep(key, variables, rules)
        self._unpickled[key] = rules
        return rules

    def set_variables(self, variables: dict[str, str]) -> None:
        super().set_variables(variables)
        self._unpickled.clear()  # parsed under the old variables
