"""``python -m rafka ...``: the same CLI as the ``rafka`` script."""
from rafka.cli.main import main

raise SystemExit(main())
