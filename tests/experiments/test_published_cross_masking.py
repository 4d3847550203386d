"""The GPU user's commands of docs/organism.md ("The real models' published lists"), on a tiny Qwen2.5-VL with
Qwen2.5-7B's grid (28 layers x 28 heads): --mask-heads qrhead:..., its random control, and compare-heads'
cross-masking of the paper's VRHs against QRHead's set."""

import json

import pytest

from vrh.cli import main
from vrh.data.paper_heads import paper_heads
from vrh.data.published_heads import published_heads


@pytest.fixture(scope="module")
def grid28(tmp_path_factory):
    from vrh.testing.tiny_models import save_tiny, tiny_qwen2_5_vl

    model, processor = tiny_qwen2_5_vl(seed=0, text_config={"num_hidden_layers": 28, "num_attention_heads": 28,
                                                             "num_key_value_heads": 4, "hidden_size": 448,
                                                             "intermediate_size": 64},
                                       vision_config={"out_hidden_size": 448})
    return str(save_tiny(model, processor, tmp_path_factory.mktemp("tiny_qwen_28x28")))


@pytest.mark.slow
def test_the_documented_cross_masking_commands_run_on_a_tiny_build(grid28, tiny_dataset, tmp_path, capsys):
    qr, vrh = "qrhead:Qwen2.5-7B-Instruct/NQ", "paper:Qwen2.5-VL-7B/RefCOCO"
    common = ["--model", grid28, "--data", tiny_dataset, "--n", "2", "--max-new-tokens", "4"]
    assert main(["evaluate", *common, "--mask-heads", qr, "--out", str(tmp_path / "m_qr")]) == 0
    res = json.loads((tmp_path / "m_qr" / "results.json").read_text())
    assert {tuple(h) for h in res["masked_heads"]} == set(published_heads(qr).heads) and res["k"] == 16
    assert main(["evaluate", *common, "--mask-heads", qr, "--random", "--out", str(tmp_path / "m_rnd")]) == 0
    rnd = {tuple(h) for h in json.loads((tmp_path / "m_rnd" / "results.json").read_text())["masked_heads"]}
    assert len(rnd) == 16 and not rnd & set(published_heads(qr).heads)
    assert f"masking 16 of 784 heads (random) (as many as {qr} names)" in capsys.readouterr().err  # not --k's rule
    assert main(["compare-heads", "--heads", vrh, "--heads-b", qr, *common, "--k", "16", "--seeds", "0",
                 "--out", str(tmp_path / "cmp")]) == 0
    cmp = json.loads((tmp_path / "cmp" / "results.json").read_text())
    conds = {c["condition"]: {tuple(h) for h in c["heads"]} for c in cmp["matrix"]["conditions"]}
    assert conds["top16:A"] == set(paper_heads(vrh).heads[:16]) and conds["top16:B"] == set(published_heads(qr).heads)
    assert cmp["lists"]["intersection"] == 8 and "grounding" in cmp["matrix"]
    capsys.readouterr()
    assert main(["compare-heads", "--heads", vrh, "--heads-b", qr, *common, "--k", "10",
                 "--out", str(tmp_path / "cmp10")]) == 2  # a set is masked whole
    assert "is a set of 16 heads, not a ranking" in capsys.readouterr().err
    assert main(["evaluate", *common, "--mask-heads", "qrhead:Qwen3-8B/NQ", "--out", str(tmp_path / "bad")]) == 2
    assert "this model has 28 layers x 28 heads" in capsys.readouterr().err
