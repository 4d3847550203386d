"""``vrh study``: the paper's matrix (models x grounding benchmarks x VQA sets x protocol) declared in one
study file and run as resumable cells, each an ordinary run folder of an existing command (docs/study.md).

:mod:`~vrh.study.spec` (the study file and its checks, :mod:`~vrh.study.checks`, with the bounds of its values in
:mod:`~vrh.study.values`), :mod:`~vrh.study.backbones` (which models share a language model),
:mod:`~vrh.study.datasets` (preparing its datasets),
:mod:`~vrh.study.cells` (a cell, its fingerprint and state, and the registry of cell kinds) with
:mod:`~vrh.study.kinds` (the built-in kinds, each registered once with its table and the library call its cells
run), :mod:`~vrh.study.execute` (running them in one process) and :mod:`~vrh.study.cluster` (as submitit jobs).
"""
