"""The argument parser of tidegauge's subcommands that run under ``cli._run_setup``.

A flag it does not know, or one without its value, is a ``SetupError``: one line naming the
subcommand and where its flags are listed, exit 2, like every bad input (argparse's own usage
block would bury the one word that was wrong).
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from app.kernel.errors import SetupError


class SubcommandParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        name = self.prog.split()[-1]  # "tidegauge rewind" -> "rewind"
        raise SetupError(f"{name}: {message} (tidegauge {name} --help lists the flags)")
