"""The analyses: one folder each (``detect/``, ``sweep/``, ...), whose ``__init__`` registers what the analysis is
(:mod:`vrh.analyses.registry`: its command, settings, run, results kind, report sections, study cell kinds and an
example command line). The command line, the report, the study and the tests list the analyses from the
registry, so a new analysis is one folder here (or a package of a user's own named in ``VRH_PLUGINS``) and no
edit elsewhere (docs/howto/add-an-analysis.md).

An analysis folder's ``__init__`` imports only :mod:`vrh.options`, settings types and the registry at module
level (``vrh --help`` imports every registration, and stays torch-free); its run and report sections are
imported on first use. :mod:`vrh.analyses.reporting` hands the report every registered section.
"""
