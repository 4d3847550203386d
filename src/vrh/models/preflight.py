"""What vrh checks of a checkpoint before transformers is asked to load it: that it never runs its own code, and
that its ``config.json`` is an object whose sizes can be built (:func:`read_config`).

Why the first: a checkpoint folder may come from anyone. transformers runs Python shipped inside it (``modeling_*.py``,
``processing_*.py``, ``tokenization_*.py``) when one of the JSON files its ``Auto`` classes read names a class in
an ``auto_map``; asked with ``trust_remote_code`` unset, it prompts on the terminal ("Do you wish to run the
custom code? [y/N]") and runs the code on ``y``. vrh therefore (1) passes ``trust_remote_code=False`` to every
``from_pretrained`` it calls (a test reads every call in ``src/vrh``), so transformers refuses instead of
prompting, and (2) refuses, before any of them runs, a folder whose files name remote code, in one line naming
the file and the key (:func:`refuse_remote_code`).

The files are those transformers 5 reads an ``auto_map`` from (:data:`REMOTE_CODE_FILES`: ``AutoConfig`` and the
model classes read ``config.json``; ``AutoProcessor`` the processor, image/feature-extractor, video-processor and
tokenizer configs; ``AutoTokenizer`` ``tokenizer_config.json``), plus ``custom_generate/generate.py`` (a model's
replacement ``generate``). A family vrh composes from native parts (:mod:`vrh.models.composed`: DeepSeek-VL2,
Magma, Phi-4-Reasoning-Vision) ships as a remote-code checkpoint; its adapter's ``ported_remote_code`` lists the
files whose ``auto_map`` names the code vrh's port replaces: vrh reads those files itself, never through an
``Auto`` class, so what they name cannot run (every other file is checked as for any family).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# every file of a checkpoint transformers 5.x reads an ``auto_map`` from (its *_NAME constants; checked against
# transformers' own readers in tests/models/test_preflight.py)
REMOTE_CODE_FILES = ("config.json", "processor_config.json", "preprocessor_config.json",
                     "video_preprocessor_config.json", "tokenizer_config.json", "audio_tokenizer_config.json")
CUSTOM_GENERATE = "custom_generate/generate.py"  # transformers' replacement generate(), run only when trusted
MAX_CONFIG_BYTES = 64 * 2**20  # a config file larger than this is refused unread (real ones are under 1 MB)


class RemoteCodeRefused(ValueError):
    """A checkpoint names code of its own (an ``auto_map``); vrh never runs it."""


def _located(path: str, name: str, revision: str | None) -> Path | None:
    """``name`` of the checkpoint ``path`` (a folder, or a hub id: its file in the cache, fetched if absent and
    reachable, as transformers would fetch it next); None when it has none."""
    folder = Path(path)
    if folder.is_dir():
        found = folder / name
        return found if found.is_file() else None
    from transformers.utils import cached_file

    try:
        got = cached_file(path, name, revision=revision, _raise_exceptions_for_missing_entries=False,
                          _raise_exceptions_for_connection_errors=False, _raise_exceptions_for_gated_repo=False)
    except OSError:  # what transformers says of an unreadable hub id comes from the loader itself, next
        return None
    return Path(got) if got else None


def _names(auto_map: Any) -> str:
    """What an ``auto_map`` names, short: ``AutoProcessor -> processing_evil.EvilProcessor``."""
    if isinstance(auto_map, dict):
        shown = [f"{k} -> {v}" for k, v in list(auto_map.items())[:3]]
        return ", ".join(shown) + (f" (+{len(auto_map) - 3} more)" if len(auto_map) > 3 else "")
    text = " ".join(str(auto_map).split())
    return text[:120] + ("..." if len(text) > 120 else "")


def refuse_remote_code(path: str, *, ported: tuple[str, ...] = (), revision: str | None = None) -> None:
    """Raise :class:`RemoteCodeRefused` (one line: the file, the key, what it names) when the checkpoint ``path``
    names code of its own in a file transformers would act on; ``ported``: files whose ``auto_map`` vrh's own port
    of the family replaces (see the module docstring). A file that is not a JSON object is the loader's to refuse.

    >>> import json, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = (Path(folder) / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": "t.T"}}))
    >>> refuse_remote_code(folder)
    Traceback (most recent call last):
    ...
    vrh.models.preflight.RemoteCodeRefused: .../tokenizer_config.json names remote code (auto_map: AutoTokenizer -> t.T); vrh never runs a checkpoint's own code
    """
    from vrh.data.json_text import read_json

    for name in REMOTE_CODE_FILES:
        if name in ported:
            continue
        file = _located(path, name, revision)
        if file is None:
            continue
        data = read_json(file, max_bytes=MAX_CONFIG_BYTES)
        if isinstance(data, dict) and "auto_map" in data:
            raise RemoteCodeRefused(f"{file} names remote code (auto_map: {_names(data['auto_map'])}); vrh never "
                                    "runs a checkpoint's own code")
    custom = Path(path) / CUSTOM_GENERATE
    if custom.is_file():
        raise RemoteCodeRefused(f"{custom} is a checkpoint's own generate() (transformers' custom_generate); vrh "
                                "never runs a checkpoint's own code")


def read_config(path: str, revision: str | None = None) -> dict[str, Any]:
    """The raw ``config.json`` of the checkpoint ``path`` (a folder or a hub id), read without transformers: a
    JSON object, at most :data:`MAX_CONFIG_BYTES`, its ``model_type`` (where given) a string; anything else one
    line naming the file."""
    from vrh.data.json_text import kind, read_json

    file = _located(path, "config.json", revision)
    if file is None:
        raise FileNotFoundError(f"{path} has no config.json (a checkpoint folder holds one)")
    config = read_json(file, max_bytes=MAX_CONFIG_BYTES, expect=dict)
    model_type = config.get("model_type", "")
    if not isinstance(model_type, str):
        raise ValueError(f"{file}: model_type is {kind(model_type)}, not a string naming the model family")
    return config
