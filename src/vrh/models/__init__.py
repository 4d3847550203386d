"""Models: the adapters (:mod:`vrh.models.adapters`, one file per family), loading a checkpoint through one
(:mod:`vrh.models.loading`) and running it (:mod:`vrh.models.generation`)."""
