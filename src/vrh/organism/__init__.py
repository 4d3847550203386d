"""What the library needs of the model organism at run time: the synthetic world (:mod:`vrh.organism.world`,
``vrh demo``'s data) and the shipped checkpoints (``checkpoints/``, found by
:func:`vrh.models.loading.organism_path`). How the organisms are trained is the lab's (package ``vrh_lab``,
``lab/`` in a source checkout), which imports vrh and is never imported by it."""
