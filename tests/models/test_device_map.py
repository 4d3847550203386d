"""Models spread over several devices (``--device-map``): where inputs go, and capture / masking when the
layers of one model live on different devices.

A CPU machine has one real device, so "another device" is ``meta``: tensors there carry shapes but no data,
and mixing them with CPU tensors in ``index_fill`` / ``masked_fill`` / ``index_copy`` raises, exactly like
mixing two GPUs. A hook that built its index or mask once, on the first device it saw, fails these tests.
"""

import copy
import json
from types import SimpleNamespace

import pytest
import torch

from vrh.models.adapters import get_adapter
from vrh.core.attention import observe_attention, uniform_heads, vrh_attention_forward
from vrh.core.capture import capture_attention_rows
from vrh.models.loading import (DEVICE_MAPS, LoadedModel, TensorParallelRefused, input_device, load_model,
                                resolve_device_map)
from vrh.core.masking import mask_heads, mask_heads_per_row
from vrh.testing.tiny_models import tiny_qwen2_5_vl

META = torch.device("meta")


@pytest.fixture(scope="module")
def tiny():
    model, processor = tiny_qwen2_5_vl(seed=0)
    return copy.deepcopy(model).eval(), processor, get_adapter(model.config.model_type)


def _geometry(model, adapter):
    return adapter.num_heads(model), adapter.head_dim(model)


# --- where inputs go ---------------------------------------------------------------------------------
def test_inputs_go_to_the_embeddings_device_not_the_first_parameters(tiny):
    model, processor, adapter = tiny
    model = copy.deepcopy(model)
    model.model.visual.to(META)  # the vision tower holds the first parameters: "another GPU"
    assert next(model.parameters()).device == META  # what the old rule would have answered
    assert LoadedModel(model, processor, adapter, "tiny").device == torch.device("cpu")


def test_an_offloaded_embedding_reports_its_hooks_execution_device(tiny):
    model, _, _ = tiny
    model = copy.deepcopy(model)
    emb = model.get_input_embeddings()
    emb.to(META)  # accelerate's offload: weights on meta, moved in by a hook at forward time
    emb._hf_hook = SimpleNamespace(execution_device=1)  # accelerate writes GPU indices as ints
    assert input_device(model) == torch.device("cuda", 1)
    emb._hf_hook = SimpleNamespace(execution_device="cpu")
    assert input_device(model) == torch.device("cpu")


# --- masking: every call builds its tensors on the device of the o_proj input it sees ----------------
def _o_proj_on(model, adapter, layer, device):
    o_proj = adapter.o_proj(model, layer)
    return o_proj.to(device)


def test_zero_mask_follows_each_calls_device(tiny):
    model, _, adapter = tiny
    model = copy.deepcopy(model)
    num_heads, head_dim = _geometry(model, adapter)
    x = torch.randn(2, 3, num_heads * head_dim)  # (B, S, H*d_head)
    o_proj = adapter.o_proj(model, 0)
    cols = slice(1 * head_dim, 2 * head_dim)  # head 1's input columns
    expected = x.clone()
    expected[..., cols] = 0
    with mask_heads(model, adapter, [(0, 1), (1, 2)]):
        torch.testing.assert_close(o_proj(x), torch.nn.functional.linear(expected, o_proj.weight, o_proj.bias))
        # the same hook, now on "another GPU": its first (CPU) index must not be reused
        out = _o_proj_on(model, adapter, 0, META)(x.to(META))
        assert out.device == META and out.shape == (2, 3, o_proj.out_features)
        # layer 1 lives on the other device from the start
        assert _o_proj_on(model, adapter, 1, META)(x.to(META)).device == META


def test_per_row_mask_follows_each_calls_device(tiny):
    model, _, adapter = tiny
    model = copy.deepcopy(model)
    num_heads, head_dim = _geometry(model, adapter)
    x = torch.randn(2, 3, num_heads * head_dim)  # (B, S, H*d_head)
    o_proj = adapter.o_proj(model, 0)
    expected = x.clone()
    expected[1, :, 0:head_dim] = 0  # row 1 masks head 0; row 0 nothing
    with mask_heads_per_row(model, adapter, [[], [(0, 0)]]):
        torch.testing.assert_close(o_proj(x), torch.nn.functional.linear(expected, o_proj.weight, o_proj.bias))
        assert _o_proj_on(model, adapter, 0, META)(x.to(META)).device == META


