"""Datasets: the project's JSONL sample format (:mod:`vrh.data.jsonl`) and the names of the benchmarks' answer
rules it accepts (:mod:`vrh.data.answer_rule_registry`)."""

from vrh.data.answer_rule_registry import answer_rule_names, register_answer_rule
from vrh.data.jsonl import (
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
    write_dataset,
)
from vrh.data.split import split_detect_eval

__all__ = ["ANSWER_TYPES", "BOX_FORMATS", "TASKS", "DatasetError", "LoadReport", "Sample", "Samples", "answer_rule_names",
           "check_answer", "dataset_hash", "load_dataset", "register_answer_rule", "split_detect_eval", "write_dataset"]
