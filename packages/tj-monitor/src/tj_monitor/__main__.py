from tj_monitor.cli import main

raise SystemExit(main())
