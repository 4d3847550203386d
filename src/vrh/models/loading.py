"""Loading a checkpoint through its adapter: a local folder, a hub id or the shipped organism, on a device or
spread by a device map (tensor parallelism refused: it splits heads across devices).

What runs the loaded model (greedy answers, the query sets of a batch) is :mod:`vrh.models.generation`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vrh.models import answer_formats, checkpoint_files, preflight
from vrh.models.adapters import Adapter, get_adapter
from vrh.infra.console import quiet_library_progress

ORGANISM_ALIAS = "organism"
HUB_PROBE_TIMEOUT_S = 3.0  # how long to wait for the hub before calling an uncached hub id unavailable
_TRUE = {"1", "ON", "YES", "TRUE"}  # how huggingface_hub and transformers read their *_OFFLINE variables


def organism_path(name: str = "") -> Path:
    """Folder of the shipped model organism checkpoint (``vrh/organism/checkpoints/<name>``)."""
    root = Path(__file__).resolve().parents[1] / "organism" / "checkpoints"
    found = sorted(p for p in root.iterdir() if (p / "config.json").exists()) if root.exists() else []
    if not found:
        raise FileNotFoundError(f"no organism checkpoint shipped under {root}")
    if not name:
        return found[0]
    if not (root / name / "config.json").exists():
        have = ", ".join(f"{ORGANISM_ALIAS}:{p.name}" for p in found)
        raise FileNotFoundError(f"no organism {name!r} here; this install has {have} (an installed wheel ships "
                                "organism_a only; the others are in a source checkout of vrh)")
    return root / name


def _organism_guess(model: str) -> str | None:
    """``organism`` or ``organism:NAME`` when ``model`` looks like a typo of one (``organsim``, ``organism_c``)."""
    import difflib

    try:
        shipped = [p.name for p in organism_path().parent.iterdir() if (p / "config.json").exists()]
    except FileNotFoundError:
        return None
    meant = {ORGANISM_ALIAS: ORGANISM_ALIAS}  # what was typed, nearly -> what to type
    for name in shipped:
        meant[f"{ORGANISM_ALIAS}:{name}"] = meant[name] = f"{ORGANISM_ALIAS}:{name}"
    found = difflib.get_close_matches(model, list(meant), n=1, cutoff=0.75)
    return meant[found[0]] if found else None


def resolve_model_path(model: str, materialize: bool = True) -> str:
    """``organism`` / ``organism:NAME`` -> the shipped checkpoint; anything else is a path or hub id.

    An organism shipped as deltas on a base from the package index (organism D, :mod:`vrh.models.deltas`)
    resolves to its full folder, rebuilt from the base on first use, and so does a local folder of deltas (what
    ``vrh organism build d`` exports); ``materialize=False`` gives the folder itself (config.json and the
    organism's records, no weights: enough to check a name or inspect)."""
    from vrh.models import deltas

    if model == ORGANISM_ALIAS or model.startswith(ORGANISM_ALIAS + ":"):
        folder = organism_path(model.partition(":")[2])
        if materialize and deltas.is_delta_folder(folder):
            return str(deltas.materialize(folder))
        return str(folder)
    if materialize and deltas.needs_materializing(model):
        return str(deltas.materialize(model))
    return model


@dataclass
class LoadedModel:
    model: nn.Module
    processor: Any
    adapter: Adapter
    path: str  # resolved local path or hub id
    revision: str | None = None

    @property
    def num_layers(self) -> int:
        return self.adapter.num_layers(self.model)

    @property
    def num_heads(self) -> int:
        return self.adapter.num_heads(self.model)

    @property
    def device(self) -> torch.device:
        """Where inputs go: the input embeddings' device (see :func:`input_device`)."""
        return input_device(self.model)

    def describe(self) -> dict[str, Any]:
        return {"path": self.path, "revision": self.revision, "adapter": self.adapter.name,
                "model_type": self.model.config.model_type, "num_layers": self.num_layers,
                "num_heads": self.num_heads, "dtype": str(next(self.model.parameters()).dtype),
                "answer_format": answer_formats.record(self.adapter)}

    def with_answer_format(self, spec: str | answer_formats.AnswerFormat | None) -> LoadedModel:
        """This model answering in the variant ``spec`` names (:func:`vrh.models.answer_formats.resolve`; None:
        the family's first); the same weights, a copy of the adapter (this one is not changed)."""
        fmt = answer_formats.resolve(spec, self.adapter)
        return replace(self, adapter=answer_formats.apply(self.adapter, fmt))


def input_device(model: nn.Module) -> torch.device:
    """The device the model's inputs must be on: that of its input embeddings.

    Why not ``next(model.parameters())``: with a ``device_map`` the first parameter (often the vision
    tower's) may sit on another GPU than the embeddings, and an offloaded embedding's weight is on
    ``meta`` while accelerate's hook runs it on its ``execution_device``.
    """
    emb = model.get_input_embeddings()
    hooked = getattr(getattr(emb, "_hf_hook", None), "execution_device", None)
    if hooked is not None:
        return torch.device("cuda", hooked) if isinstance(hooked, int) else torch.device(hooked)
    return emb.weight.device


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")  # transformers' named placements
_TENSOR_PARALLEL = ("tp", "tp_plan", "tensor_parallel")


class TensorParallelRefused(ValueError):
    """Tensor parallelism was asked for; vrh's head indices assume every head of a layer in one process."""


def _refuse_tensor_parallel(what: str) -> None:
    raise TensorParallelRefused(
        f"{what}: tensor parallelism is not supported. It splits each layer's heads across ranks, so a "
        "rank's o_proj input and attention rows hold only its own slice and (layer, head) indices would "
        "silently point at other heads. Use --device-map auto (whole heads, layers spread over GPUs), "
        "combined with data parallelism over groups of GPUs (README, 'Models larger than one GPU').")


def resolve_device_map(device_map: str | dict | None) -> str | dict | None:
    """``--device-map`` text -> what ``from_pretrained(device_map=...)`` takes; refuses tensor parallelism.

    None stays None (the whole model on ``--device``); a name from :data:`DEVICE_MAPS` stays as is; a JSON
    object (``'{"model.visual": 0, "model.language_model": 1, "lm_head": 1}'``) becomes a dict. A dict
    passes through.

    >>> resolve_device_map('{"": "cpu"}')
    {'': 'cpu'}
    """
    if device_map is None or isinstance(device_map, dict):
        return device_map
    text = device_map.strip()
    if text.lower() in _TENSOR_PARALLEL:
        _refuse_tensor_parallel(f"--device-map {device_map!r}")
    if text in DEVICE_MAPS:
        return text
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"--device-map {device_map!r} is not valid JSON: {e}") from None
        if isinstance(parsed, dict):
            return parsed
    raise ValueError(f"--device-map {device_map!r}: expected one of {', '.join(DEVICE_MAPS)} or a JSON object "
                     '{"module.name": device}')


