from app.wiring.entry import main

raise SystemExit(main())
