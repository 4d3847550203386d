"""Stand-in parts for organism E's recipe tests: a tiny Llama LM and a tiny Dinov2 tower (random init), saved in
the layout :mod:`vrh.models.organism_e_base` writes (lm.safetensors + text_config.json + tokenizer; vision.safetensors
+ vision_config.json), so the recipe runs on them exactly as on the converted packages."""

import json

import pytest
import torch


@pytest.fixture(scope="module")
def stand_in_parts(tmp_path_factory):
    from safetensors.torch import save_file
    from transformers import Dinov2Config, Dinov2Model, LlamaConfig, LlamaForCausalLM

    from vrh.models import organism_e_base as parts
    from vrh.testing.tiny_models import build_tokenizer, tiny_text_config

    tok = build_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>", parts.IMAGE_TOKEN], pad="<|im_end|>",
                          eos="<|im_end|>", chat_template=parts.CHAT_TEMPLATE)
    lm_folder, vision_folder = tmp_path_factory.mktemp("lm"), tmp_path_factory.mktemp("vision")
    torch.manual_seed(0)
    text = LlamaConfig(**tiny_text_config(tok, {"tie_word_embeddings": True}, model_type="llama"))
    lm = LlamaForCausalLM(text)
    save_file({k: v.contiguous() for k, v in lm.state_dict().items() if k != "lm_head.weight"},
              str(lm_folder / parts.LM_WEIGHTS))
    (lm_folder / parts.LM_CONFIG).write_text(json.dumps(text.to_dict()))
    tok.save_pretrained(str(lm_folder))
    vision = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, patch_size=14,
                  image_size=112, layerscale_value=1.0)
    tower = Dinov2Model(Dinov2Config(**vision))
    save_file({k: v.contiguous() for k, v in tower.state_dict().items() if k != "embeddings.mask_token"},
              str(vision_folder / parts.VISION_WEIGHTS))
    (vision_folder / parts.VISION_CONFIG).write_text(json.dumps(vision))
    return lm_folder, vision_folder
