"""Which models share a language-model backbone, read from their checkpoints' files (no weights loaded).

The rule (``pairs = "auto"`` in a study's ``[transfer]``): two models share a backbone when their LM configs
(the ``text_config`` of a VLM's ``config.json``, else the config itself) agree on every key of
:data:`LM_KEYS` and their tokenizers' vocabularies are the same (a hash of ``tokenizer.json``'s
``model.vocab``; when neither model has a readable ``tokenizer.json`` the vocabulary size alone decides,
and :func:`backbone` says so). The LM grid ``(layers, heads)`` comes from the same config, which is what
a study's k checks need before anything loads.

What the rule cannot see: two LMs of the same shape trained apart (organisms A and C have the same LM
config and tokenizer and share no weights). A study that knows its pairs lists them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LM_KEYS = ("model_type", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size",
           "intermediate_size", "vocab_size")


@dataclass(frozen=True)
class Backbone:
    """A model's LM identity: the :data:`LM_KEYS` values and its vocabulary hash (None: not readable)."""

    config: tuple[tuple[str, Any], ...]
    vocab_sha256: str | None

    @property
    def grid(self) -> tuple[int, int]:
        c = dict(self.config)
        return int(c["num_hidden_layers"]), int(c["num_attention_heads"])

    def same_as(self, other: "Backbone") -> bool:
        vocab = (self.vocab_sha256 == other.vocab_sha256 if self.vocab_sha256 and other.vocab_sha256
                 else self.vocab_sha256 is None and other.vocab_sha256 is None)
        return self.config == other.config and vocab


def _checkpoint_file(model: str, name: str) -> Path | None:
    """``name`` in the checkpoint folder of ``model`` (organism alias, local folder, or the hub cache /
    the hub for an id); None when it cannot be had."""
    from vrh.models.loading import resolve_model_path

    path = Path(resolve_model_path(model))
    if path.is_dir():
        return path / name if (path / name).is_file() else None
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(model, name))
    except Exception:  # noqa: BLE001 -- any hub failure (offline, gated, no such file) means: not readable
        return None


def backbone(model: str) -> Backbone:
    """The LM identity of ``model`` from its ``config.json`` (and ``tokenizer.json``); FileNotFoundError
    when the config cannot be read."""
    cfg_file = _checkpoint_file(model, "config.json")
    if cfg_file is None:
        raise FileNotFoundError(f"cannot read the config.json of {model!r} (not a local checkpoint, and not in "
                                "the hub cache or reachable)")
    from vrh.infra.json_text import read_json
    from vrh.models.preflight import FILE_LIMITS, MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH

    cfg = read_json(cfg_file, max_bytes=MAX_CONFIG_BYTES, max_depth=MAX_CONFIG_DEPTH, expect=dict)
    text = cfg.get("text_config") or cfg.get("llm_config") or cfg
    if not isinstance(text, dict):
        raise ValueError(f"{cfg_file}: text_config is not an object")
    if "num_hidden_layers" not in text or "num_attention_heads" not in text:
        raise ValueError(f"{model}: its config.json has no num_hidden_layers / num_attention_heads for the "
                         "language model")
    values = tuple((k, text.get(k)) for k in LM_KEYS)
    tok = _checkpoint_file(model, "tokenizer.json")
    vocab = None
    if tok is not None:
        body = read_json(tok, max_bytes=FILE_LIMITS["tokenizer.json"], max_depth=64, expect=dict)
        vocab = hashlib.sha256(json.dumps((body.get("model") or {}).get("vocab"), sort_keys=True)
                               .encode()).hexdigest()
    return Backbone(config=values, vocab_sha256=vocab)


def shared_backbone_pairs(backbones: dict[str, Backbone]) -> list[tuple[str, str]]:
    """Unordered pairs ``(a, b)`` (in the order given) of models whose backbones are the same.

    >>> b1 = Backbone((("num_hidden_layers", 2), ("num_attention_heads", 4)), "v")
    >>> b2 = Backbone((("num_hidden_layers", 2), ("num_attention_heads", 8)), "v")
    >>> shared_backbone_pairs({"x": b1, "y": b2, "z": b1})
    [('x', 'z')]
    """
    names = list(backbones)
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:] if backbones[a].same_as(backbones[b])]
