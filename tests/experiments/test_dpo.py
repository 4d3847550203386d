"""vrh.experiments.dpo: TRL drives vrh's models (the organism's tokenization, the tiny checkpoint's training),
the trained folder loads like the base, and an interrupted training resumes from its TRL checkpoint."""

from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from vrh import runs  # noqa: E402
from vrh.experiments import dpo  # noqa: E402
from vrh.experiments import preference_pairs as pp  # noqa: E402
from vrh.data import load_dataset  # noqa: E402
from vrh.options import DpoTrainOptions  # noqa: E402
from vrh.models.loading import load_model  # noqa: E402
from vrh.runs import written  # noqa: E402

FAST = DpoTrainOptions(lr=1e-3, epochs=1.0, max_steps=2, train_batch_size=2, grad_accum=1, save_steps=1)


def write_pairs(folder: Path, dataset, n: int = 4) -> Path:
    """A pairs.jsonl of the tiny dataset's grounding samples: chosen the GT box, rejected a wrong one."""
    samples = [s for s in load_dataset(dataset) if s.task == "grounding"][:n]
    rows = [pp.chat_pair(s, f"Locate the {s.expression}.", "[{}, {}, {}, {}]".format(*map(int, s.box)), "[0, 0, 1, 1]")
            for s in samples]
    folder.mkdir(parents=True, exist_ok=True)
    pp.write_pairs(folder / runs.PAIRS, rows)
    return folder


def test_trl_tokenizes_the_organism_prompt_as_vrh_inference_does():
    """TRL renders the chat and tokenizes with add_special_tokens=False; the organism's tokenizer adds a BOS at
    inference. The training processor must make the two identical, prompt and answer."""
    from PIL import Image
    from trl.trainer.dpo_trainer import DataCollatorForVisionPreference

    lm = load_model("organism")
    img = Image.new("RGB", (112, 112), "white")
    prompt = lm.adapter.prompt_template.format(expression="the red box")
    answer = "[ 4 , 8 , 40 , 60 ]"
    text = lm.adapter.chat_text(lm.processor, prompt) + lm.adapter.answer_sep + answer
    infer = lm.processor(images=[img], text=[text], return_tensors="pt")["input_ids"][0]  # [S]
    def row():  # a fresh example per call: the collator rewrites its messages in place
        pair = pp.chat_pair(_FakeSample(), prompt, answer, "[ 0 , 0 , 4 , 4 ]")
        return {**pair, "images": [img]}

    plain = DataCollatorForVisionPreference(lm.processor)([row()])
    assert plain["input_ids"][0][plain["attention_mask"][0].bool()].tolist() == infer.tolist()[1:]  # TRL alone: no BOS
    fixed = dpo.training_processor(lm.processor, lm.adapter)
    batch = DataCollatorForVisionPreference(fixed)([row()])  # rows: chosen, rejected
    chosen = batch["input_ids"][0][batch["attention_mask"][0].bool()]  # [S]
    assert chosen.tolist() == infer.tolist()
    assert lm.processor.chat_template != fixed.chat_template  # the caller's processor is untouched


class _FakeSample:
    image_path = __file__  # any existing file: chat_pair only records its path


def test_load_pairs_refuses_an_empty_or_broken_pairs_file(tmp_path, tiny_dataset):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / runs.PAIRS).write_text("")
    with pytest.raises(ValueError, match="no pairs"):
        dpo.load_pairs(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="dpo-pairs run folder"):
        dpo.load_pairs(tmp_path / "nowhere")
    folder = write_pairs(tmp_path / "p", tiny_dataset, n=2)
    rows = runs.read_jsonl(folder / runs.PAIRS)
    rows[1]["images"] = [str(tmp_path / "gone.png")]
    runs.write_jsonl(folder / runs.PAIRS, rows)
    with pytest.raises(FileNotFoundError, match="1 images"):
        dpo.load_pairs(folder)
    ds = dpo.load_pairs(write_pairs(tmp_path / "ok", tiny_dataset, n=3))
    assert len(ds) == 3 and ds[0]["images"][0].size == (84, 56)  # decoded to PIL by the cast