def check_device_map_launch(device_map: str | dict | None, env: dict[str, str] | None = None) -> None:
    """Refuse a named ``device_map`` when several processes of a data-parallel launch share this node.

    Why: each process would spread its copy of the model over *every* visible GPU, so the copies pile onto
    the same GPUs. Combine the two by making each GPU group its own torchrun "node" (``--nnodes`` groups,
    one process each, ``CUDA_VISIBLE_DEVICES`` = the group): then one process sees only its group. An
    explicit JSON map is the user's own placement and passes.
    """
    env = os.environ if env is None else env
    local = int(env.get("LOCAL_WORLD_SIZE") or 1)
    if isinstance(device_map, str) and local > 1:
        raise ValueError(
            f"--device-map {device_map}: {local} processes share this node, and each would spread its model "
            "copy over all of its GPUs. Run one process per GPU group instead: each group its own torchrun "
            "node with --nproc-per-node 1 and CUDA_VISIBLE_DEVICES set to the group (README, 'Models larger "
            "than one GPU').")


def check_device(device: str) -> None:
    """Refuse a ``--device`` this torch cannot use (a CUDA device on a CPU-only build, an index beyond the
    GPUs present) with one line, before anything is loaded."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"--device {device!r} is not a torch device ({e}); e.g. cpu, cuda, cuda:1, mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise ValueError(f"--device {device}: this torch ({torch.__version__}, {build}) sees no CUDA GPU; "
                             "install a CUDA build of torch, or use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    elif dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"--device {device}: MPS is not available in this torch on this machine; use --device cpu")


def load_model(model: str, *, device: str = "cpu", dtype: str = "float32", revision: str | None = None,
               adapter: str | None = None, device_map: str | dict | None = None,
               answer_format: str | answer_formats.AnswerFormat | None = None) -> LoadedModel:
    """Load a checkpoint (local folder, hub id, or the ``organism`` alias) through its adapter: ``adapter``
    (a registered name or ``package.module:Class``, see docs/adapters.md) or the one its model type picks,
    answering in the variant ``answer_format`` names (:mod:`vrh.models.answer_formats`; None: the family's
    first, checked before the weights load).

    ``device_map`` (see :func:`resolve_device_map`; needs ``accelerate``) spreads a model too big for one
    GPU over several; ``device`` is then not used and inputs go to :func:`input_device`. Tensor parallelism
    is refused (:class:`TensorParallelRefused`).

    The model type is read from the raw ``config.json``, not through ``AutoConfig``: for a remote-code
    family that would run (or interactively offer to run) the checkpoint's code; vrh refuses it instead, and a
    folder that names code of its own in any file transformers reads (:mod:`vrh.models.preflight`)."""
    check_device(device)
    quiet_library_progress()
    device_map = resolve_device_map(device_map)  # before any download: a bad value fails at once
    check_device_map_launch(device_map)
    if device_map is not None and importlib.util.find_spec("accelerate") is None:
        raise ImportError(f"--device-map {device_map!r} needs the accelerate package (transformers places the "
                          "model through it): pip install accelerate")

    path = resolve_model_path(model)
    looks_local = path.startswith(("/", "./", "../", "~")) or Path(path).exists()
    if looks_local and not Path(path).expanduser().exists():  # hub ids ("org/name") go to the hub cache
        raise FileNotFoundError(f"model folder {path} does not exist")
    path = str(Path(path).expanduser()) if looks_local else path
    if not looks_local:
        try:
            check_hub_id_available(path, revision)
        except FileNotFoundError as e:
            guess = _organism_guess(model)
            raise FileNotFoundError(f"{e}" + (f"; did you mean {guess!r}?" if guess else "")) from None
    config = preflight.read_config(path, revision)
    chosen = get_adapter(config.get("model_type", ""), adapter=adapter)
    if not getattr(chosen, "runs_remote_code", False):  # a custom adapter's explicit opt-in (docs/adapters.md)
        preflight.refuse_remote_code(path, ported=getattr(chosen, "ported_remote_code", ()), revision=revision)
    preflight.check_files(path)  # sizes and headers, before anything is allocated from them
    checkpoint_files.check_processor_files(path, chosen)  # one line naming a missing tokenizer / processor config
    fmt = answer_formats.resolve(answer_format, chosen)  # a bad name fails before the weights load
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose from {sorted(DTYPES)}")
    placement = {} if device_map is None else {"device_map": device_map}  # custom adapters may predate it
    try:
        m, processor = chosen.load(path, dtype=DTYPES[dtype], device=device, **placement)
    except pickle.UnpicklingError as e:  # torch's weights_only loader refused a pytorch_model.bin: say what to do
        raise UnsafeCheckpoint(_pickle_refusal(path, e)) from None
    if (getattr(m, "tp_size", None) or 1) > 1:  # a checkpoint whose config asks for a TP plan under torchrun
        _refuse_tensor_parallel(f"model {path} was loaded tensor-parallel (tp_size={m.tp_size})")
    m.eval()
    return LoadedModel(m, processor, answer_formats.apply(chosen, fmt), path, revision)


class UnsafeCheckpoint(ValueError):
    """A checkpoint's pickled weights hold more than tensors; loading them could run code, so vrh refuses."""


