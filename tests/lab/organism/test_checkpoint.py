"""An exported organism loads through the same path as a real checkpoint, vrh prompts it with exactly the
token ids it was trained on, and `vrh demo` runs end to end on it."""

import pytest
import torch

from vrh import runs
from vrh.cli import main
from vrh.models.loading import load_model
from vrh.organism import world
from vrh_lab.organism.batches import answer_of, prompt_batch
from vrh_lab.organism.processor import snap
from vrh_lab.organism.train import PRESETS, Organisms, export


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    org = Organisms(PRESETS["tiny"])
    out = tmp_path_factory.mktemp("organism")
    export(org, out, n_eval=2)
    return out / "tiny_a", org


def test_adapter_reproduces_the_training_tokens(exported):
    path, org = exported
    lm = load_model(str(path))
    assert lm.adapter.name == "llava" and (path / "vrh.json").exists()
    samples = [world.grounding_sample(3, i) for i in range(3)] + [world.vqa_sample(3, 0)]
    images = [world.render(s["scene"]) for s in samples]
    prompts = [lm.adapter.grounding_prompt(s["expression"]) if s["task"] == "grounding"
               else lm.adapter.vqa_prompt(s["question"]) for s in samples]
    batch = lm.adapter.build_batch(lm.processor, images, prompts)
    trained = prompt_batch(samples, org.tok, org.spec_a)
    assert torch.equal(batch.inputs["input_ids"], trained["input_ids"])
    assert torch.allclose(batch.inputs["pixel_values"], trained["pixel_values"], atol=1e-6)
    # the GT answer written by the adapter is the trained answer string, token for token
    g = samples[0]
    box = tuple(float(snap(v, org.spec_a)) for v in g["box"])
    text = lm.adapter.format_box(box, {}, (112, 112))
    assert org.tok(text)["input_ids"] == org.tok(answer_of(g, org.spec_a))["input_ids"]
    assert lm.adapter.parse_box(text, {}, (112, 112)) == box


def test_demo_runs_end_to_end(exported, tmp_path):
    path, _ = exported
    out = tmp_path / "demo"
    assert main(["demo", "--model", str(path), "--out", str(out), "--n-detect", "6", "--n-eval", "6",
                 "--n-vqa", "4", "--k", "2"]) == 0
    r = runs.read_json(out / runs.RESULTS)
    for key in ("baseline_accuracy", "k", "num_heads_total", "vrh_masked_accuracy", "random_masked_accuracy_mean",
                "random_seeds", "vrh_parse_failure_rate", "elapsed_seconds"):
        assert key in r, key
    assert r["k"] == 2 and r["num_heads_total"] == 2 * 4 and r["random_seeds"] == [0, 1, 2]
    for key in ("baseline_accuracy", "vrh_masked_accuracy", "random_masked_accuracy_mean"):
        assert 0.0 <= r[key] <= 1.0
    assert (out / "report" / "report.html").exists()
    for sub in ("detect", "sweep_grounding", "sweep_vqa"):
        assert (out / sub / runs.CONFIG).exists()
