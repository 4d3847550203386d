"""Idefics3 / SmolVLM beyond the shared suite: the tile grid read from the processor's ``<row_i_col_j>`` tags
(checked against the rows / cols the image processor reports), the token map proven by pixel content on
wide, tall, odd-sized and single-frame images with the tiny and the released settings, the token order inside
a frame (the model's own pixel shuffle), the global frame marked as no cell, the LM under ``text_model``, the
SmolVLM class and its processor's num2words need, the box format, and ``vrh detect`` + ``vrh evaluate`` end to
end on a saved tiny checkpoint."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from vrh.models.adapters import get_adapter
from vrh.models.adapters.idefics3 import tile_tags
from vrh.testing import TINY_BUILDERS
from vrh.testing.tiny_idefics3 import idefics3_processor, idefics3_tokenizer

from .pixels import check_pixels, coord_image

ADAPTER = get_adapter("idefics3")


def _batch(processor, sizes):
    images = [coord_image(*s) for s in sizes]
    return ADAPTER.build_batch(processor, images, [ADAPTER.grounding_prompt("red ball")] * len(images)), images


@pytest.mark.parametrize("sizes, grids", [
    ([(150, 100), (200, 60)], [(2, 2), (1, 2)]),  # 2 x 2 and 1 x 2 tiles in one batch: a zero frame pads sample 1
    ([(33, 77), (61, 241)], [(2, 1), (2, 1)]),  # tall, odd sizes
    ([(255, 85), (97, 97)], [(1, 2), (2, 2)]),
])
def test_rects_match_pixel_content(sizes, grids):
    _, processor = TINY_BUILDERS["idefics3"]()
    batch, images = _batch(processor, sizes)
    checked, worst = check_pixels("idefics3", batch, processor)
    assert checked == sum(len(v) for v in batch.visual_positions) and worst <= 1.0
    assert [m["tile_grid"] for m in batch.meta] == grids
    for b, (rows, cols) in enumerate(grids):
        n_cells = rows * cols * 9
        assert len(batch.visual_positions[b]) == n_cells + 9
        cell = batch.cell_tokens[b]
        assert cell[:n_cells].all() and not cell[n_cells:].any()  # the global frame is never a cell
        r = batch.visual_rects[b][:n_cells].double()  # the tile cells tile the image exactly
        area = ((r[:, 2] - r[:, 0]) * (r[:, 3] - r[:, 1])).sum()
        assert float(area) == pytest.approx(images[b].size[0] * images[b].size[1])


@pytest.mark.parametrize("frame, longest, tokens, sizes", [
    (364, 4 * 364, 169, [(255, 85), (61, 241)]),  # Idefics3-8B: 4 x 364 px, 13 x 13 tokens per frame
    (512, 4 * 512, 64, [(199, 149)]),  # SmolVLM-256M / 500M: 512-px frames, 8 x 8 tokens (scale 4)
])
def test_rects_match_pixel_content_with_released_settings(frame, longest, tokens, sizes):
    processor = idefics3_processor(idefics3_tokenizer(), frame=frame, longest_edge=longest, tokens_per_frame=tokens)
    batch, _ = _batch(processor, sizes)
    checked, worst = check_pixels("idefics3", batch, processor)
    assert checked == sum(len(v) for v in batch.visual_positions) and worst <= 1.0
    assert all(rows * cols > 1 for rows, cols in (m["tile_grid"] for m in batch.meta))


@pytest.mark.parametrize("kwargs", [{"longest_edge": 48}, {"do_image_splitting": False}])
def test_global_frame_alone_is_the_cell_grid(kwargs):
    """No tiles (an image resized within one frame, or splitting off): the global frame is the only view, so its
    tokens are the cells, and the tags are absent."""
    processor = idefics3_processor(idefics3_tokenizer(), **kwargs)
    batch, _ = _batch(processor, [(150, 100), (33, 77)])
    assert check_pixels("idefics3", batch, processor)[1] <= 1.0
    for b in range(2):
        assert batch.meta[b]["tile_grid"] == (0, 0) and batch.meta[b]["token_grid"] == (3, 3)
        assert len(batch.visual_positions[b]) == 9 and batch.cell_tokens[b].all()


@pytest.mark.parametrize("size", [(150, 100), (200, 60), (60, 200), (33, 77), (255, 255), (40, 40)])
def test_grid_from_tags_matches_the_image_processor(size):
    """The tags the processor wrote == the rows / cols its image processor reports (which it then drops)."""
    _, processor = TINY_BUILDERS["idefics3"]()
    batch, images = _batch(processor, [size])
    out = processor.image_processor(images, return_row_col_info=True)
    assert batch.meta[0]["tile_grid"] == (out["rows"][0][0], out["cols"][0][0])


def test_tag_reader_refuses_a_broken_grid():
    assert tile_tags("<row_1_col_1><row_1_col_2><row_2_col_1><row_2_col_2>") == (2, 2)
    with pytest.raises(ValueError, match="one 2 x 2 grid"):
        tile_tags("<row_1_col_1><row_2_col_2>")
    with pytest.raises(ValueError, match="one 1 x 1 grid"):
        tile_tags("<row_1_col_1><row_1_col_1>")


def test_token_count_mismatch_is_an_error(monkeypatch):
    """If the grid read from the tags disagrees with the image tokens emitted, build_batch refuses."""
    import vrh.models.adapters.idefics3 as idefics3

    _, processor = TINY_BUILDERS["idefics3"]()
    monkeypatch.setattr(idefics3, "tile_tags", lambda text: (1, 1))  # the processor tiles 2 x 2
    with pytest.raises(ValueError, match="1 x 1 tiles .* but the processor emitted 45 image tokens"):
        _batch(processor, [(150, 100)])


def test_frame_tokens_are_row_major_cells_in_the_model():
    """Token k of a frame merges the s x s ViT patches at rows s*i.., columns s*j.. with (i, j) = divmod(k, n).
    Proven through the model's own ``get_image_features`` (zero-frame removal, pixel shuffle) with a vision
    tower that outputs each patch's (row, column) and an identity projection."""
    model, _ = TINY_BUILDERS["idefics3"]()
    model = copy.deepcopy(model)
    vc, s = model.config.vision_config, model.config.scale_factor
    side = vc.image_size // vc.patch_size  # patches per frame side
    r, c = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")  # [side, side]
    coords = torch.stack([r, c], dim=-1).reshape(1, side * side, 2).float()  # [1, P, 2] ViT order, row-major

    class CoordTower(torch.nn.Module):
        def forward(self, pixel_values, **kwargs):
            return SimpleNamespace(last_hidden_state=coords.expand(len(pixel_values), -1, -1))

    model.model.vision_model = CoordTower()
    model.model.connector.modality_projection = torch.nn.Identity()
    pv = torch.ones(1, 2, 3, vc.image_size, vc.image_size)  # [B, N, C, F, F]
    pv[0, 1] = 0  # a zero frame pads the batch: the model drops it
    tokens = model.model.get_image_features(pixel_values=pv).pooler_output[0]  # [(side/s)^2, 2 * s * s]
    n = side // s
    assert tokens.shape == (n * n, 2 * s * s)
    for k in range(n * n):
        i, j = divmod(k, n)
        got = {tuple(v) for v in tokens[k].reshape(s * s, 2).long().tolist()}  # the merged patches' (row, col)
        assert got == {(s * i + a, s * j + b) for a in range(s) for b in range(s)}, (k, got)


