"""``vrh heads list`` and ``vrh heads atlas`` through main(argv)."""

import json

from vrh.cli import main


def test_heads_list_prints_every_named_set_with_its_source(capsys):
    assert main(["heads", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("paper:Qwen2.5-VL-7B/RefCOCO", "paper:InternVL3.5-8B/RefSpatialBench", "qrhead:Qwen2.5-7B-Instruct/NQ",
                 "qrhead:Qwen3-8B/NQ", "qrhead:Llama-3.1-8B-Instruct/NQ", "qrhead:Llama-3.1-8B-Instruct/LME",
                 "qrhead:Gemma-3-4B-it/mid"):
        assert f"{name}  [" in out
    assert "github princeton-pli/QRHead src/qrretriever/configs/Qwen3-8B_qr_head_NQ.yaml @ e2bf69f" in out
    assert "16 heads, a set (no ranking); grid 28 x 28" in out and "does not fit google/gemma-3-4b-it" in out
    assert "rule: QRHead's top 16 by QR score" in out and "rule: a score map: Retrieval Heads' copy-paste score" in out
    assert out.count("    rule: ") == out.count("  [")  # every set names how it was ranked


def test_heads_atlas_writes_its_table_and_figure(tmp_path, capsys):
    out = tmp_path / "atlas"
    assert main(["heads", "atlas", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Qwen2.5-7B: text vs VRH: 7-11 shared (median 8) in 10 pairs, chance 0.41" in printed
    atlas = json.loads((out / "atlas.json").read_text())
    assert len(atlas["pairs"]) == 110
    md = (out / "atlas.md").read_text()
    assert "| paper:Qwen2.5-VL-7B/RefCOCO | qrhead:Qwen2.5-7B-Instruct/NQ | 8 (of 20 and 16) | 0.41 | 4.2e-10 |" in md
    assert (out / "atlas.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["heads", "atlas", "--out", str(out)]) == 0  # its own three files are replaced
    (tmp_path / "f").write_text("")
    assert main(["heads", "atlas", "--out", str(tmp_path / "f")]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert main(["heads"]) == 2
