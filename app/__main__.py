from app.system import dataclass_code, startup

startup.begin()  # before the imports: see app/system/startup.py
dataclass_code.install()  # likewise: the imports below make most of the process's dataclasses

from app.wiring.cli import main  # noqa: E402  (after begin, on purpose)

raise SystemExit(main())
