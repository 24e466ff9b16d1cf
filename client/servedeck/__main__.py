"""`python -m servedeck`: the same as the `servedeck` command."""

from servedeck.cli import main

raise SystemExit(main())
