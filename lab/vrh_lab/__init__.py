"""The organism lab: how vrh's model organisms are trained (lab/README.md).

A separate package on purpose: it builds on the library (the synthetic world :mod:`vrh.organism.world`,
vrh's masking, scorers' pure functions and grounding judge), and the library never imports it except
lazily, in ``vrh organism ...`` (:mod:`vrh.commands.organism`).
"""
