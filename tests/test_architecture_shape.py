"""The shape ARCHITECTURE.md asks of app/ and widgets/, checked on the source.

- No class is defined inside a function: a class built at each call cannot be read, tested or
  subclassed apart from that call, and takes what it uses from the closure instead of its
  constructor.
- Every import inside a function says why on its line or the line above (a cycle it breaks, a
  cost it keeps off a start-up path, a module only one command needs): an import is at the top of
  its module unless there is a reason, and the reason is written down. A comment explains the
  imports after it in the same row of imports (blank lines allowed between them).
- No one-shot wait is Textual's ``set_timer`` as it comes: one whose deadline passed before its
  task first read the clock (a preempted process) never fires (``widgets/_one_shot.py`` says how).
  Widgets wait with ``OneShot``; the dashboard's App and screen mend their own timers with
  ``late_still_fires``.
"""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize
from pathlib import Path
from typing import Callable

from source_trees import ON_ONE_WORKER, comments, python_files, tree

ROOT = Path(__file__).resolve().parent.parent
pytestmark = ON_ONE_WORKER
FOLDERS = (ROOT / "app", ROOT / "widgets")
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
IMPORTS = (ast.Import, ast.ImportFrom)
# Comments that tell a tool something, not a reader why.
PRAGMAS = ("# type:", "# noqa", "# pragma")


def _sources() -> list[Path]:
    # app/demo/project is the demo's sample project, shipped as data: not tidegauge's code.
    return [p for folder in FOLDERS for p in python_files(folder)]


def classes_inside_functions(source: str | ast.Module) -> list[tuple[int, str]]:
    """(line, name) of each class defined anywhere inside a function's body (of a source, or
    of its tree)."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.ClassDef):
                found.append((child.lineno, child.name))
            visit(child, in_function or isinstance(child, FUNCTIONS))

    visit(ast.parse(source) if isinstance(source, str) else source, False)
    return found


def _explaining(found: list[tuple[int, str]]) -> set[int]:
    """The lines of the comments in ``found`` (line, text) that explain, not tell a tool something."""
    return {line for line, text in found if not text.startswith(PRAGMAS)}


def unexplained_function_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of each import inside a function that no comment explains: one on the line
    above it or on its own lines, or one explaining an import before it in the same group (imports
    in a row, blank lines allowed between them)."""
    return _unexplained_imports(ast.parse(source), lambda: _explaining(
        [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
         if token.type == tokenize.COMMENT]))


def _unexplained_imports(module: ast.Module, commented_lines: Callable[[], set[int]]) -> list[tuple[int, str]]:
    """``unexplained_function_imports`` of a tree; ``commented_lines`` is asked only when the tree
    has an import inside a function (tokenizing a module costs more than parsing it)."""
    found: list[tuple[int, str]] = []
    commented: set[int] | None = None

    def check(group: list[ast.Import | ast.ImportFrom]) -> None:
        nonlocal commented
        if commented is None:
            commented = commented_lines()
        # A comment explains its import and the ones after it in the group.
        explained = False
        for node in group:
            own = set(range(node.lineno - 1, (node.end_lineno or node.lineno) + 1))
            explained = explained or bool(own & commented)
            if not explained:
                module = (node.module or ".") if isinstance(node, ast.ImportFrom) else node.names[0].name
                found.append((node.lineno, module))

    def visit(node: ast.AST, in_function: bool) -> None:
        for _field, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            if in_function and isinstance(value, list):
                group: list[ast.Import | ast.ImportFrom] = []
                for statement in value:
                    if isinstance(statement, IMPORTS):
                        group.append(statement)
                        continue
                    if group:
                        check(group)
                    group = []
                if group:
                    check(group)
            for child in children:
                if isinstance(child, ast.AST):
                    visit(child, in_function or isinstance(child, FUNCTIONS))

    visit(module, False)
    return found


def _offenders(find: Callable[[Path], list[tuple[int, str]]]) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line}: {what}" for path in _sources() for line, what in find(path)]


def textual_one_shot_timers(source: str | ast.Module) -> list[tuple[int, str]]:
    """(line, call) of each ``….set_timer(…)`` call not handed straight to ``late_still_fires``."""
    module = ast.parse(source) if isinstance(source, str) else source
    mended = {id(node.args[0]) for node in ast.walk(module) if isinstance(node, ast.Call) and node.args
              and isinstance(node.func, ast.Name) and node.func.id == "late_still_fires"}
    return [(node.lineno, "set_timer") for node in ast.walk(module)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "set_timer" and id(node) not in mended]


def test_no_class_is_defined_inside_a_function() -> None:
    offenders = _offenders(lambda path: classes_inside_functions(tree(path)))
    assert not offenders, "classes defined inside a function (move each to module level):\n" + "\n".join(offenders)


def test_no_one_shot_wait_is_a_textual_timer_that_a_preempted_process_loses() -> None:
    offenders = _offenders(lambda path: textual_one_shot_timers(tree(path)))
    assert not offenders, "Textual one-shot timers (use widgets._one_shot.OneShot, or late_still_fires):\n" + "\n".join(offenders)


def test_every_import_inside_a_function_says_why() -> None:
    offenders = _offenders(lambda path: _unexplained_imports(tree(path), lambda: _explaining(list(comments(path)))))
    assert not offenders, ("imports inside a function without a comment saying why (move each to the top of "
                           "its module, or say why it stays):\n" + "\n".join(offenders))


def test_the_checks_see_what_they_look_for() -> None:
    """Each check finds its offender in a small source, and passes what the rules allow."""
    source = textwrap.dedent('''
        from typing import TYPE_CHECKING, Protocol

        if TYPE_CHECKING:
            class Typed(Protocol): ...

        class Outer:
            class Message: ...

            def method(self) -> None:
                import json

                import re

                # the SDK is slow to import: only when a server connects
                import mcp

                from app import __version__
                x = 1
                import os  # only here
                x = 2
                import sys  # noqa: F401

            async def later(self) -> None:
                def inner() -> None:
                    class Built: ...
    ''')
    assert classes_inside_functions(source) == [(26, "Built")]
    assert textual_one_shot_timers("self.set_timer(0.1, self.tick)\nself.set_interval(1, self.tick)\n"
                                   "late_still_fires(super().set_timer(0.1, self.tick))\n") == [(1, "set_timer")]
    assert unexplained_function_imports(source) == [(11, "json"), (13, "re"), (22, "sys")]
