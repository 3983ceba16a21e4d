"""The ``rafka`` command line: ``main.py`` the entry point and the registry of tools, one
module per tool (each with ``configure(parser)`` and ``run(args)``), ``args.py`` what the
tools share."""