def test_language_model_is_text_model():
    model, _ = TINY_BUILDERS["idefics3"]()
    assert ADAPTER.decoder_layers(model) is model.model.text_model.layers
    assert not hasattr(model.model, "language_model")


# --- SmolVLM --------------------------------------------------------------------------------------

def test_smolvlm_checkpoint_is_served(tmp_path):
    """SmolVLM2 (``model_type`` smolvlm) loads through the same adapter with SmolVLM's classes; its processor
    needs num2words even for images: without it, a clear error names the package."""
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMImageProcessorPil

    model, processor = TINY_BUILDERS["idefics3"]()
    same = {k: v for k, v in model.config.to_dict().items() if k not in ("model_type", "architectures")}
    config = SmolVLMConfig(**same)  # the tiny Idefics3's shapes under SmolVLM's class
    smol = SmolVLMForConditionalGeneration._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    assert get_adapter(smol.config.model_type) is not None and isinstance(get_adapter("smolvlm"), type(ADAPTER))
    smol.save_pretrained(tmp_path)
    tok = processor.tokenizer
    tok.save_pretrained(tmp_path)
    ip = SmolVLMImageProcessorPil(**{k: getattr(processor.image_processor, k) for k in ("size", "max_image_size")})
    ip.save_pretrained(tmp_path)
    (tmp_path / "processor_config.json").write_text(
        f'{{"processor_class": "SmolVLMProcessor", "image_seq_len": {processor.image_seq_len}}}')
    (tmp_path / "chat_template.jinja").write_text(processor.chat_template)
    if importlib.util.find_spec("num2words") is None:
        with pytest.raises(ImportError, match="num2words"):
            get_adapter("smolvlm").load(str(tmp_path))
        return
    loaded, proc = get_adapter("smolvlm").load(str(tmp_path))
    assert type(loaded).__name__ == "SmolVLMForConditionalGeneration" and proc.tokenizer.padding_side == "left"
    batch, _ = _batch(proc, [(150, 100)])
    assert check_pixels("idefics3", batch, proc)[1] <= 1.0
    with torch.no_grad():
        loaded(**batch.inputs)


