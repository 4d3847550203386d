"""Datasets: the project's JSONL sample format (:mod:`vrh.data.jsonl`)."""

from vrh.data.jsonl import (
    ANSWER_RULES,
    ANSWER_TYPES,
    BOX_FORMATS,
    TASKS,
    DatasetError,
    LoadReport,
    Sample,
    Samples,
    check_answer,
    dataset_hash,
    load_dataset,
    split_detect_eval,
    write_dataset,
)

__all__ = ["ANSWER_RULES", "ANSWER_TYPES", "BOX_FORMATS", "TASKS", "DatasetError", "LoadReport", "Sample", "Samples",
           "check_answer", "dataset_hash", "load_dataset", "split_detect_eval", "write_dataset"]
