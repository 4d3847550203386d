"""Organisms shipped as deltas (vrh.models.deltas): the merge rule, and a delta folder on a stand-in base rebuilt
and loaded by vrh.load_model with exactly the logits of the model it describes. The base is a tiny Gemma 3
saved in the base folder's layout (gemma_base's functions pointed at it), so no package is needed."""

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from vrh.models import deltas, gemma_base

SHA = "f" * 64


def test_merge_adds_scaled_low_rank_update_and_replaces_whole_tensors():
    w, a, b = torch.randn(4, 3), torch.randn(2, 3), torch.randn(4, 2)
    out = deltas.merge({"w": w, "x": torch.zeros(2)}, {"lora.w.A": a, "lora.w.B": b, "x": torch.ones(2),
                                                      "new": torch.ones(1)}, scale=2.0)
    assert torch.allclose(out["w"], w + 2.0 * b @ a, atol=1e-6)
    assert out["x"].tolist() == [1.0, 1.0] and out["new"].tolist() == [1.0]


@pytest.mark.parametrize("bad", [{"lora.missing.A": torch.ones(1, 3), "lora.missing.B": torch.ones(4, 1)},
                                 {"lora.w.A": torch.ones(1, 5), "lora.w.B": torch.ones(4, 1)},
                                 {"lora.w.A": torch.ones(1, 3)}])
def test_merge_refuses_adapters_that_do_not_fit(bad):
    with pytest.raises(ValueError, match="adapter"):
        deltas.merge({"w": torch.zeros(4, 3)}, bad, scale=1.0)


def _base_folder(model, processor, folder):
    """The tiny model's LM in gemma_base's layout: lm.safetensors under Gemma3ForCausalLM names."""
    folder.mkdir()
    lm = model.model.language_model.state_dict()
    save_file({f"model.{k}": v.contiguous() for k, v in lm.items()}, str(folder / gemma_base.LM_FILE))
    (folder / gemma_base.CONFIG_FILE).write_text(json.dumps(model.config.text_config.to_dict()))
    processor.tokenizer.save_pretrained(str(folder))
    return folder


def _delta_folder(model, processor, other, folder, rank=2, alpha=4):
    """Deltas turning ``model`` into: ``other``'s tower and projector + an adapter on layer 0's q_proj."""
    folder.mkdir()
    d = {f"model.vision_tower.{k}": v for k, v in other.model.vision_tower.state_dict().items()}
    d.update({f"model.multi_modal_projector.{k}": v for k, v in other.model.multi_modal_projector.state_dict().items()})
    q = model.model.language_model.layers[0].self_attn.q_proj.weight
    a, b = torch.randn(rank, q.shape[1]), torch.randn(q.shape[0], rank) * 0.1
    d["lora.model.language_model.layers.0.self_attn.q_proj.weight.A"] = a
    d["lora.model.language_model.layers.0.self_attn.q_proj.weight.B"] = b
    save_file({k: v.contiguous() for k, v in d.items()}, str(folder / deltas.DELTAS))
    (folder / deltas.MANIFEST).write_text(json.dumps({"base": {"sha256": SHA, "version": "1.0.0"},
                                                      "lora": {"rank": rank, "alpha": alpha}}))
    model.config.to_json_file(str(folder / "config.json"))
    model.generation_config.to_json_file(str(folder / "generation_config.json"))
    tmp = folder.parent / "proc"
    processor.save_pretrained(str(tmp))
    for name in ("processor_config.json", "chat_template.jinja"):
        if (tmp / name).exists():
            shutil.copy2(tmp / name, folder / name)
    return (alpha / rank) * b @ a


@pytest.fixture
def stand_in_base(tmp_path, monkeypatch):
    from vrh.testing.tiny_gemma3 import tiny_gemma3

    model, processor = tiny_gemma3(seed=0)
    base = _base_folder(model, processor, tmp_path / "base")
    monkeypatch.setattr(gemma_base, "gguf_file", lambda: (tmp_path / "base.gguf", SHA))
    monkeypatch.setattr(gemma_base, "base_folder", lambda root=None: base)
    return model, processor


