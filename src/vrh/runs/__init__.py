"""Run folders: the hand-off between vrh's stages, and the one place their contents are defined.

A run folder holds ``config.json`` (fully resolved settings plus versions, git hash, model and data
identity), ``samples.jsonl`` (one line per finished sample, appended and flushed as it finishes, so a crash
loses nothing that finished), ``results.json`` (written last: a folder without it did not finish) and
stage outputs: ``head_scores.json``, ``sample_scores.npz``, ``overlays.npz`` (detection), ``pairs.jsonl``
(dpo-pairs), ``emergence.jsonl`` (an organism's training log of head-score maps, also kept beside an exported
organism checkpoint; ``vrh organism emergence`` makes a run folder of it). Every artefact name lives here,
with a typed reader and writer; every write either succeeds or raises (a failed write fails the run). The
report reads run folders only through this module.

Folder policy (:class:`RunFolder`): a new run refuses a non-empty folder unless told ``overwrite`` or
``resume`` (finished samples are kept and the config must match). ``overwrite`` clears only a folder that
identifies itself as a vrh run (:func:`is_run_folder`: a ``config.json`` carrying the ``vrh_run`` mark that
only :meth:`RunFolder.write_config` writes), and removes only what a run folder can contain
(:func:`run_folder_contents`: the artefacts named here, sub-runs, the extra files of the command that wrote
it, and its subfolders only as far as their record of what vrh wrote goes, :mod:`vrh.runs.written`); a model
checkpoint folder, or a run folder holding anything else, is refused with the names. ``resume`` refuses what
``overwrite`` refuses: it rewrites ``results.json`` and trims a torn ``samples.jsonl``.

One writer per folder: a :class:`RunFolder` holds an exclusive OS lock (``flock`` on ``.vrh-lock``, which
holds the writer's pid) from before it looks at the folder until the run ends (:meth:`RunFolder.release`,
also on ``with`` exit); a crashed process's lock dies with it. A second process gets
:class:`RunFolderInUse` naming the folder and the holder's pid.

Data-parallel runs (:mod:`vrh.infra.distributed`): every rank appends its records to its own
``samples.rank{r}-of-{w}.jsonl`` (:func:`shard_name`); rank 0 alone clears the folder, writes
``config.json`` and the stage outputs, and merges the shards into ``samples.jsonl`` before it writes
``results.json``. A resumed run (any number of processes) counts the records of every shard as finished.
Detection also keeps ``detect_state/batch-NNNNNN.pt``, one file per finished batch (:func:`write_batch_state`),
removed once the run is finished.

Every ``torch.load`` in vrh goes through :func:`load_torch_file` (``weights_only=True``: a planted pickle
cannot run code), and ``.npz`` artefacts keep user strings (sample ids, scorer names) as data, never as
array names (:func:`_write_named_arrays`).

Every removal in vrh follows :mod:`vrh.runs.written`: remove only what vrh recorded writing, or refuse and
name what was found. Every open, write, rename and removal below a folder vrh was given goes through
:mod:`vrh.runs.safe_paths`: no symlink is followed out of it, in any component.

The contract is split in nine modules, all re-exported here (``from vrh import runs; runs.RunFolder``):
:mod:`vrh.runs.folder` (names, the folder being written and its clean-up), :mod:`vrh.runs.lock` (its one-writer
lock), :mod:`vrh.runs.config_diff` (a resume's config compared with the folder's), :mod:`vrh.runs.written` (the
record of what vrh wrote in a folder, the one removal rule), :mod:`vrh.runs.artefacts`
(typed readers and writers), :mod:`vrh.runs.records` (:class:`SampleRecord`, the type of a ``samples.jsonl``
line), and :mod:`vrh.runs.results` with :mod:`vrh.runs.results_characterize` and
:mod:`vrh.runs.results_dpo` (the ``results.json`` of every kind of run: one typed value each, its keys and
their order, ``to_json`` for the command writing it and ``from_json`` for the report reading it).
"""

from vrh.runs.artefacts import (read_config, read_results, read_samples, is_finished, MODEL_CARD, read_model_card,
    DetectionSplit,
    read_detection_split, HeadScores, write_head_scores, read_head_scores, NPZ_FORMAT, write_sample_scores,
    read_sample_scores, write_overlays, read_overlays, write_emergence, read_emergence, EMERGENCE_TASKS,
    emergence_causal_task, iter_runs, write_batch_state, read_batch_states, load_torch_file,
    clear_batch_states)
from vrh.runs.folder import (CONFIG, SAMPLES, RESULTS, HEAD_SCORES, SAMPLE_SCORES, OVERLAYS, PAIRS, EMERGENCE,
    DETECT_STATE, SHARD_GLOB, ARTEFACTS, RUN_MARK, RUN_FORMAT, COMMAND_FILES, SCHEMA_VERSION, git_hash,
    environment, write_json, read_json, read_jsonl, iter_jsonl, shard_name, write_jsonl, RunFolder,
    is_run_folder, run_folder_contents, clear_run_folder)
from vrh.runs.lock import LOCK, RunFolderInUse
from vrh.runs.config_diff import config_differences
from vrh.runs.records import SampleRecord
from vrh.runs.results import (ENVELOPE, RunResults, TaskSummary, ControlEntry, RandomControlReport, DetectResults,
    EvaluateResults, DpoPairsResults, EmergenceResults, VrhCurve, RandomCurve, KCurves, SweepResults, DemoVqa,
    DemoKCurve, DemoResults, results_type, results_from_json)
from vrh.runs.results_characterize import (MethodCurve, CompareRandom, CompareResults, TransferResults, TokenChoice,
    StabilityResults)
from vrh.runs.results_dpo import DpoResults, DpoTrainResults

__all__ = ["ARTEFACTS", "COMMAND_FILES", "CONFIG", "CompareRandom", "CompareResults", "ControlEntry", "DETECT_STATE",
           "DemoKCurve", "DemoResults", "DemoVqa", "DetectResults", "DetectionSplit", "DpoPairsResults",
           "DpoResults", "DpoTrainResults", "EMERGENCE",
           "EMERGENCE_TASKS", "ENVELOPE", "EmergenceResults", "EvaluateResults", "HEAD_SCORES", "HeadScores",
           "KCurves", "LOCK", "MODEL_CARD", "MethodCurve", "NPZ_FORMAT", "OVERLAYS", "PAIRS", "RESULTS", "RUN_FORMAT", "RUN_MARK",
           "RandomControlReport", "RandomCurve", "RunFolder", "RunFolderInUse", "RunResults", "SAMPLES",
           "SAMPLE_SCORES", "SCHEMA_VERSION", "SHARD_GLOB", "SampleRecord", "StabilityResults", "SweepResults",
           "TaskSummary", "TokenChoice", "TransferResults", "VrhCurve", "clear_batch_states", "clear_run_folder",
           "config_differences",
           "emergence_causal_task", "environment", "git_hash", "is_finished", "is_run_folder", "iter_runs",
           "load_torch_file", "read_batch_states", "read_config", "read_detection_split", "read_emergence",
           "read_head_scores", "read_json", "read_jsonl", "iter_jsonl", "read_model_card", "read_overlays", "read_results",
           "read_sample_scores", "read_samples", "results_from_json", "results_type", "run_folder_contents",
           "shard_name", "write_batch_state", "write_emergence", "write_head_scores", "write_json", "write_jsonl",
           "write_overlays", "write_sample_scores"]
