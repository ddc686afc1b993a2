from hetgen.cli import main

raise SystemExit(main())
