"""Where a ``tidegauge`` process starts: the console script and ``python -m app`` alike.

What must happen before the first import of tidegauge's code (the collector's start-up
thresholds, dataclasses' kept methods) happens here, so the installed command and ``python -m
app`` start the same way; the command line is imported only afterwards.
"""

from __future__ import annotations

from app.system import dataclass_code, startup


def prepare() -> None:
    """Before the imports: see app/system/startup.py and app/system/dataclass_code.py."""
    startup.begin()
    dataclass_code.install()


def main() -> int:
    prepare()
    # After prepare, on purpose: importing the command line makes most of the process's classes.
    from app.wiring.cli import main as cli_main

    return cli_main()
