"""What vrh needs to know about a model family, in one small declarative class per family.

An adapter answers: how to load the model, how to turn (image, prompt[, answer]) into model inputs, where
the language model's attention modules and ``o_proj`` layers are, how many layers/heads there are, which
rectangle of the *original* image each visual token covers (taken from the processor's outputs, never
guessed from a token count), and how the family writes a box in its answers.

Register an adapter in its own file with ``@register_adapter``; :func:`get_adapter` picks it by the
checkpoint's ``config.model_type``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn


Box = tuple[float, float, float, float]  # (x1, y1, x2, y2), original-image pixels


@dataclass
class VisionBatch:
    """Model inputs for B samples plus the per-sample token maps vrh needs.

    Sequences are left-padded to one length S; every position below is an index into that padded
    sequence (0 <= pos < S), per sample. Except in a cross-attention family (Llama 3.2 Vision, whose adapter
    lists ``cross_attention_layers``): there the text holds no visual token, and ``visual_positions`` index the
    cross-attention keys, the vision states (:func:`vrh.core.layout.visual_key_space`).

    ``visual_rects[b][v]`` is the part of the original image visual token v was computed from.
    ``cell_tokens[b][v]`` says whether that part is one *cell* of the sample's fine token grid (a Qwen merged
    patch, a LLaVA patch, one InternVL tile's 28-px cell): only cell tokens may enter K (the tokens that
    cover the GT box) and only they form the row-major grid that grid-based scorers read. Tokens that are
    not cells keep a finite rectangle that says what they see, documented per family: a thumbnail or
    global-view token has the coarse cell of the downscaled whole image it came from (InternVL, Idefics3),
    a class token or a row-newline token has the whole image. Why a flag and not NaN rectangles: overlays and
    plots still need a place to draw every token, and ``rects[cell]`` is one obvious selection.

    ``meta[b]["token_grid"]`` (rows, cols), where an adapter sets it: the fine grid of the sample's tokens. When
    it has exactly V_b places, the visual tokens ARE that grid, row-major (non-cell places included, such as
    LLaVA's padding-only patches): detection hands it to grid-based scorers. Never counted off the rectangles.
    """

    inputs: dict[str, torch.Tensor]  # kwargs for model(**inputs) and model.generate(**inputs)
    visual_positions: list[torch.Tensor]  # per sample: LongTensor [V_b] positions of visual tokens
    visual_rects: list[torch.Tensor]  # per sample: FloatTensor [V_b, 4] xyxy original-image pixels
    expression_positions: list[torch.Tensor]  # per sample: LongTensor [E_b] positions of the expression
    answer_positions: list[torch.Tensor] | None  # per sample: LongTensor [A_b] teacher-forced answer tokens
    image_sizes: list[tuple[int, int]]  # per sample: original (width, height)
    meta: list[dict[str, Any]] = field(default_factory=list)  # per sample, adapter-specific (resized size)
    cell_tokens: list[torch.Tensor] = field(default_factory=list)  # per sample: BoolTensor [V_b]; [] = all cells

    def __post_init__(self) -> None:
        import torch

        if not self.cell_tokens:
            self.cell_tokens = [torch.ones(len(v), dtype=torch.bool) for v in self.visual_positions]
        for b, (v, c) in enumerate(zip(self.visual_positions, self.cell_tokens, strict=True)):
            if c.dtype != torch.bool or c.shape != v.shape:
                raise ValueError(f"cell_tokens[{b}] must be a bool tensor of shape {tuple(v.shape)}, got "
                                 f"{c.dtype} {tuple(c.shape)}")

    @property
    def batch_size(self) -> int:
        return len(self.visual_positions)

    @property
    def seq_len(self) -> int:
        return int(self.inputs["input_ids"].shape[1])


class Adapter:
    """Base class; subclasses set the class attributes and override what differs."""

    name: str = ""  # short id used in run folders and on the CLI
    model_types: tuple[str, ...] = ()  # config.model_type values this adapter serves
    box_convention: str = ""  # how answers write a box: coordinates and format (vrh models)
    token_layout: str = ""  # visual tokens -> image, one line (vrh models)
    model_class: str = ""  # transformers class the default load() builds, e.g. "LlavaForConditionalGeneration"
    processor_class: str = ""  # transformers processor class: the image-only fallback of load_processor()
    prompt_template: str = ""  # the default grounding_prompt(): a template with an {expression} slot
    # prompt/answer variants (vrh.models.answer_formats.AnswerFormat), the first the family's default; () = one,
    # answer_formats.NATIVE: prompt_template / grounding_prompt, parse_box and format_box as written here
    answer_formats: tuple = ()
    answer_format = None  # the variant in use, set by answer_formats.apply (None: the family's own methods)
    answer_sep: str = ""  # text between the generation prompt and a teacher-forced answer (chat_spans)
    # files whose auto_map names remote code this family's vrh port replaces (read by vrh itself, never by an Auto
    # class): the published checkpoint ships them; any other auto_map is refused (vrh.models.preflight)
    ported_remote_code: tuple[str, ...] = ()
    runs_remote_code = False  # True only in a custom adapter whose load() opts in to the checkpoint's code itself

    # --- loading -------------------------------------------------------------------------------
    def load(self, path: str, *, dtype: torch.dtype | None = None, device: str = "cpu",
             attn_implementation: str = "sdpa", device_map: str | dict | None = None) -> tuple[nn.Module, Any]:
        """Load (model, processor) from a local path or hub id; offline when HF_HUB_OFFLINE is set.

        ``device_map`` (None: the whole model on ``device``) goes to ``from_pretrained`` unchanged, e.g.
        ``"auto"`` to spread a model too big for one GPU over several; the model is then left where
        transformers placed it (``.to(device)`` would undo the split).

        The default, shared by the built-in families: ``transformers.<model_class>.from_pretrained``, the
        processor from :meth:`processor_for` with left padding (vrh's batches are left-padded), the
        family's :meth:`on_load` checks and settings, then the model placed and in eval mode. ``dtype`` None:
        float32 (a default that needs no torch to import this module)."""
        import torch

        dtype = torch.float32 if dtype is None else dtype
        if not self.model_class:
            raise NotImplementedError(f"{type(self).__name__} sets no model_class and does not override load()")
        cls = getattr(importlib.import_module("transformers"), self.model_class)
        model = cls.from_pretrained(path, dtype=dtype, attn_implementation=attn_implementation, device_map=device_map,
                                    trust_remote_code=False)
        processor = self.processor_for(path)
        processor.tokenizer.padding_side = "left"
        self.on_load(model, processor)
        return (model if device_map is not None else model.to(device)).eval(), processor

    def processor_for(self, path: str) -> Any:
        """The processor saved at ``path`` (see :func:`load_processor`)."""
        return load_processor(path, self.processor_class)

    def on_load(self, model: nn.Module, processor: Any) -> None:
        """What a family checks or sets once model and processor are loaded, before the model is placed
        (a processor setting that only the model config has, the answer separator the chat template
        implies). Default: nothing."""

    # --- structure -----------------------------------------------------------------------------
    def text_config(self, model: nn.Module):
        cfg = model.config
        return getattr(cfg, "text_config", cfg)

    def num_layers(self, model: nn.Module) -> int:
        return int(self.text_config(model).num_hidden_layers)

    def num_heads(self, model: nn.Module) -> int:
        return int(self.text_config(model).num_attention_heads)

    def head_dim(self, model: nn.Module) -> int:
        cfg = self.text_config(model)
        return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)

    def decoder_layers(self, model: nn.Module) -> nn.ModuleList:
        """The language model's decoder layers, index = vrh layer index."""
        return model.model.language_model.layers

    def attention_module(self, model: nn.Module, layer: int) -> nn.Module:
        return self.decoder_layers(model)[layer].self_attn

    def o_proj(self, model: nn.Module, layer: int) -> nn.Linear:
        return self.attention_module(model, layer).o_proj

    def vision_encoder(self, model: nn.Module) -> nn.Module | None:
        """The module that turns the batch's pixels into features, called once per prompt forward: where
        :mod:`vrh.core.sharing` computes each distinct image once for all the rows that show it. It must treat
        the entries of its first input (images, tiles or patches; or, given ``grid_thw``, each image's patches)
        independently. Default: the first of ``visual``, ``vision_tower``, ``vision_model``, ``vision`` on ``model.model``
        or ``model`` (every built-in family); None (the vision share is then off) where there is none."""
        from torch import nn

        for owner in (getattr(model, "model", None), model):
            for name in ("visual", "vision_tower", "vision_model", "vision"):
                found = getattr(owner, name, None) if owner is not None else None
                if isinstance(found, nn.Module):
                    return found
        return None

    def cross_attention_layers(self, model: nn.Module) -> tuple[int, ...]:
        """Layers whose attention module cross-attends to the vision states (Llama 3.2 Vision); none by
        default: the visual tokens are positions of the text sequence (see :mod:`vrh.core.layout`)."""
        return ()

    # --- prompts and inputs --------------------------------------------------------------------
    def grounding_prompt(self, expression: str) -> str:
        """``prompt_template`` with the expression in its slot; a family without one overrides this."""
        if not self.prompt_template:
            raise NotImplementedError(f"{type(self).__name__} sets no prompt_template and does not override "
                                      "grounding_prompt()")
        return self.prompt_template.format(expression=expression)

    def expression_offset(self, prompt: str, expression: str) -> int:
        """Where ``expression`` starts in ``prompt``: at the template's own slot when ``prompt`` is this
        family's grounding prompt (so an expression such as "left" or "image" is not found inside the
        template's fixed words), else its first occurrence.

        >>> class A(Adapter):
        ...     def grounding_prompt(self, e): return f"Give the top-left corner of {e}."
        >>> A().expression_offset("Give the top-left corner of left.", "left")
        28
        """
        probe = "\x00vrh-expression\x00"
        try:
            template = self.grounding_prompt(probe)
        except NotImplementedError:
            template = ""
        slot = template.find(probe)
        if slot >= 0 and template.replace(probe, expression) == prompt:
            return slot
        found = prompt.find(expression)
        if found < 0:
            raise ValueError(f"expression {expression!r} is not a substring of prompt {prompt!r}")
        return found

    def vqa_prompt(self, question: str) -> str:
        return question

    def chat_spans(self, prompts: list[str], answers: list[str] | None, expressions: list[str] | None,
                   render: Callable[[str], str], *, image_token: str | None = None
                   ) -> tuple[list[str], list[dict[str, tuple[int, int]]]]:
        """Each prompt's chat text, with its answer teacher-forced after ``answer_sep`` when ``answers`` are given,
        and per sample the character spans ``{"expression": (c0, c1), "answer": (c0, c1)}`` in that text (a key
        only where ``expressions`` / ``answers`` are given).

        ``render`` turns a prompt into the family's rendered chat (its template, with or without a leading BOS);
        ``image_token``, where given, must occur exactly once in each chat. The prompt is found as the last
        occurrence of its text in the chat, the expression at :meth:`expression_offset` inside it.

        >>> class A(Adapter):
        ...     answer_sep = " "
        >>> A().chat_spans(["find a cat"], ["[1, 2]"], ["a cat"], lambda p: f"<img>USER: {p} ASSISTANT:",
        ...                image_token="<img>")
        (['<img>USER: find a cat ASSISTANT: [1, 2]'], [{'expression': (16, 21), 'answer': (33, 39)}])
        """
        texts, spans = [], []
        for i, prompt in enumerate(prompts):
            chat = render(prompt)
            if image_token is not None and chat.count(image_token) != 1:
                raise ValueError(f"expected one {image_token!r} in the rendered chat, got {chat.count(image_token)}")
            p0 = chat.rfind(prompt)
            if p0 < 0:
                raise ValueError("the chat template altered the prompt text; cannot locate the expression")
            sp: dict[str, tuple[int, int]] = {}
            if expressions is not None:
                e0 = p0 + self.expression_offset(prompt, expressions[i])
                sp["expression"] = (e0, e0 + len(expressions[i]))
            if answers is not None:
                chat += self.answer_sep
                sp["answer"] = (len(chat), len(chat) + len(answers[i]))
                chat += answers[i]
            texts.append(chat)
            spans.append(sp)
        return texts, spans

    def build_batch(self, processor: Any, images: list, prompts: list[str],
                    answers: list[str] | None = None, expressions: list[str] | None = None) -> VisionBatch:
        """Chat-format, tokenize and left-pad. With ``answers``, append them teacher-forced and fill
        ``answer_positions``; ``expressions`` (substrings of the prompts) fill ``expression_positions``."""
        raise NotImplementedError

    # --- answers -------------------------------------------------------------------------------
    def decode(self, processor: Any, token_ids: torch.Tensor) -> list[str]:
        """Generated ids ``[B, T]`` (new tokens only) -> answer strings. Families whose box format uses
        special tokens (Qwen2-VL's ``<|box_start|>``) override this to keep them."""
        return processor.batch_decode(token_ids, skip_special_tokens=True)

    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        """The first valid box in the model's text, converted to original-image pixels, or None."""
        raise NotImplementedError

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        """A GT box written the way this family answers (for teacher-forcing on the GT answer)."""
        raise NotImplementedError


class ChatTemplateAdapter(Adapter):
    """Shared ``build_batch`` for families whose processor renders a chat template with one image
    placeholder per sample and expands it into the visual tokens (Qwen-VL, LLaVA, InternVL, ...).

    Subclasses provide :meth:`visual_map` (token -> original-image rectangle, from the processor outputs)
    and may set ``answer_sep`` (text between the generation prompt and a teacher-forced answer) or override
    :meth:`feature_token_id` (which token of the expansion carries a visual feature).

    Token positions come from the processor's own record of what it did to the text
    (``return_text_replacement_offsets=True``: each placeholder's ``new_span`` in the expanded text), never
    from assuming the placeholder became n copies of one token: InternVL wraps its tokens in
    ``<img>...</img>``, Gemma 3 adds newlines and begin/end markers, PaliGemma a prefix. The visual tokens
    are the feature tokens inside the image's span; the expression and the answer are located by the
    tokenizer's character offsets on the expanded text, so they are exact whatever the tokenizer merges; a
    token that straddles a span edge counts as inside.
    """

    def chat_text(self, processor: Any, prompt: str) -> str:
        """The rendered chat (user turn with the image then ``prompt``, plus the generation prompt)."""
        from vrh.models import chat_templates

        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        with chat_templates.bounded(chat_templates.whose(processor)):  # the checkpoint's template: bounded
            return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    bos = "one"  # how the tokenized prompt begins (vrh.models.answer_formats.BOS_MODES); a variant may set another

    def leading_bos(self, processor: Any, chat: str) -> str:
        """``chat`` as it is tokenized: with :meth:`one_bos` applied (``bos = "one"``), or as the template wrote it
        (``"template"``: a tokenizer that adds its own BOS then gives two, as a family's authors' code may)."""
        return chat if self.bos == "template" else self.one_bos(processor, chat)

    @staticmethod
    def one_bos(processor: Any, chat: str) -> str:
        """``chat`` without its leading BOS when the tokenizer adds one itself, so that the sequence starts with
        exactly one: released templates write it (Gemma 3's ``<bos>``, Idefics3's ``<|begin_of_text|>``, Mistral
        LLaVA-NeXT's ``{{ bos_token }}``) and their tokenizers add another. The same single BOS as transformers'
        own ``processor.apply_chat_template(..., tokenize=True)``, which then tokenizes without special tokens."""
        tok = processor.tokenizer
        bos = tok.bos_token
        if not bos or tok.bos_token_id is None or not chat.startswith(bos):
            return chat
        return chat[len(bos):] if tok("x")["input_ids"][:1] == [tok.bos_token_id] else chat

    def feature_token_id(self, processor: Any) -> int:
        """The token id that carries one visual feature. Default: the processor's image placeholder token,
        which the expansion repeats (Qwen ``<|image_pad|>``, LLaVA ``<image>``, InternVL ``<IMG_CONTEXT>``)."""
        return int(processor.tokenizer.convert_tokens_to_ids(processor.image_token))

    def visual_map(self, processor: Any, enc: Any, b: int, image: Any) -> tuple:
        """Rectangles of sample ``b``'s visual tokens, in sequence order: ``(rects, meta)`` or
        ``(rects, meta, cell)`` with ``rects`` FloatTensor [V_b, 4] in original-image pixels, ``meta`` that
        sample's dict and ``cell`` BoolTensor [V_b] (see :class:`VisionBatch`; omitted = every token is a
        cell)."""
        raise NotImplementedError

    def build_batch(self, processor: Any, images: list, prompts: list[str],
                    answers: list[str] | None = None, expressions: list[str] | None = None) -> VisionBatch:
        import torch

        images = [im.convert("RGB") if hasattr(im, "convert") else im for im in images]
        tok = processor.tokenizer
        texts, spans = self.chat_spans(prompts, answers, expressions,
                                       lambda p: self.leading_bos(processor, self.chat_text(processor, p)),
                                       image_token=processor.image_token)
        enc = processor(images=images, text=texts, padding=True, return_tensors="pt", return_offsets_mapping=True,
                        return_text_replacement_offsets=True)
        offsets = enc.pop("offset_mapping")  # [B, S, 2] char offsets into the expanded texts
        if "text_replacement_offsets" not in enc:
            raise ValueError(f"{type(processor).__name__} does not report where it expanded the image placeholder "
                             "(return_text_replacement_offsets); vrh cannot locate the tokens without it")
        replaced = enc.pop("text_replacement_offsets")  # per sample: list of {"span", "new_span", "replacement"}
        ids, mask = enc["input_ids"], enc["attention_mask"].bool()  # [B, S]
        feature_id = self.feature_token_id(processor)
        if tok.padding_side != "left" and not bool(mask[:, -1].all()):
            raise ValueError("vrh needs left padding; set tokenizer.padding_side = 'left'")
        vis, rects, cells, expr, ans, metas = [], [], [], [], [], []
        for b in range(len(texts)):
            image_spans = [r["new_span"] for r in replaced[b] if r["type"] == "image"]
            if len(image_spans) != 1:
                raise ValueError(f"sample {b}: the processor expanded {len(image_spans)} image placeholders, "
                                 "expected 1")

            def tokens_in(c0: int, c1: int) -> torch.Tensor:  # [S]: overlaps chars [c0, c1) of the expanded text
                return (offsets[b, :, 0] < c1) & (offsets[b, :, 1] > c0) & mask[b]

            def expanded(c: int) -> int:  # char c of our text -> char of the expanded text
                return c + sum(len(r["replacement"]) - (r["span"][1] - r["span"][0]) for r in replaced[b]
                               if r["span"][1] <= c)

            is_img = tokens_in(*image_spans[0]) & (ids[b] == feature_id)  # [S]
            vis.append(is_img.nonzero().flatten())
            r, meta, *cell = self.visual_map(processor, enc, b, images[b])
            if r.shape[0] != len(vis[-1]):
                raise ValueError(f"{len(vis[-1])} visual tokens but the processor outputs map {r.shape[0]}")
            rects.append(r)
            cells.append(cell[0] if cell else torch.ones(len(r), dtype=torch.bool))
            metas.append(meta)
            if expressions is not None:
                expr.append(tokens_in(*map(expanded, spans[b]["expression"])).nonzero().flatten())
            else:
                expr.append(torch.zeros(0, dtype=torch.long))
            if answers is not None:
                ans.append(tokens_in(*map(expanded, spans[b]["answer"])).nonzero().flatten())
        return VisionBatch(inputs=dict(enc), visual_positions=vis, visual_rects=rects, expression_positions=expr,
                           answer_positions=ans if answers is not None else None,
                           image_sizes=[tuple(im.size) for im in images], meta=metas, cell_tokens=cells)


# --- loading helpers -------------------------------------------------------------------------------

@functools.cache
def image_only(processor_cls: type) -> type:
    """``processor_cls`` without its video processor. vrh feeds images only, and the video processors (Qwen,
    InternVL, LLaVA-OneVision, SmolVLM) need torchvision, which the processor's constructor and
    ``from_pretrained`` would otherwise demand. Same class name, so what it saves still loads with
    ``AutoProcessor`` where torchvision exists."""
    attrs = [a for a in processor_cls.get_attributes() if a != "video_processor"]
    return type(processor_cls.__name__, (processor_cls,), {
        "get_attributes": classmethod(lambda cls: list(attrs)), "video_processor": None,
        "__module__": processor_cls.__module__, "__doc__": image_only.__doc__})


# image processor classes that early snapshots name and transformers 5 no longer knows -> the class the current
# snapshots of the same checkpoints name (same settings, same outputs)
RENAMED_IMAGE_PROCESSORS = {"Qwen2_5_VLImageProcessor": "Qwen2VLImageProcessor"}  # Qwen2.5-VL's first upload
_WEIGHT_FILES = ["*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf", "*.h5", "*.msgpack", "*.onnx"]


def _renamed_image_processor(path: str) -> tuple[dict, str] | None:
    """``(preprocessor config, current class name)`` when ``path``'s ``preprocessor_config.json`` names a class
    of :data:`RENAMED_IMAGE_PROCESSORS`; else None."""
    from transformers.utils import cached_file

    try:  # an unreadable checkpoint is left to from_pretrained, which says why
        found = cached_file(path, "preprocessor_config.json", _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
    except OSError:
        return None
    if found is None:
        return None
    from vrh.infra.json_text import read_json
    from vrh.models.preflight import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH

    config = read_json(found, max_bytes=MAX_CONFIG_BYTES, max_depth=MAX_CONFIG_DEPTH, expect=dict)
    current = RENAMED_IMAGE_PROCESSORS.get(config.get("image_processor_type", ""))
    return (config, current) if current else None


@contextlib.contextmanager
def _renamed_view(path: str, config: dict, current: str) -> Iterator[str]:
    """A temporary folder of links to the checkpoint's processor files, its ``preprocessor_config.json`` naming
    ``current``: what ``from_pretrained`` then loads, unchanged (the checkpoint itself is not touched)."""
    import json

    folder = Path(path)
    if not folder.is_dir():  # a hub id: its small files (the weights are the model's, loaded before)
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(path, ignore_patterns=_WEIGHT_FILES))
    with tempfile.TemporaryDirectory(prefix="vrh-processor-") as view:
        for f in folder.iterdir():
            if f.is_file() and f.name != "preprocessor_config.json":
                (Path(view) / f.name).symlink_to(f.resolve())
        (Path(view) / "preprocessor_config.json").write_text(
            json.dumps({**config, "image_processor_type": current}, indent=2), encoding="utf-8")
        yield view


def load_processor(path: str, processor_class: str = "") -> Any:
    """``AutoProcessor`` when it works; else, given ``processor_class`` (a transformers class name), that
    class without its video processor (:func:`image_only`), e.g. where torchvision is missing. A
    ``preprocessor_config.json`` naming a class transformers renamed (:data:`RENAMED_IMAGE_PROCESSORS`) is read
    as naming the current one."""
    renamed = _renamed_image_processor(path)
    if renamed is None:
        return _load_processor(path, processor_class)
    with _renamed_view(path, *renamed) as view:
        return _load_processor(view, processor_class)


def _load_processor(path: str, processor_class: str) -> Any:
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(path, trust_remote_code=False)
    except (ImportError, OSError, ValueError, TypeError, AttributeError):  # e.g. no torchvision for videos
        if not processor_class:
            raise
        cls = getattr(importlib.import_module("transformers"), processor_class)
        return image_only(cls).from_pretrained(path, trust_remote_code=False)


_REGISTRY: dict[str, type[Adapter]] = {}


def register_adapter(cls: type[Adapter]) -> type[Adapter]:
    if not cls.name or not cls.model_types:
        raise ValueError(f"{cls.__name__} must set name and model_types")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"adapter name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def registered_adapters() -> dict[str, type[Adapter]]:
    return dict(_REGISTRY)
