"""tidegauge's CLI run inside the test process, for runs that only set a test up.

A ``python -m app`` start costs most of a one-turn headless run (the interpreter, the imports).
Where what a test checks is not the process itself (its exit on a signal, its sockets, its
children) but what a run leaves behind (a session on disk, a transcript to list or resume), the
run goes through ``app.wiring.cli.main`` here instead: the same argument parsing, settings and
session code, with the environment, working directory and stdin the process would have had.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.wiring.cli import main


def run_cli(argv: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``tidegauge ARGV`` with exactly ``env`` as its environment and nothing piped in; the
    outcome shaped as ``subprocess.run(..., capture_output=True, text=True)`` gives it."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, open(os.devnull, encoding="utf-8") as nothing_piped:
        for key in list(os.environ):
            if key not in env:
                mp.delenv(key)
        for key, value in env.items():
            mp.setenv(key, value)
        mp.chdir(cwd)
        mp.setattr(sys, "stdin", nothing_piped)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
    return subprocess.CompletedProcess(["tidegauge", *argv], code, out.getvalue(), err.getvalue())
