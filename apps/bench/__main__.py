from tj_bench.cli import main

raise SystemExit(main())
