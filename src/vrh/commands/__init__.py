"""The ``vrh`` commands: one thin module each (options -> library calls -> run folder).

A command module defines ``NAME``, ``HELP``, a ``Config`` dataclass assembled from :mod:`vrh.infra.options`
groups (its fields are the command's options; ``cli.py`` generates the parser from them) and
``run(cfg, lm=None) -> dict``. Commands with their own argument grammar (``report``, ``organism``) define
``add_arguments(parser)`` and ``main(args)`` instead. Command modules import only :mod:`vrh.infra.options` at
module level (so ``vrh --help`` stays fast) and never import one another.
"""
