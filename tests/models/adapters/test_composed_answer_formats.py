"""The families vrh composes itself (DeepSeek-VL2, Magma, Phi-4-Reasoning-Vision): each declared answer variant
(``answer_formats``, what ``vrh probe-format`` tries) round-trips a box on the family's tiny build (written for
teacher forcing, tokenized into the batch, decoded, read back), and loading one says nothing about its model type
not being ``PretrainedConfig``'s."""

from __future__ import annotations

import logging

import pytest
from PIL import Image

import vrh
from vrh.models import answer_formats as af
from vrh.models.adapters import get_adapter
from vrh.models.adapters.composed_base import ComposedAdapter
from vrh.models.inspect import inspect_checkpoint
from vrh.testing import TINY_BUILDERS, save_tiny

COMPOSED = ("deepseek_vl2", "magma", "phi4_reasoning_vision")
VARIANTS = [(name, f.name) for name in COMPOSED for f in af.declared(get_adapter(name))]
IMAGE = Image.new("RGB", (150, 100), (120, 80, 40))
BOX = (15.0, 20.0, 90.0, 70.0)  # original pixels
EXPRESSION = "red ball"


def test_the_composed_families_are_the_composed_adapters():
    assert sorted(n for n in TINY_BUILDERS if isinstance(get_adapter(n), ComposedAdapter)) == sorted(COMPOSED)


@pytest.mark.parametrize("name", COMPOSED)
def test_native_comes_first_and_the_undocumented_formats_have_candidates(name):
    names = [f.name for f in af.declared(get_adapter(name))]
    assert names[0] == "native" and len(names) >= 4  # today's behaviour stays the default
    frames = {af.resolve(n, get_adapter(name)).box for n in names[1:]}
    if name != "deepseek_vl2":  # undocumented: 0-1 floats, 0-1000 integers, pixels and JSON are all tried
        assert {"norm1", "pixels"} <= frames and any(f.startswith("json_") for f in frames)
        assert frames & {"norm1000", "json_norm1000"}


@pytest.mark.parametrize("name, variant", VARIANTS, ids=[f"{n}-{v}" for n, v in VARIANTS])
def test_each_declared_variant_round_trips_a_box_on_the_tiny_build(name, variant):
    _, processor = TINY_BUILDERS[name]()
    adapter = get_adapter(name)
    adapter = af.apply(adapter, af.resolve(variant, adapter))
    prompt = adapter.grounding_prompt(EXPRESSION)
    meta = adapter.build_batch(processor, [IMAGE], [prompt]).meta[0]
    answer = adapter.format_box(BOX, meta, IMAGE.size)
    batch = adapter.build_batch(processor, [IMAGE], [prompt], answers=[answer], expressions=[EXPRESSION])
    ids, tok = batch.inputs["input_ids"][0], processor.tokenizer
    assert tok.decode(ids[batch.expression_positions[0]], skip_special_tokens=False).strip() == EXPRESSION
    said = tok.decode(ids[batch.answer_positions[0]], skip_special_tokens=False)
    assert said.strip() == answer.strip()
    # within the rounding of the coarsest frame declared (Magma's own 2-decimal fractions: 0.005 x 150 px)
    assert adapter.parse_box(said, meta, IMAGE.size) == pytest.approx(BOX, abs=1.0)
    if variant == "native":  # the family's own methods, as before variants existed (Magma's BOS: its authors')
        bos = {"bos": "template"} if name == "magma" else {}
        assert af.record(adapter) == {"name": "native", "prompt": type(adapter).prompt_template, "box": "native",
                                      **bos}


def test_deepseek_grounding_variant_keeps_the_documented_det_answer():
    ds = get_adapter("deepseek_vl2")
    grounding = af.apply(ds, af.resolve("grounding", ds))
    assert grounding.grounding_prompt("the cat").startswith("<|grounding|>")
    assert "<|ref|>the cat<|/ref|>" in grounding.grounding_prompt("the cat")
    assert grounding.format_box(BOX, {}, IMAGE.size) == ds.format_box(BOX, {}, IMAGE.size)
    assert grounding.format_box(BOX, {}, IMAGE.size).startswith("<|det|>[[")
    assert grounding.parse_box("<|ref|>the cat<|/ref|><|det|>[[0, 0, 999, 999]]<|/det|>", {}, IMAGE.size) == (
        0.0, 0.0, 150.0, 100.0)


@pytest.fixture(scope="module")
def composed_folders(tmp_path_factory):
    return {n: save_tiny(*TINY_BUILDERS[n](), tmp_path_factory.mktemp(n) / "m") for n in COMPOSED}


@pytest.mark.parametrize("name", COMPOSED)
def test_loading_and_inspecting_print_no_model_type_warning(name, composed_folders, capfd, caplog):
    """transformers warned "You are using a model of type `deepseek_vl_v2` to instantiate a model of type ``" on
    every load (AutoTokenizer rebuilding the raw config.json); its other warnings stay on."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.enable_propagation()  # caplog sees transformers' records too
    try:
        with caplog.at_level(logging.WARNING):
            vrh.load_model(str(composed_folders[name]))
            inspect_checkpoint(str(composed_folders[name]), image_sizes=((64, 48),))
    finally:
        hf_logging.disable_propagation()
    said = capfd.readouterr().err + caplog.text
    assert "to instantiate a model of type" not in said, said
    assert hf_logging.get_verbosity() == level