def test_a_delta_folder_rebuilds_the_model_it_describes_and_loads_like_any_checkpoint(tmp_path, stand_in_base):
    import copy

    import vrh
    from vrh.testing.tiny_gemma3 import tiny_gemma3

    model, processor = stand_in_base
    other, _ = tiny_gemma3(seed=1)
    update = _delta_folder(model, processor, other, tmp_path / "organism_x")
    want = copy.deepcopy(model)
    want.model.vision_tower.load_state_dict(other.model.vision_tower.state_dict())
    want.model.multi_modal_projector.load_state_dict(other.model.multi_modal_projector.state_dict())
    with torch.no_grad():
        want.model.language_model.layers[0].self_attn.q_proj.weight += update

    dest = deltas.materialize(tmp_path / "organism_x", root=tmp_path / "cache")
    assert dest.parent == tmp_path / "cache" / "organisms" and dest.name.startswith("organism_x-")
    assert deltas.materialize(tmp_path / "organism_x", root=tmp_path / "cache") == dest  # built once, then reused
    assert not [p for p in dest.parent.iterdir() if p != dest]  # no temporary folder left behind
    loaded = vrh.load_model(str(dest))
    from PIL import Image

    enc = processor(text=[processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "where?"}]}],
        add_generation_prompt=True, tokenize=False)], images=[[Image.new("RGB", (112, 112), (200, 30, 30))]],
        return_tensors="pt")
    with torch.no_grad():
        got, ref, base = loaded.model(**enc).logits, want(**enc).logits, model(**enc).logits
    assert torch.allclose(got, ref, atol=1e-5)
    assert not torch.allclose(got, base, atol=1e-3)  # the deltas changed the model


def test_a_delta_folder_for_another_base_is_refused(tmp_path, stand_in_base):
    model, processor = stand_in_base
    _delta_folder(model, processor, model, tmp_path / "organism_x")
    manifest = json.loads((tmp_path / "organism_x" / deltas.MANIFEST).read_text())
    manifest["base"]["sha256"] = "0" * 64
    (tmp_path / "organism_x" / deltas.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="trained on the base with sha256 000000000000"):
        deltas.materialize(tmp_path / "organism_x", root=tmp_path / "cache")


def test_a_folder_of_another_organisms_deltas_without_adapters_is_the_base_lm(tmp_path, stand_in_base):
    """organism_d_base's rule: the sibling's tower and projector, the base LM's weights untouched."""
    import vrh

    model, processor = stand_in_base
    _delta_folder(model, processor, model, tmp_path / "organism_x")
    (tmp_path / "organism_x_base").mkdir()
    for name in ("config.json", "generation_config.json", "processor_config.json", "chat_template.jinja"):
        shutil.copy2(tmp_path / "organism_x" / name, tmp_path / "organism_x_base" / name)
    (tmp_path / "organism_x_base" / deltas.MANIFEST).write_text(json.dumps(
        {"base": {"sha256": SHA, "version": "1.0.0"}, "deltas_of": "organism_x", "adapters": False}))
    dest = deltas.materialize(tmp_path / "organism_x_base", root=tmp_path / "cache")
    loaded = vrh.load_model(str(dest)).model
    for name, p in model.model.language_model.state_dict().items():
        assert torch.equal(loaded.model.language_model.state_dict()[name], p), name
    with_adapters = vrh.load_model(str(deltas.materialize(tmp_path / "organism_x", root=tmp_path / "cache"))).model
    q = "layers.0.self_attn.q_proj.weight"
    assert not torch.equal(with_adapters.model.language_model.state_dict()[q], model.model.language_model.state_dict()[q])


def test_a_local_folder_of_deltas_resolves_like_a_shipped_one(tmp_path, stand_in_base, monkeypatch):
    """What `vrh organism build d` exports, passed as --model PATH, is rebuilt and loaded; the folder it is rebuilt
    into (its manifest beside the weights) and any other path pass through unchanged."""
    from vrh.models.loading import resolve_model_path

    model, processor = stand_in_base
    (tmp_path / "export").mkdir()
    _delta_folder(model, processor, model, tmp_path / "export" / "organism_x")
    monkeypatch.setenv("VRH_CACHE", str(tmp_path / "cache"))
    folder = str(tmp_path / "export" / "organism_x")
    assert deltas.needs_materializing(folder)
    dest = resolve_model_path(folder)
    assert dest == str(deltas.materialize(folder, root=tmp_path / "cache"))
    assert (tmp_path / "cache" / "organisms").is_dir() and dest.startswith(str(tmp_path / "cache" / "organisms"))
    assert not deltas.needs_materializing(dest) and resolve_model_path(dest) == dest
    assert resolve_model_path(folder, materialize=False) == folder
    assert resolve_model_path("google/gemma-3-4b-it") == "google/gemma-3-4b-it"
