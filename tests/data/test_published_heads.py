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
    assert len(rows) == 20 + 5 + 9 and all(r["source"] for r in rows)
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


# --- published score maps (Retrieval Heads, OCR Heads) --------------------------------------------------------
HEADS_REAL = QRHEAD.parent


def map_from_file(m, raw: bytes):
    """The map a published file gives, by the rule vrh states for it (recomputed independently of the shipped
    numbers): Retrieval Heads' mean per "L-H"; OCR Heads' step3 score per "lL_hH"."""
    import json

    data = json.loads(raw)
    out = [[None] * m.num_heads for _ in range(m.num_layers)]
    for key, values in data.items():
        if m.method == "retrieval-heads":
            layer, head = map(int, key.split("-"))
            out[layer][head] = sum(values) / len(values)
        else:
            layer, head = map(int, re.fullmatch(r"l(\d+)_h(\d+)", key).groups())
            zeros = sum(1 for v in values if v == 0)
            out[layer][head] = sum(values) / len(values) if zeros > 0.1 * len(values) else 0.0
    return out


def _copies():
    from vrh.data.published_heads import _maps

    for m in _maps():
        sub = "retrieval_heads" if m.method == "retrieval-heads" else f"ocr_heads/{m.kind}"
        yield m, HEADS_REAL / sub / Path(m.path).name


@pytest.mark.parametrize("m,path", list(_copies()), ids=lambda x: getattr(x, "name", ""))
def test_every_shipped_map_is_its_file_recomputed(m, path):
    import hashlib

    if not path.is_file():
        pytest.skip(f"no copy of {m.path} in ../shared/real/heads (github {m.repo} @ {m.commit[:8]})")
    raw = path.read_bytes()
    assert len(raw) == m.size and hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest() == m.blob  # that very file
    want = map_from_file(m, raw)
    assert all(abs(a - b) <= 6e-7 for ra, rb in zip(m.scores, want) for a, b in zip(ra, rb))  # 6 decimals


def test_maps_carry_their_grid_and_rank_as_their_authors_print_them():
    from vrh.data.published_heads import _maps, published_map

    grids = {m.name: (m.num_layers, m.num_heads) for m in _maps()}
    assert grids == {"retrieval-heads:llama-2-7b-80k": (32, 32), "retrieval-heads:llama-2-13b-64k": (40, 40),
                     "retrieval-heads:Mistral-7B-v0.2-hf": (32, 32), "retrieval-heads:Mixtral-8x7B-v0.1": (32, 32),
                     "retrieval-heads:Qwen1.5-14B": (40, 40), "retrieval-heads:Qwen1.5-14B-Chat": (40, 40),
                     "retrieval-heads:Yi-6B-200K": (32, 32), "ocr-heads:InternVL2-8B/image": (32, 32),
                     "ocr-heads:Qwen2-VL-2B-Instruct/text": (28, 12)}
    for m in _maps():
        assert len(m.scores) == m.num_layers and {len(r) for r in m.scores} == {m.num_heads}
    # Retrieval Heads' README prints llama-2-7b-80k's top 10 with their mean scores, rounded to 2 decimals
    m = published_map("retrieval-heads:llama-2-7b-80k")
    readme = [((16, 19), 0.94), ((11, 15), 0.92), ((8, 26), 0.8), ((6, 9), 0.62), ((7, 12), 0.61), ((17, 22), 0.56),
              ((11, 2), 0.46), ((6, 16), 0.44), ((19, 15), 0.42), ((21, 30), 0.4)]
    assert [(h, round(m.scores[h[0]][h[1]], 2)) for h in m.ranking[:10]] == readme
    ocr = published_map("ocr-heads:InternVL2-8B/image")
    assert sum(v >= 0.1 for row in ocr.scores for v in row) > 0 and ocr.name.endswith("/image")


def test_a_score_map_masks_its_top_k_and_compares_as_a_ranking(tmp_path):
    from vrh.experiments import conditions as cond
    from vrh.analyses.compare_heads import analysis as head_comparison
    from vrh.analyses.compare_heads.settings import CompareHeadsSettings

    src = cond.head_source("retrieval-heads:llama-2-7b-80k", None, 32, 32)
    assert src.kind == "run" and tuple(src.scores.shape) == (32, 32) and src.path == "retrieval-heads:llama-2-7b-80k"
    top = cond.top_k(src.scores, 3, method=src.scorer, mask_mode="zero", source=src.path)
    assert set(top.heads) == {(16, 19), (11, 15), (8, 26)}
    with pytest.raises(ValueError, match=r"scores heads of Yi-6B-200K \(32 layers x 32 heads\); this model has 40 "
                                         r"layers x 40 heads$"):
        cond.head_source("retrieval-heads:Yi-6B-200K", None, 40, 40)
    res = head_comparison.run_compare_heads(CompareHeadsSettings(
        heads="retrieval-heads:Mistral-7B-v0.2-hf", heads_b="retrieval-heads:Mixtral-8x7B-v0.1", out=str(tmp_path / "c")))
    assert [o["k"] for o in res["overlap"]] == [5, 10, 20] and res["rank_correlation"]["spearman"] is not None
    assert res["lists"] is None and res["a"]["kind"] == "text"
