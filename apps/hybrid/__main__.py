from tj_hybrid.cli import main

raise SystemExit(main())
