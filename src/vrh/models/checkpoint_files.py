"""Does a checkpoint folder hold the files its processor is built from? One vrh line naming what is missing
and how to save it, before transformers is asked (which, for a folder without tokenizer files, advises
installing sentencepiece, and for one without its processor config names ``preprocessor_config.json`` only).

A processor is a tokenizer (the vocabulary: any of :data:`TOKENIZER_FILES`) and, for the families whose
processor is a transformers class, a processor config (:data:`PROCESSOR_CONFIG_FILES`: how an image becomes
visual tokens). Both are written by ``processor.save_pretrained(FOLDER)``; a model's ``save_pretrained`` writes
neither. The families vrh composes (their adapter ports a published processor, ``ported_remote_code``) read
their own processor files and say so themselves; only their tokenizer is checked here. A hub id is not
checked (its files come from the hub).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# any of these makes a folder carry a tokenizer's vocabulary
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "tekken.json",
                   "qwen.tiktoken", "tokenizer.tiktoken")
# either of these describes a transformers processor (processor_config.json holds the image processor's settings
# since transformers 5; older checkpoints keep them in preprocessor_config.json)
PROCESSOR_CONFIG_FILES = ("processor_config.json", "preprocessor_config.json")
HOW_TO_SAVE = ("save them beside the weights with processor.save_pretrained({folder!r}) (the checkpoint's own "
               "processor; model.save_pretrained writes neither)")


def needs_processor_config(adapter: Any) -> bool:
    """Whether ``adapter``'s processor is a transformers class read from a processor config (False for a family
    vrh composes, whose processor files its own loader names)."""
    return not getattr(adapter, "ported_remote_code", ())


def missing_processor_files(folder: str | Path, adapter: Any = None) -> list[str]:
    """What of the processor ``folder`` lacks, in words (empty: nothing)."""
    folder = Path(folder)
    missing = []
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        missing.append(f"tokenizer files (any of {', '.join(TOKENIZER_FILES[:4])})")
    if (adapter is None or needs_processor_config(adapter)) and \
            not any((folder / name).is_file() for name in PROCESSOR_CONFIG_FILES):
        missing.append(f"processor config ({' or '.join(PROCESSOR_CONFIG_FILES)})")
    return missing


def check_processor_files(path: str, adapter: Any = None) -> None:
    """``FileNotFoundError`` (one line: the folder, what is missing, how to save it) when the local checkpoint
    folder ``path`` lacks its tokenizer files or processor config; nothing for a hub id.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     (Path(d) / "config.json").write_text("{}") and None
    ...     check_processor_files(d)
    Traceback (most recent call last):
    ...
    FileNotFoundError: ... has no tokenizer files (any of tokenizer.json, ...) and no processor config ...
    """
    folder = Path(path)
    if not folder.is_dir():
        return
    missing = missing_processor_files(folder, adapter)
    if missing:
        raise FileNotFoundError(f"{folder} has no {' and no '.join(missing)}, which vrh builds the processor from: "
                                + HOW_TO_SAVE.format(folder=str(folder)))
