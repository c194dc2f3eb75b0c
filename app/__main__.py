from app.system import startup

startup.begin()  # before the imports: see app/system/startup.py

from app.wiring.cli import main  # noqa: E402  (after begin, on purpose)

raise SystemExit(main())