# --- prompt and answers --------------------------------------------------------------------------

REAL = Path(__file__).resolve().parents[3] / ".." / "shared" / "real" / "checkpoints" / "idefics3_8b_llama3"


@pytest.mark.skipif(not REAL.is_dir(), reason="the real checkpoint files (../shared/real) are absent")
def test_one_bos_with_the_real_template_and_a_tokenizer_that_adds_its_own():
    """Idefics3-8B-Llama3's real template writes ``<|begin_of_text|>`` and Llama 3's tokenizer adds it too (its
    post-processor ``<|begin_of_text|> $A``): each sequence starts with exactly one, and the expression and the
    teacher-forced answer are still found."""
    import json

    from tokenizers import processors

    tok = idefics3_tokenizer()
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", tok.bos_token_id)])  # as Llama 3's
    assert tok("x")["input_ids"][0] == tok.bos_token_id
    tok.chat_template = json.loads((REAL / "chat_template.json").read_text())["chat_template"]
    processor = idefics3_processor(tok)
    prompts = [ADAPTER.grounding_prompt(e) for e in ("red ball", "man in a hat")]
    batch = ADAPTER.build_batch(processor, [coord_image(150, 100), coord_image(40, 40)], prompts,
                                answers=["[0.10, 0.20, 0.30, 0.40]"] * 2, expressions=["red ball", "man in a hat"])
    ids, mask = batch.inputs["input_ids"], batch.inputs["attention_mask"].bool()
    for b, expression in enumerate(("red ball", "man in a hat")):
        real = ids[b][mask[b]]
        assert real[0] == tok.bos_token_id and int((real == tok.bos_token_id).sum()) == 1
        assert tok.decode(ids[b, batch.expression_positions[b]]).strip() == expression
        assert tok.decode(ids[b, batch.answer_positions[b]]).strip() == "[0.10, 0.20, 0.30, 0.40]"


def test_prompt_and_box_format_are_lmms_eval_rec():
    assert ADAPTER.grounding_prompt("red ball").endswith("the region this sentence describes: red ball")
    assert "floating point numbers bounded between 0 and 1" in ADAPTER.grounding_prompt("x")
    assert ADAPTER.format_box((15, 25, 90, 75), {}, (150, 100)) == "[0.10, 0.25, 0.60, 0.75]"
    assert ADAPTER.parse_box("[0.1, 0.25, 0.6, 0.75]", {}, (150, 100)) == pytest.approx((15, 25, 90, 75))
    assert ADAPTER.parse_box("no box here", {}, (150, 100)) is None


# --- end to end ------------------------------------------------------------------------------------

def test_detect_and_evaluate_run_end_to_end(detect_then_evaluate):
    """`vrh detect` then `vrh evaluate` on a saved tiny Idefics3: complete run folders, K drawn from cells."""
    out, samples, res = detect_then_evaluate(TINY_BUILDERS["idefics3"], n=4)
    assert out["num_layers"] == 2 and out["num_heads"] == 4
    # 84 x 56 images: resized to 96 x 64, stretched to 96 x 96: 2 x 2 tiles of 3 x 3 cells + a 3 x 3 global frame
    assert len(samples) == 4 and all(s["n_visual_tokens"] == 45 and 0 < s["n_key_tokens"] <= 36 for s in samples)
    assert res["k"] == 2 and len(res["masked_heads"]) == 2 and 0.0 <= res["accuracy"] <= 1.0
