"""tidegauge's own source files, read and parsed once per test process, for the checks on the source.

The static checks (the import rules, the architecture's shape, the core's private state, where
chart points are made) each walk every module of app/ and widgets/; parsing them was most of
each check's cost, about a second each time. The trees are kept for the process's lifetime and
left out of the collector (``gc.freeze``): ~300,000 nodes that only live on would make every full
collection of the worker walk them again. A check must not change a tree it is given.
"""

from __future__ import annotations

import ast
import gc
import io
import tokenize
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@lru_cache(maxsize=None)
def source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def tree(path: Path) -> ast.Module:
    """The module at ``path`` parsed (once per process; shared: never changed by a check)."""
    parsed = ast.parse(source(path), str(path))
    # Moving the tracked objects to the permanent generation is a constant-time splice; what a
    # test holds at this moment is frozen too, which only delays freeing its cycles to the exit.
    gc.freeze()
    return parsed


@lru_cache(maxsize=None)
def comments(path: Path) -> tuple[tuple[int, str], ...]:
    """(line, text) of each comment in ``path`` (tokenized: a ``#`` inside a string is none)."""
    return tuple((token.start[0], token.string)
                 for token in tokenize.generate_tokens(io.StringIO(source(path)).readline)
                 if token.type == tokenize.COMMENT)


def python_files(folder: Path, *, with_demo_project: bool = False) -> list[Path]:
    """The ``.py`` files under ``folder``, sorted; app/demo/project, the demo's sample project
    shipped as data and not tidegauge's code, is left out unless asked for."""
    return sorted(p for p in folder.rglob("*.py")
                  if with_demo_project or "project" not in p.relative_to(folder).parts)


# The checks on the source run on one xdist worker, so the trees are parsed once in the suite, not
# once in each worker that happens to run one of them (``--dist loadgroup``, pyproject.toml).
ON_ONE_WORKER = pytest.mark.xdist_group("source-trees")
