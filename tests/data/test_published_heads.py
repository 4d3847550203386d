"""Other methods' published head lists as named head sets (vrh.data.published_heads): the shipped strings are
the files' (real-file tier), a list is refused on another grid and where it does not fit its own model."""

import re
from pathlib import Path

import pytest

from vrh.data.published_heads import (PUBLISHED, all_named_sets, is_named_spec, named_heads, parse_head_text,
                                      published_heads)

QRHEAD = Path(__file__).resolve().parents[2] / ".." / "shared" / "real" / "heads" / "qrhead"
needs_real = pytest.mark.skipif(not QRHEAD.is_dir(), reason="the real head files (../shared/real/heads) are absent")


def _field(text: str, key: str) -> str:
    m = re.search(rf'^{key}:\s*"([^"]*)"', text, re.M)
    assert m, key
    return m.group(1)


@needs_real
def test_every_shipped_list_is_its_file_byte_parsed():
    files = {f.name for f in QRHEAD.glob("*.yaml")}
    assert files == {p.file for p in PUBLISHED}  # every copied file is shipped, nothing else
    for p in PUBLISHED:
        text = (QRHEAD / p.file).read_text(encoding="utf-8")
        raw = _field(text, "attn_head_set")
        assert p.text == raw and _field(text, "model_name_or_path") == p.hub_id
        sep = "_" if "_" in raw else "-"
        assert p.sep == sep
        pairs = [tuple(int(x) for x in item.split(sep)) for item in raw.split(",")]  # the file's order, 0-based
        assert list(p.heads) == pairs and len(set(pairs)) == len(pairs)
        assert p.path.endswith(p.file) and len(p.commit) == 40


def test_names_sizes_and_grids():
    names = {p.name: p for p in PUBLISHED}
    assert set(names) == {"qrhead:Qwen2.5-7B-Instruct/NQ", "qrhead:Qwen3-8B/NQ", "qrhead:Llama-3.1-8B-Instruct/NQ",
                          "qrhead:Llama-3.1-8B-Instruct/LME", "qrhead:Gemma-3-4B-it/mid"}
    assert {n: (p.num_layers, p.num_heads) for n, p in names.items()} == {
        "qrhead:Qwen2.5-7B-Instruct/NQ": (28, 28), "qrhead:Qwen3-8B/NQ": (36, 32),
        "qrhead:Llama-3.1-8B-Instruct/NQ": (32, 32), "qrhead:Llama-3.1-8B-Instruct/LME": (32, 32),
        "qrhead:Gemma-3-4B-it/mid": (34, 8)}
    assert [len(p.heads) for p in PUBLISHED] == [16, 16, 16, 16, 24]
    assert not any(p.ranked for p in PUBLISHED)  # the files give sets, not scores
    assert parse_head_text("1-2, 3-4", "-") == ((1, 2), (3, 4))


def test_resolution_checks_the_loaded_grid_in_one_line():
    p = published_heads("QRHEAD:qwen3-8b/nq", 36, 32)
    assert p.name == "qrhead:Qwen3-8B/NQ" and p.heads[:2] == ((21, 31), (21, 18))
    with pytest.raises(ValueError, match=r"^--heads qrhead:Qwen2.5-7B-Instruct/NQ lists heads of Qwen2.5-7B-Instruct "
                                         r"\(28 layers x 28 heads\); this model has 36 layers x 32 heads$"):
        published_heads("qrhead:Qwen2.5-7B-Instruct/NQ", 36, 32, option="--heads")
    with pytest.raises(ValueError, match=r"no such published head list; vrh ships: qrhead:Qwen2.5-7B-Instruct/NQ"):
        published_heads("qrhead:Qwen2.5-7B/NQ")


def test_a_file_that_does_not_fit_its_model_is_refused_everywhere():
    gemma = next(p for p in PUBLISHED if p.model == "Gemma-3-4B-it")
    assert len(gemma.outside_grid) == 18 and max(h for _, h in gemma.heads) == 31
    for grid in ((None, None), (34, 8)):
        with pytest.raises(ValueError, match=r"18 of its 24 heads \(e.g. 10:24\) lie outside Gemma-3-4B-it's 34 layers "
                                             r"x 8 heads: the published file .* does not fit its model; refused"):
            published_heads("qrhead:Gemma-3-4B-it/mid", *grid)


def test_named_heads_covers_both_tables_and_heads_list_names_every_source():
    assert is_named_spec("paper:Qwen3-VL-8B/Toloka") and is_named_spec(" qrhead:Qwen3-8B/NQ")
    assert not is_named_spec("3:1,2:0") and not is_named_spec("runs/det")
    n = named_heads("qrhead:Qwen2.5-7B-Instruct/NQ", 28, 28)
    assert n.kind == "text" and not n.ranked and "princeton-pli/QRHead" in n.source and len(n.heads) == 16
    p = named_heads("paper:InternVL3-8B/RefCOCO")
    assert p.kind == "visual" and p.ranked and len(p.heads) == 20
    rows = all_named_sets()
    assert len(rows) == 20 + 5 and all(r["source"] for r in rows)
    assert {r["name"] for r in rows} >= {"paper:Qwen2.5-VL-7B/RefCOCO", "qrhead:Gemma-3-4B-it/mid"}


def test_mask_heads_and_cross_heads_take_published_lists():
    from vrh.experiments import conditions as cond
    from vrh.experiments.masked_evaluation import resolve_condition
    from vrh.experiments.settings import EvaluateSettings

    spec = "qrhead:Qwen2.5-7B-Instruct/NQ"
    listed = set(published_heads(spec).heads)
    c, info = resolve_condition(EvaluateSettings(model="m", data="d.jsonl", out="o", mask_heads=spec), 28, 28)
    assert c.kind == "list" and set(c.heads) == listed and c.k == 16 and info["source"] == spec
    r, _ = resolve_condition(EvaluateSettings(model="m", data="d.jsonl", out="o", random=True, mask_heads=spec), 28, 28)
    assert len(r.heads) == 16 and not set(r.heads) & listed  # its random control: as many heads, outside
    with pytest.raises(ValueError, match="this model has 36 layers x 32 heads"):
        cond.head_source(spec, None, 36, 32, option="--cross-heads")
    assert cond.head_source("qrhead:Llama-3.1-8B-Instruct/LME", None, 32, 32).heads[0] == (13, 18)
