from vrh.cli import main

raise SystemExit(main())
