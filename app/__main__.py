from app.wiring.cli import main

raise SystemExit(main())
