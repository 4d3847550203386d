"""The published head atlas (vrh.experiments.head_atlas): the paper's Table A2 lists against QRHead's text
retrieval heads, computed exactly, and the paper's lists against each other."""

import math

import pytest

from vrh.experiments.head_atlas import atlas_lists, build_atlas, relation, text_vs_vrh
from vrh.scoring.head_overlap import layer_matched_null, p_at_least_sets

# the figures (Table A2, RefCOCO top-20, against QRHead's NQ top-16 of the backbone)
TABLE_A2 = {"paper:Qwen2.5-VL-7B/RefCOCO": ("qrhead:Qwen2.5-7B-Instruct/NQ", 8, 0.41, "4.2e-10"),
            "paper:InternVL3-8B/RefCOCO": ("qrhead:Qwen2.5-7B-Instruct/NQ", 8, 0.41, "4.2e-10"),
            "paper:Qwen3-VL-8B/RefCOCO": ("qrhead:Qwen3-8B/NQ", 9, 0.28, "1.9e-13"),
            "paper:InternVL3.5-8B/RefCOCO": ("qrhead:Qwen3-8B/NQ", 10, 0.28, "1.3e-15")}


@pytest.fixture(scope="module")
def atlas():
    return build_atlas()


def _pair(atlas, x, y):
    return next(p for p in atlas["pairs"] if {p["a"], p["b"]} == {x, y})


def test_table_a2_intersections_come_out_exactly(atlas):
    for vrh, (text, shared, chance, p) in TABLE_A2.items():
        o = _pair(atlas, vrh, text)
        assert (o["intersection"], round(o["chance"], 2), f"{o['p_value']:.2g}") == (shared, chance, p), vrh
        assert {o["size_a"], o["size_b"]} == {16, 20} and o["relation"] == "text vs VRH"
    qwen = _pair(atlas, "paper:Qwen2.5-VL-7B/RefCOCO", "qrhead:Qwen2.5-7B-Instruct/NQ")
    assert qwen["shared"] == [[16, 0], [16, 1], [16, 17], [16, 20], [17, 18], [18, 16], [19, 17], [19, 19]]
    intern = _pair(atlas, "paper:InternVL3-8B/RefCOCO", "qrhead:Qwen2.5-7B-Instruct/NQ")
    assert {tuple(h) for h in intern["shared"]} ^ {tuple(h) for h in qwen["shared"]} == {(17, 18), (20, 21)}
    # the same tail by the textbook formula: sum_{i >= 8} C(20, i) C(764, 16 - i) / C(784, 16)
    assert p_at_least_sets(8, 20, 16, 784) == pytest.approx(
        sum(math.comb(20, i) * math.comb(764, 16 - i) for i in range(8, 17)) / math.comb(784, 16), rel=1e-12)


def test_every_paper_list_meets_its_backbones_text_list_and_the_rest_is_left_out_with_a_reason(atlas):
    lists, left_out = atlas_lists()
    assert sum(a.kind == "visual" for a in lists) == 20 and sum(a.kind == "text" for a in lists) == 2
    assert len(text_vs_vrh(atlas)) == 20  # 5 benchmarks x 4 models, each against one text list
    assert {x["name"] for x in left_out} == {"qrhead:Llama-3.1-8B-Instruct/NQ", "qrhead:Llama-3.1-8B-Instruct/LME",
                                             "qrhead:Gemma-3-4B-it/mid"}
    assert [(g["backbone"], g["n_heads"], len(g["lists"])) for g in atlas["groups"]] == [
        ("Qwen2.5-7B", 784, 11), ("Qwen3-8B", 1152, 11)]
    assert len(atlas["pairs"]) == 2 * 55  # every pair within a grid, none across grids
    g = atlas["groups"][0]
    assert g["shared"][0][0] == 16 and all(g["shared"][i][j] == g["shared"][j][i] for i in range(11) for j in range(11))


def test_relations_and_the_stricter_layer_matched_null(atlas):
    by = {(s["backbone"], s["relation"]): s for s in atlas["summary"]}
    assert by[("Qwen2.5-7B", "text vs VRH")]["pairs"] == 10 and by[("Qwen3-8B", "across benchmarks")]["pairs"] == 20
    assert by[("Qwen3-8B", "across models")]["pairs"] == 5  # one per benchmark
    q = _pair(atlas, "paper:Qwen2.5-VL-7B/RefCOCO", "qrhead:Qwen2.5-7B-Instruct/NQ")
    assert 2.5 < q["layer_chance"] < 3.5 and 1e-4 < q["layer_p_value"] < 1e-2  # weaker than uniform, still small
    assert q["layer_p_value"] > q["p_value"]
    e, pmf = layer_matched_null([(0, 0), (0, 1)], [(0, 0), (0, 1)], num_heads=2)
    assert e == 2.0 and pmf == [0.0, 0.0, 1.0]  # both whole layers: they must coincide
    llama, = atlas["text_only"]  # QRHead's own two Llama lists, for scale: they share far fewer
    assert (llama["a"], llama["b"], llama["intersection"]) == ("qrhead:Llama-3.1-8B-Instruct/NQ",
                                                               "qrhead:Llama-3.1-8B-Instruct/LME", 3)
    assert llama["layer_p_value"] > 0.1
    names = {a.name: a for a in atlas_lists()[0]}
    assert relation(names["paper:Qwen3-VL-8B/RefCOCO"], names["paper:Qwen3-VL-8B/Toloka"]) == "across benchmarks"
    assert relation(names["paper:Qwen3-VL-8B/RefCOCO"], names["paper:InternVL3.5-8B/RefCOCO"]) == "across models"
