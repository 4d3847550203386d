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

import json
from pathlib import Path
from typing import Any

# every file of a checkpoint transformers 5.x reads an ``auto_map`` from (its *_NAME constants; checked against
# transformers' own readers in tests/models/test_preflight.py)
REMOTE_CODE_FILES = ("config.json", "processor_config.json", "preprocessor_config.json",
                     "video_preprocessor_config.json", "tokenizer_config.json", "audio_tokenizer_config.json")
CUSTOM_GENERATE = "custom_generate/generate.py"  # transformers' replacement generate(), run only when trusted
MAX_CONFIG_BYTES = 64 * 2**20  # a config file larger than this is refused unread (real ones are under 1 MB)
MAX_CONFIG_DEPTH = 32  # levels a config.json may nest (real ones: 3-4, a sub-config's rope settings)


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
    from vrh.infra.json_text import read_json

    for name in REMOTE_CODE_FILES:
        if name in ported:
            continue
        file = _located(path, name, revision)
        if file is None:
            continue
        data = read_json(file, max_bytes=MAX_CONFIG_BYTES, max_depth=MAX_CONFIG_DEPTH)
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
    from vrh.infra.json_text import kind, read_json

    file = _located(path, "config.json", revision)
    if file is None:
        raise FileNotFoundError(f"{path} has no config.json (a checkpoint folder holds one)")
    config = read_json(file, max_bytes=MAX_CONFIG_BYTES, max_depth=MAX_CONFIG_DEPTH, expect=dict)
    model_type = config.get("model_type", "")
    if not isinstance(model_type, str):
        raise ValueError(f"{file}: model_type is {kind(model_type)}, not a string naming the model family")
    check_sizes(config, file)
    return config


# The integer sizes a config may give (in any sub-config), each bounded far above any released model's (Llama 4's
# 10M positions, 256k vocabularies, 16k hidden): a value past one would make transformers allocate terabytes
# (a 1e11-position buffer) before any weight is read.
SIZE_LIMITS = {"hidden_size": 2**16, "intermediate_size": 2**20, "num_hidden_layers": 2**10,
               "num_attention_heads": 2**10, "num_key_value_heads": 2**10, "head_dim": 2**12, "vocab_size": 2**22,
               "max_position_embeddings": 2**24, "image_size": 2**15, "patch_size": 2**10, "num_channels": 2**6}
# the other files a load reads whole, and the most vrh reads of each (real ones: tokenizer.json under 40 MB)
FILE_LIMITS = {"tokenizer.json": 256 * 2**20, "tokenizer.model": 256 * 2**20, "vocab.json": 256 * 2**20,
               "merges.txt": 256 * 2**20, "chat_template.jinja": 4 * 2**20, "chat_template.json": 4 * 2**20,
               "special_tokens_map.json": MAX_CONFIG_BYTES, "added_tokens.json": MAX_CONFIG_BYTES,
               "generation_config.json": MAX_CONFIG_BYTES, "model.safetensors.index.json": MAX_CONFIG_BYTES}
MAX_SAFETENSORS_HEADER = 100 * 2**20  # what the safetensors library itself accepts
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
                "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def check_sizes(config: dict[str, Any], file: Path | str) -> None:
    """Every size of :data:`SIZE_LIMITS` in ``config`` (and its sub-configs) an integer (or a list of them) within
    its bound; else one line naming the file and the key.

    >>> check_sizes({"text_config": {"hidden_size": 2**40}}, "config.json")
    Traceback (most recent call last):
    ...
    ValueError: config.json: text_config.hidden_size is 1099511627776, more than the 65536 any model has
    """
    def walk(node: dict[str, Any], where: str) -> None:
        for key, value in node.items():
            name = f"{where}{key}"
            if isinstance(value, dict):
                walk(value, name + ".")
            elif key in SIZE_LIMITS and value is not None:
                values = value if isinstance(value, list) else [value]
                if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                    raise ValueError(f"{file}: {name} is {value!r}, not an integer size")
                limit = SIZE_LIMITS[key]
                for v in values:
                    if not 0 <= v <= limit:
                        raise ValueError(f"{file}: {name} is {v}, more than the {limit} any model has"
                                         if v > limit else f"{file}: {name} is {v}, a negative size")

    walk(config, "")


def _check_safetensors(file: Path) -> None:
    """A safetensors file's header read and checked against the file before the library maps it: a header
    length within the file and :data:`MAX_SAFETENSORS_HEADER`, a JSON object whose every tensor's dtype, shape and
    byte range agree and lie inside the file."""
    from vrh.infra import json_text

    size = file.stat().st_size
    with open(file, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if n < 0 or n > min(size - 8, MAX_SAFETENSORS_HEADER):
            raise ValueError(f"{file}: not a safetensors file (its header claims {n:,} bytes of a {size:,}-byte "
                             f"file; at most {MAX_SAFETENSORS_HEADER:,})")
        raw = f.read(n)
    try:
        header = json_text.loads(raw.decode("utf-8"), max_depth=4)
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{file}: its safetensors header is not JSON ({' '.join(str(e).split())[:120]})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{file}: its safetensors header is {json_text.kind(header)}, not an object")
    data = size - 8 - n
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        ok = isinstance(entry, dict) and entry.get("dtype") in _DTYPE_BYTES
        shape, offsets = (entry.get("shape"), entry.get("data_offsets")) if ok else (None, None)
        ok = ok and isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                   for d in shape)
        ok = ok and isinstance(offsets, list) and len(offsets) == 2 and all(
            isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        if ok:
            count = 1
            for d in shape:
                count *= d
            ok = 0 <= offsets[0] <= offsets[1] <= data and offsets[1] - offsets[0] == count * _DTYPE_BYTES[entry["dtype"]]
        if not ok:
            raise ValueError(f"{file}: tensor {name[:80]!r} claims a dtype, shape or byte range that the file does "
                             f"not hold ({' '.join(json.dumps(entry)[:120].split())}; {data:,} bytes of data)")


def check_files(path: str) -> None:
    """A local checkpoint folder's other files checked before a loader reads them (a hub id: nothing here; its
    files come from the hub): each of :data:`FILE_LIMITS` within its size, ``tokenizer.json`` and the weight
    index JSON objects (the index naming plain file names inside the folder), every ``*.safetensors`` header
    consistent with its file (:func:`_check_safetensors`). One line naming the file for anything wrong."""
    from vrh.infra.json_text import read_json

    folder = Path(path)
    if not folder.is_dir():
        return
    for name, limit in FILE_LIMITS.items():
        file = folder / name
        if file.is_file() and file.stat().st_size > limit:
            raise ValueError(f"{file} is {file.stat().st_size:,} bytes, more than the {limit:,} vrh reads of a "
                             f"{name} (real ones are far smaller)")
    if (folder / "tokenizer.json").is_file():
        read_json(folder / "tokenizer.json", max_bytes=FILE_LIMITS["tokenizer.json"], max_depth=64, expect=dict)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index, max_bytes=MAX_CONFIG_BYTES, expect=dict).get("weight_map")
        if not isinstance(weight_map, dict) or not all(
                isinstance(v, str) and v and Path(v).name == v and v not in (".", "..") for v in weight_map.values()):
            raise ValueError(f"{index}: weight_map is not an object of tensor name -> a file name in this folder")
    for file in sorted(folder.glob("*.safetensors")):
        _check_safetensors(file)
