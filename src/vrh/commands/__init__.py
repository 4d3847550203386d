"""The ``vrh`` commands: one thin module each (options -> one library call -> run folder).

A command module defines ``NAME``, ``HELP``, a ``Config`` (the settings type of its library call, from
:mod:`vrh.experiments.settings`, or a dataclass assembled from :mod:`vrh.options` groups; its fields are the
command's options and ``cli.py`` generates the parser from them) and ``run(cfg, lm=None) -> dict``, which
makes the one library call and returns its results as JSON. Commands with their own argument grammar
(``report``, ``organism``, ``data``, ``models``, ``study``) define ``add_arguments(parser)`` and ``main(args)``
instead. Command modules import only :mod:`vrh.options` and :mod:`vrh.experiments.settings` at module level
(so ``vrh --help`` stays fast and torch-free) and never import one another.
"""
