"""Model families vrh refuses, each with the reason and what a user can do instead.

Not an adapter: :func:`vrh.models.adapters.get_adapter` consults it when no registered adapter serves a checkpoint's
``config.model_type``, so the user gets one line naming the family, why vrh cannot study it and what to do,
instead of a transformers traceback or, worse, transformers' interactive ``trust_remote_code`` prompt.

Two kinds of refusal:

* **remote code**: the family's modelling code lives in the checkpoint's repository, not in transformers.
  Loading it means executing that code (``trust_remote_code=True``), which vrh never enables on its own: a
  user who trusts the code writes a custom adapter whose ``load`` opts in explicitly (docs/adapters.md). Any
  model type transformers does not know is refused this way, listed here or not.
* **contract**: transformers loads the family natively, but the way it reads the image does not fit vrh's
  contract (none listed now: Llama 3.2 Vision, whose image enters only through cross-attention layers, was
  one until vrh read cross-attention keys; see the mllama adapter).

``box_convention`` and ``token_layout`` are what is known of the family (the ``vrh models`` listing);
"unverified" marks what no vrh test has checked.
"""

from __future__ import annotations

from dataclasses import dataclass

DOCS = "docs/adapters.md"


@dataclass(frozen=True)
class Refusal:
    """One refused family. ``reason`` completes "refused: ..."; ``remedy`` says what to do instead."""

    name: str  # short id, as an adapter's name
    model_types: tuple[str, ...]  # config.model_type values
    kind: str  # "remote code" or "contract"
    reason: str
    remedy: str
    box_convention: str = "(not stated)"
    token_layout: str = "(not stated)"

    def message(self, model_type: str) -> str:
        """The one-line error a user sees for a checkpoint of this family."""
        return f"model type {model_type!r} ({self.name}) is refused: {self.reason}; {self.remedy}"


_CUSTOM = f"to study it anyway, write a custom adapter whose load() opts in to the remote code (see {DOCS}) " \
          "and pass it with --adapter"

REFUSALS: tuple[Refusal, ...] = (
    Refusal("phi3_vision", ("phi3_v",), "remote code",
            "Phi-3/3.5-Vision is not native in transformers and loading it runs the checkpoint's own code "
            "(trust_remote_code), which vrh never enables", _CUSTOM),
    Refusal("kimi_vl", ("kimi_vl",), "remote code",
            "Kimi-VL is not native in transformers and loading it runs the checkpoint's own code "
            "(trust_remote_code), which vrh never enables", _CUSTOM),
    Refusal("internvl_chat", ("internvl_chat",), "remote code",
            "this is InternVL's original remote-code checkpoint (trust_remote_code, which vrh never enables)",
            "use the transformers-native '-hf' checkpoint of the same model instead (e.g. "
            "OpenGVLab/InternVL3-8B-hf), which vrh's internvl adapter serves",
            box_convention="[[x1, y1, x2, y2]], 0-1000 relative (as the internvl adapter)",
            token_layout="as the internvl adapter (the -hf checkpoint has the same weights)"),
)


def find_refusal(model_type: str) -> Refusal | None:
    """The refusal listed for ``model_type``, or None."""
    return next((r for r in REFUSALS if model_type in r.model_types), None)


def native_in_transformers(model_type: str) -> bool:
    """Whether the installed transformers defines ``model_type`` (so loading it runs no remote code)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return model_type in CONFIG_MAPPING_NAMES


def remote_code_message(model_type: str) -> str:
    """The refusal for a model type transformers does not know and this module does not list."""
    import transformers

    return (f"model type {model_type!r} is refused: transformers {transformers.__version__} does not define "
            f"it, so loading it would run the checkpoint's own code (trust_remote_code), which vrh never "
            f"enables (or it needs a newer transformers); {_CUSTOM}")
