from carl_tui.cli import main

raise SystemExit(main())