def test_uniform_heads_follow_the_layers_device(tiny):
    model, _, adapter = tiny
    module = adapter.attention_module(model, 0)
    num_heads, head_dim = _geometry(model, adapter)
    kv_heads = model.config.text_config.num_key_value_heads
    q = torch.randn(1, num_heads, 5, head_dim, device=META)  # (B, H, N, D)
    kv = torch.randn(1, kv_heads, 5, head_dim, device=META)  # (B, Hkv, S, D)
    with uniform_heads({id(module): [1]}):  # the head set is a CPU tensor, the layer is elsewhere
        out, _ = vrh_attention_forward(module, q, kv, kv, None, scaling=head_dim ** -0.5, is_causal=True)
    assert out.device == META and out.shape == (1, 5, num_heads, head_dim)


def test_uniform_heads_read_a_mask_built_on_another_device():
    """The layer's visibility mask is moved to the layer: here the mask is the odd one out."""
    from vrh.core.attention import _uniform_output, allowed_keys

    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool).tril()  # (B, 1, N, S), built "on the first GPU"
    allowed = allowed_keys(mask, 4, 4, True, META)
    assert allowed.device == META
    value = torch.randn(1, 2, 4, 3, device=META)  # (B, Hkv, S, D)
    assert _uniform_output(value, allowed, torch.tensor([0, 3]), n_rep=2).device == META


# --- capture: rows leave the accelerator layer by layer, as float32 CPU tensors ----------------------
def test_capture_moves_each_layers_rows_to_cpu_as_it_runs(tiny):
    model, processor, adapter = tiny
    model = copy.deepcopy(model).to(torch.bfloat16)
    ids = torch.randint(3, 50, (1, 7))
    layers_of = {id(adapter.attention_module(model, i)): i for i in range(adapter.num_layers(model))}
    seen = []

    with torch.no_grad(), capture_attention_rows(model, adapter, [torch.tensor([4, 6])]) as cap:
        def spy(call):  # subscribed after the capture: runs right after it stored this layer
            layer = layers_of[id(call.module)]
            part = cap._parts[0][cap._slot[layer]]
            seen.append((layer, part.device, part.dtype))

        with observe_attention(spy):
            model(input_ids=ids)
    assert [s[0] for s in seen] == list(range(adapter.num_layers(model)))
    assert {(d, t) for _, d, t in seen} == {(torch.device("cpu"), torch.float32)}
    assert cap.rows(0).dtype == torch.float32


# --- the option, and tensor parallelism ---------------------------------------------------------------
def test_device_map_values():
    assert resolve_device_map(None) is None
    assert all(resolve_device_map(name) == name for name in DEVICE_MAPS)
    placed = {"model.visual": 0, "model.language_model": 1, "lm_head": 1}
    assert resolve_device_map(json.dumps(placed)) == placed
    with pytest.raises(ValueError, match="--device-map 'everywhere'"):
        resolve_device_map("everywhere")
    with pytest.raises(ValueError, match="not valid JSON"):
        resolve_device_map("{model: 0}")


@pytest.mark.parametrize("value", ["tp", "TP", "tp_plan"])
def test_tensor_parallelism_is_refused_before_loading(value, tmp_path):
    with pytest.raises(TensorParallelRefused, match="tensor parallelism is not supported.*heads across ranks"):
        load_model(str(tmp_path / "never-read"), device_map=value)


def test_a_model_loaded_tensor_parallel_is_refused(tiny_checkpoint, monkeypatch):
    from vrh.models.adapters.qwen_vl import QwenVLAdapter

    _, processor = tiny_qwen2_5_vl(seed=0)
    sharded = SimpleNamespace(tp_size=2, eval=lambda: None)  # what from_pretrained returns under a TP plan
    monkeypatch.setattr(QwenVLAdapter, "load", lambda self, path, **kw: (sharded, processor))
    with pytest.raises(TensorParallelRefused, match="tp_size=2"):
        load_model(tiny_checkpoint)