def _pickle_refusal(path: str, err: Exception) -> str:
    """The one-line refusal of a ``pytorch_model.bin`` that torch's ``weights_only`` unpickler would not read.

    >>> line = _pickle_refusal("ck", Exception("... WeightsUnpickler error: Unsupported global: GLOBAL os.system "
    ...                                        "was not an allowed global by default. ..."))
    >>> line.split(";")[0]
    'model ck: its pickled weights (...) are not only tensors (the pickle refers to os.system)'
    """
    text = str(err)
    found = re.search(r"Unsupported global: GLOBAL (\S+)", text)
    if found:
        what = f"are not only tensors (the pickle refers to {found.group(1)})"
    else:
        detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
        what = f"are not a plain tensor pickle ({detail.group(1).strip() if detail else 'torch refused them'})"
    return (f"model {path}: its pickled weights (pytorch_model*.bin, no model.safetensors) {what}; vrh never "
            "unpickles objects, since that runs code the file's author chose. If you trust the file, convert the "
            "checkpoint to safetensors (torch.load(..., weights_only=False), then safetensors.torch.save_file "
            "into model.safetensors, or save_pretrained) and pass the converted folder")


def _offline_variable() -> str | None:
    """Name of the set offline variable, read now (huggingface_hub reads its own once, at import)."""
    return next((v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
                 if os.environ.get(v, "").strip().upper() in _TRUE), None)


