"""The paper's head lists as named head sets (vrh.data.paper_heads) and their use as --mask-heads."""

import json

import pytest

from vrh.data.paper_heads import benchmark_of_data, paper_head_sets, paper_heads, paper_model_name
from vrh.data.paper_numbers import NUMBERS
from vrh.experiments import conditions as cond
from vrh.experiments.masked_evaluation import resolve_condition
from vrh.experiments.settings import EvaluateSettings


def test_every_listed_set_resolves_to_the_papers_list_in_rank_order():
    sets = paper_head_sets()
    assert set(sets) == {"RefCOCO", "RefCOCO+", "RefCOCOg", "Toloka", "RefSpatialBench"}
    for bench, models in sets.items():
        for m in models:
            p = paper_heads(f"paper:{m}/{bench}")
            a7 = NUMBERS["models_A7"][m]
            assert p.heads == tuple(tuple(h) for h in NUMBERS["top20_D"][bench][m]) and len(p.heads) == 20
            assert (p.num_layers, p.num_heads) == (a7["layers"], a7["heads"])


def test_names_are_case_insensitive_and_unknown_names_list_the_choices():
    assert paper_heads("paper:qwen3-vl-8b/refcoco+").name == "paper:Qwen3-VL-8B/RefCOCO+"
    with pytest.raises(ValueError, match=r"--heads paper:Qwen2.5-VL-7B/COCO: no such paper head list.*"
                                         r"paper:Qwen2.5-VL-7B/RefCOCO"):
        paper_heads("paper:Qwen2.5-VL-7B/COCO", option="--heads")
    with pytest.raises(ValueError, match="no such paper head list"):
        paper_heads("paper:Magma-8B/RefCOCO")  # a paper model without an App. D list


def test_a_paper_list_is_refused_on_a_model_of_another_shape():
    with pytest.raises(ValueError, match=r"lists heads of InternVL3.5-8B \(36 layers x 32 heads\); this model has "
                                         r"28 layers x 28 heads"):
        paper_heads("paper:InternVL3.5-8B/Toloka", 28, 28)
    with pytest.raises(ValueError, match="this model has 4 layers x 8 heads"):
        cond.head_source("paper:Qwen2.5-VL-7B/RefCOCO", None, 4, 8)


def test_mask_heads_paper_masks_exactly_those_heads():
    cfg = EvaluateSettings(model="m", data="d.jsonl", out="o", mask_heads="paper:Qwen2.5-VL-7B/RefCOCO")
    c, info = resolve_condition(cfg, 28, 28)
    listed = {tuple(h) for h in NUMBERS["top20_D"]["RefCOCO"]["Qwen2.5-VL-7B"]}
    assert c.kind == "list" and set(c.heads) == listed and c.k == 20
    assert info["source"] == "paper:Qwen2.5-VL-7B/RefCOCO"
    r, _ = resolve_condition(EvaluateSettings(model="m", data="d.jsonl", out="o", random=True,
                                              mask_heads="paper:Qwen2.5-VL-7B/RefCOCO"), 28, 28)
    assert len(r.heads) == 20 and not set(r.heads) & listed  # its random control: as many heads, outside


def test_checkpoint_and_benchmark_matching(tmp_path):
    assert paper_model_name("OpenGVLab/InternVL3-8B-hf") == "InternVL3-8B" and paper_model_name("organism") is None
    data = tmp_path / "data.jsonl"
    data.write_text("")
    assert benchmark_of_data(data) is None  # a hand-made JSONL: no conversion summary
    (tmp_path / "convert.json").write_text(json.dumps({"source": "refcocog", "split": "val"}))
    assert benchmark_of_data(data) == "RefCOCOg"
    (tmp_path / "convert.json").write_text(json.dumps({"source": "refcocog", "split": "test"}))
    assert benchmark_of_data(data) is None
