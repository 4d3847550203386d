"""vrh detect's agreement with the paper's lists (vrh.experiments.paper_agreement)."""

import json

from vrh.data.paper_numbers import NUMBERS
from vrh.experiments.paper_agreement import paper_agreement, print_paper_agreement


def test_a_run_that_is_the_papers_list_agrees_fully_and_others_by_chance(tmp_path, capsys):
    (tmp_path / "convert.json").write_text(json.dumps({"source": "refcoco", "split": "val"}))
    data = tmp_path / "data.jsonl"
    listed = [tuple(h) for h in NUMBERS["top20_D"]["RefCOCO"]["Qwen2.5-VL-7B"]]
    rest = [(l, h) for l in range(28) for h in range(28) if (l, h) not in listed]
    ag = paper_agreement(listed + rest, 28, 28, "Qwen/Qwen2.5-VL-7B-Instruct", data)
    assert ag["benchmark"] == "RefCOCO" and list(ag["rows"]) == ["RefCOCO"]
    row = ag["rows"]["RefCOCO"]
    assert row.intersection == 20 and row.p_value < 1e-30 and abs(row.chance.intersection - 400 / 784) < 1e-9
    print_paper_agreement(ag)
    assert "20 / 20" in capsys.readouterr().out
    far = paper_agreement(rest[::-1], 28, 28, "Qwen/Qwen2.5-VL-7B-Instruct", None)  # benchmark unknown: all five
    assert len(far["rows"]) == 5 and far["rows"]["RefCOCO"].intersection == 0


def test_no_agreement_for_a_model_the_paper_does_not_list_or_another_grid():
    assert paper_agreement([(0, 0)], 4, 8, "organism", None) is None
    assert paper_agreement([(0, 0)] * 20, 4, 8, "Qwen/Qwen2.5-VL-7B-Instruct", None) is None