def _hub_unreachable(repo_id: str, revision: str | None) -> str | None:
    """Why the hub cannot serve ``repo_id`` right now (``None``: it answered, whatever it said).

    One metadata request with a short timeout; through huggingface_hub, so proxies and tokens apply.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    url = hf_hub_url(repo_id, "config.json", revision=revision)
    try:
        get_hf_file_metadata(url, timeout=HUB_PROBE_TIMEOUT_S)
    except HfHubHTTPError:  # a response (404, 401, ...): reachable; transformers explains the status
        return None
    except Exception as e:  # noqa: BLE001 - no response at all (DNS, refused, timeout, proxy): the
        # transport errors of huggingface_hub's HTTP client share no base class we can name without it
        detail = " ".join(str(e).split())  # the message stays one line
        return f"the hub could not be reached within {HUB_PROBE_TIMEOUT_S:g}s ({type(e).__name__}: {detail})"
    return None


def check_hub_id_available(repo_id: str, revision: str | None = None, cache_dir: str | None = None) -> None:
    """Fail at once, in one line, when ``repo_id`` is neither cached locally nor downloadable now.

    Without this, transformers spends its retries on an unreachable hub (tens of seconds) and ends in a
    long traceback that never says "pass a local folder". Cached ids and reachable hubs pass untouched;
    no request is made when the id is cached or an offline variable is set.
    """
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    cache = cache_dir or constants.HF_HUB_CACHE
    try:
        cached = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache, revision=revision)
    except HFValidationError:
        raise FileNotFoundError(f"model {repo_id!r} is neither an existing folder nor a valid hub id "
                                "(org/name); pass a local checkpoint folder, e.g. /path/to/checkpoint"
                                ) from None
    if cached is not None:  # a path, or the cached fact that config.json is absent: transformers' call
        return
    offline = _offline_variable()
    why = f"{offline} is set" if offline else _hub_unreachable(repo_id, revision)
    if why:
        at = f"@{revision}" if revision else ""
        raise FileNotFoundError(f"model {repo_id!r}{at} is not a local folder and nothing is cached for it in "
                                f"{cache}, and {why}; pass a local checkpoint folder instead, "
                                "e.g. /path/to/checkpoint")
