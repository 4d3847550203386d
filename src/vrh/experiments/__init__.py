"""Experiments: each one a function that writes a run folder (detect, evaluate, sweep, ...)."""