def test_a_few_dpo_steps_on_the_tiny_checkpoint_give_a_loadable_changed_model(tmp_path, tiny_checkpoint, tiny_dataset):
    ds = dpo.load_pairs(write_pairs(tmp_path / "pairs", tiny_dataset))
    policy, reference = load_model(tiny_checkpoint), load_model(tiny_checkpoint)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    out = dpo.train_dpo(policy, reference, ds, tmp_path / "run", FAST)
    assert out.steps == 2 and out.resumed_from is None and out.model_dir == str(tmp_path / "run" / dpo.MODEL_DIR)
    log = runs.read_jsonl(tmp_path / "run" / dpo.TRAIN_LOG)
    assert [r["step"] for r in log if "loss" in r] == [1, 2] and "rewards/margins" in log[0]
    assert not (tmp_path / "run" / dpo.CHECKPOINTS).exists()  # no optimizer state left behind
    assert written.has_record(out.model_dir) and written.foreign(out.model_dir) == []  # every file recorded
    trained = load_model(out.model_dir)
    after = trained.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # full-parameter update happened
    assert all(torch.equal(v, reference.model.state_dict()[k]) for k, v in before.items())  # reference untouched
    assert trained.processor.chat_template == policy.processor.chat_template  # saved with the original processor
    assert not (Path(out.model_dir) / "training_args.bin").exists()


def test_the_organisms_adapter_settings_travel_with_the_trained_model(tmp_path):
    base = load_model("organism")
    saved = tmp_path / "m"
    base.model.save_pretrained(saved)
    dpo.save_checkpoint_extras(base, saved)
    again = load_model(str(saved))
    assert (saved / "vrh.json").read_text() == (Path(base.path) / "vrh.json").read_text()
    assert again.adapter.prompt_template == base.adapter.prompt_template == "where is {expression} ?"


def test_an_interrupted_training_resumes_from_its_last_checkpoint(tmp_path, tiny_checkpoint, tiny_dataset, monkeypatch):
    """Killed after step 1 (checkpoint-1 written), resumed: the result equals an uninterrupted run's, weights
    included (transformers 5.24's Trainer alone reloads no weight of a save_pretrained checkpoint)."""
    ds = dpo.load_pairs(write_pairs(tmp_path / "pairs", tiny_dataset))
    full = dpo.train_dpo(load_model(tiny_checkpoint), load_model(tiny_checkpoint), ds, tmp_path / "full", FAST)
    real = dpo._log_callback

    def killed(path):  # vrh's logging callback, plus death before step 2 (step 1 trained, logged, checkpointed)
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 1:
                raise KeyboardInterrupt("killed")

        cb = real(path)
        return type("Killed", (type(cb),), {"on_step_begin": on_step_begin})()

    monkeypatch.setattr(dpo, "_log_callback", killed)
    with pytest.raises(KeyboardInterrupt):
        dpo.train_dpo(load_model(tiny_checkpoint), load_model(tiny_checkpoint), ds, tmp_path / "run", FAST)
    assert dpo.latest_checkpoint(tmp_path / "run" / dpo.CHECKPOINTS).endswith("checkpoint-1")
    monkeypatch.setattr(dpo, "_log_callback", real)
    out = dpo.train_dpo(load_model(tiny_checkpoint), load_model(tiny_checkpoint), ds, tmp_path / "run", FAST,
                        resume=True)
    assert out.resumed_from.endswith("checkpoint-1") and out.steps == 2
    a, b = load_model(full.model_dir).model.state_dict(), load_model(out.model_dir).model.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert out.train_loss == pytest.approx(full.train_loss, abs=1e-5)  # mean over both steps, as uninterrupted
    assert out.last_log["loss"] == pytest.approx(full.last_log["loss"], abs=1e-5)
    assert out.last_log["num_tokens"] == full.last_log["num_tokens"]  # the whole run's tokens, not step 2's


