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


def _snapshot(folder, config):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_a_local_snapshot_is_matched_by_its_config(tmp_path, capsys):
    """A local copy of the checkpoint (the usual cluster setup) got no comparison: only hub ids matched."""
    listed = [tuple(h) for h in NUMBERS["top20_D"]["RefCOCO"]["Qwen2.5-VL-7B"]]
    flat = {"model_type": "qwen2_5_vl", "num_hidden_layers": 28, "num_attention_heads": 28}
    ag = paper_agreement(listed, 28, 28, _snapshot(tmp_path / "a", flat), None)
    assert ag["model"] == "Qwen2.5-VL-7B" and ag["matched_by"].startswith("config.json")
    assert ag["rows"]["RefCOCO"].intersection == 20
    print_paper_agreement(ag)
    assert "matched by config.json: model type and grid" in " ".join(capsys.readouterr().out.split())
    nested = {"model_type": "internvl", "text_config": {"model_type": "qwen3", "num_hidden_layers": 36,
                                                         "num_attention_heads": 32}}
    assert paper_agreement(listed, 36, 32, _snapshot(tmp_path / "b", nested), None)["model"] == "InternVL3.5-8B"
    other = {"model_type": "qwen2_5_vl", "num_hidden_layers": 36, "num_attention_heads": 16}  # another size
    assert paper_agreement(listed, 36, 16, _snapshot(tmp_path / "c", other), None) is None


def test_paper_model_names_one_and_a_bad_name_lists_them():
    import pytest

    listed = [tuple(h) for h in NUMBERS["top20_D"]["RefCOCO"]["Qwen3-VL-8B"]]
    ag = paper_agreement(listed, 36, 32, "/some/renamed/folder", None, paper_model="qwen3-vl-8b")
    assert ag["model"] == "Qwen3-VL-8B" and ag["matched_by"] == "--paper-model"
    with pytest.raises(ValueError, match=r"--paper-model Qwen9: the paper lists heads of Qwen2.5-VL-7B, "):
        paper_agreement(listed, 36, 32, None, None, paper_model="Qwen9")


def test_detect_says_when_no_paper_list_applies(tiny_checkpoint, tiny_dataset, tmp_path, capsys):
    from vrh.analyses import detect

    detect.run(detect.Config(model=tiny_checkpoint, data=tiny_dataset, n=2, n_eval=2, out=str(tmp_path / "d"),
                             max_new_tokens=4, batch_size=4))
    err = capsys.readouterr().err
    assert f"detect: no paper list applies to {tiny_checkpoint} (the paper lists heads of Qwen2.5-VL-7B" in err
    detect.run(detect.Config(model=tiny_checkpoint, data=tiny_dataset, n=2, n_eval=2, out=str(tmp_path / "e"),
                             max_new_tokens=4, batch_size=4, paper_model="none"))
    assert "paper list" not in capsys.readouterr().err
