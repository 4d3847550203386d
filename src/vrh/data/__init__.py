"""Datasets: the project's JSONL sample format (:mod:`vrh.data.jsonl`)."""

from vrh.data.jsonl import (
    BOX_FORMATS,
    TASKS,
    DatasetError,
    LoadReport,
    Sample,
    Samples,
    dataset_hash,
    load_dataset,
    split_detect_eval,
    write_dataset,
)

__all__ = ["BOX_FORMATS", "TASKS", "DatasetError", "LoadReport", "Sample", "Samples", "dataset_hash",
           "load_dataset", "split_detect_eval", "write_dataset"]