def test_a_checkpoint_a_kill_left_incomplete_is_not_resumed_from(tmp_path):
    """TRL writes trainer_state.json last: a checkpoint without it (or with it torn, or naming another step) is
    what a kill, Ctrl-C or a full disk leaves mid-write; the newest complete one is resumed from."""
    ckpts = tmp_path / "checkpoints"
    for step, state in [(1, '{"global_step": 1}'), (2, '{"global_step": 2}'), (3, None), (4, '{"global_st'),
                        (5, '{"global_step": 3}')]:
        (ckpts / f"checkpoint-{step}").mkdir(parents=True)
        (ckpts / f"checkpoint-{step}" / "model.safetensors").write_text("weights")
        if state is not None:
            (ckpts / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    assert dpo.latest_checkpoint(ckpts) == str(ckpts / "checkpoint-2")
    assert dpo.latest_checkpoint(tmp_path / "none") is None


def test_a_fresh_training_refuses_to_delete_what_it_did_not_write(tmp_path, tiny_checkpoint, tiny_dataset):
    """checkpoints/ and model/ are removed through their record of what vrh wrote (vrh.runs.written): a file
    the user put there stops the training before it deletes anything."""
    ds = dpo.load_pairs(write_pairs(tmp_path / "pairs", tiny_dataset))
    notes = tmp_path / "run" / dpo.CHECKPOINTS / "notes.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text("mine")
    with pytest.raises(FileExistsError, match="notes.txt"):
        dpo.train_dpo(load_model(tiny_checkpoint), load_model(tiny_checkpoint), ds, tmp_path / "run", FAST)
    assert notes.read_text() == "mine"


def test_policy_and_reference_must_be_two_models(tmp_path, tiny_lm_for_dpo):
    with pytest.raises(ValueError, match="two loads"):
        dpo.train_dpo(tiny_lm_for_dpo, tiny_lm_for_dpo, [], tmp_path, FAST)


@pytest.fixture
def tiny_lm_for_dpo(tiny_checkpoint):
    return load_model(tiny_checkpoint)


@pytest.mark.slow
def test_step_memory_measures_a_dpo_step_and_an_inference_forward(tmp_path, tiny_checkpoint, tiny_dataset):
    from vrh.experiments.dpo_memory import full_dpo_bytes, step_memory

    res = step_memory(tiny_checkpoint, str(write_pairs(tmp_path / "pairs", tiny_dataset)), n_pairs=2)
    assert res["inference"]["rows"] == res["dpo_step"]["rows"] == 4 and res["params"] > 0
    assert res["dpo_step"]["bytes"] > 0 and res["dpo_step"]["loaded_bytes"] > 0
    assert full_dpo_bytes(1e9, "float32")["master_weights"] == 0  # fp32 training keeps no second copy


@pytest.mark.parametrize("first, seconds, shown", [
    (1, 0.1, list(range(20, 201, 20))),  # fast steps: a line per tenth
    (121, 0.1, [140, 160, 180, 200]),  # resumed from step 120: the same tenths, the rate of this run's steps
    (181, 11.0, [183, 186, 189, 192, 195, 198, 200]),  # slow steps: a line per 30 s (and at the last tenth)
])
def test_a_log_gets_a_line_per_tenth_of_the_steps_or_per_30_s_not_per_step(tmp_path, monkeypatch, first, seconds,
                                                                          shown):
    """TRL logs every step, and vrh dpo wrote a line for each: 200 lines for 200 steps in a log, where the
    README promises one per tenth of the work or per 30 s (issue 37 item 14). The file keeps every step."""
    from types import SimpleNamespace

    monkeypatch.delenv("VRH_NO_PROGRESS", raising=False)
    now, lines = [0.0], []
    log = tmp_path / "train_vrh" / dpo.TRAIN_LOG  # the run folder's name says which of vrh dpo's two trainings
    log.parent.mkdir()
    cb = dpo._log_callback(log, interactive=False, clock=lambda: now[0], write=lines.append)
    cb.on_train_begin(None, SimpleNamespace(global_step=first - 1, max_steps=200), None)
    for step in range(first, 201):
        now[0] += seconds
        state = SimpleNamespace(global_step=step, max_steps=200, epoch=step / 100)
        cb.on_log(None, state, None, logs={"loss": 0.7, "rewards/margins": 0.01, "learning_rate": 1e-6})
    cb.on_log(None, state, None, logs={"train_runtime": 9.0})  # the end-of-training summary: no line
    assert len(runs.read_jsonl(log)) == 200 - first + 2
    assert [int(ln.split()[2].split("/")[0]) for ln in lines] == shown, lines
    assert lines[-1].startswith("dpo train_vrh: 200/200 steps (100%) ") and lines[-1].endswith(
        "ETA 0:00:00; loss 0.7 margins 0.01 learning_rate 1e-06")
    if first == 121:  # the rate counts this run's steps only
        assert lines[0].startswith("dpo train_vrh: 140/200 steps (70%) 0:00:02 elapsed, 10/s, ETA 0:00:06"), lines[0]