def test_the_command_option_reaches_load_model(tiny_checkpoint):
    import argparse

    from vrh.experiments.setup import load
    from vrh.options import ModelOptions, add_options, parse_config

    parser = argparse.ArgumentParser()
    add_options(parser, ModelOptions)
    cfg = parse_config(ModelOptions, parser.parse_args(["--model", tiny_checkpoint, "--device-map", "tp"]))
    assert cfg.device_map == "tp"
    with pytest.raises(TensorParallelRefused):
        load(cfg)


# --- end to end through accelerate's hooks (skipped without accelerate) ------------------------------
def test_a_dispatched_model_detects_and_masks_like_a_plain_one(tiny_checkpoint):
    pytest.importorskip("accelerate")
    from accelerate import cpu_offload
    from PIL import Image

    from vrh.models.generation import generate_answers

    plain = load_model(tiny_checkpoint)
    placed = load_model(tiny_checkpoint, device_map="auto")  # one CPU here: transformers puts all on it
    assert placed.device == torch.device("cpu")
    # weights on meta, streamed in by accelerate's hooks at each forward: the o_proj / attention inputs
    # now arrive through hooks, as they do on a multi-GPU split
    cpu_offload(placed.model, execution_device="cpu")
    assert placed.model.get_input_embeddings().weight.device == META
    assert placed.device == torch.device("cpu")

    images = [Image.new("RGB", (56, 56), (200, 30, 30))]
    prompts = [plain.adapter.grounding_prompt("the red box")]
    heads = [(0, 1), (1, 0)]
    answers, logits = {}, {}
    for name, lm in (("plain", plain), ("placed", placed)):
        batch = lm.adapter.build_batch(lm.processor, images, prompts)
        inputs = {k: (v.to(lm.device) if isinstance(v, torch.Tensor) else v) for k, v in batch.inputs.items()}
        with torch.no_grad(), mask_heads(lm.model, lm.adapter, heads):
            logits[name] = lm.model(**inputs).logits
            answers[name] = generate_answers(lm, images, prompts, max_new_tokens=4)[0]
        if name == "plain":
            with torch.no_grad():
                unmasked = lm.model(**inputs).logits
    assert not torch.allclose(unmasked, logits["plain"])  # the heads matter, so equality below means something
    torch.testing.assert_close(logits["placed"], logits["plain"])
    assert answers["placed"] == answers["plain"]

    rows = []
    for lm in (plain, placed):
        batch = lm.adapter.build_batch(lm.processor, images, prompts)
        inputs = {k: (v.to(lm.device) if isinstance(v, torch.Tensor) else v) for k, v in batch.inputs.items()}
        last = torch.tensor([batch.seq_len - 1])
        with torch.no_grad(), capture_attention_rows(lm.model, lm.adapter, [last]) as cap:
            lm.model(**inputs)
        rows.append(cap.rows(0))
    torch.testing.assert_close(rows[1], rows[0])
    assert rows[1].device == torch.device("cpu")


def test_a_named_map_is_refused_when_processes_share_the_node():
    from vrh.models.loading import check_device_map_launch

    with pytest.raises(ValueError, match="4 processes share this node.*CUDA_VISIBLE_DEVICES"):
        check_device_map_launch("auto", env={"LOCAL_WORLD_SIZE": "4"})
    check_device_map_launch("auto", env={"LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "4"})  # one per group/node
    check_device_map_launch({"": 0}, env={"LOCAL_WORLD_SIZE": "4"})  # the user's own placement
    check_device_map_launch(None, env={"LOCAL_WORLD_SIZE": "4"})


def test_a_device_map_without_accelerate_names_the_package(tiny_checkpoint, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "accelerate" else real(name, *a))
    with pytest.raises(ImportError, match="--device-map 'auto' needs the accelerate package"):
        load_model(tiny_checkpoint, device_map="auto")
