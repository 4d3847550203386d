"""Training the model organisms: tokenizer and processor, model, batches, the two training stages, the
staged build (``vrh organism build``), held-out evaluation and emergence tracking (docs/organism.md)."""
