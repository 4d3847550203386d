"""Organism D: a Gemma 3 VLM on the pretrained Gemma 3 270M language model (:mod:`vrh.models.gemma_base`), a
small SigLIP tower pretrained on the synthetic world, a projector and low-rank adapters (docs/organism.md)."""
