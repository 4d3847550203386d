"""The lab's held-out grounding accuracy is vrh's: on the same records, its judge gives exactly the grounding
task's outcomes (LLaVA adapter parsing, IoU >= tau) and accuracy."""

import pytest

from vrh.data import load_dataset
from vrh.models.adapters import get_adapter
from vrh.organism import world
from vrh.tasks import get_task
from vrh_lab.organism.evaluate import GROUNDING, generate_answers, judge_grounding


def _answers(box, size):
    """Hand-built answers around the GT box: exact, shifted across IoU 0.5, overflowing the image, unreadable."""
    x1, y1, x2, y2 = box
    w = x2 - x1
    out = [f"[ {x1} , {y1} , {x2} , {y2} ]"]
    out += [f"[ {x1 + d} , {y1} , {x2 + d} , {y2} ]" for d in (w / 4, w / 3, w / 3 + 0.01, w / 2)]
    out += [f"[ {x1} , {y1} , {x2 + size} , {y2} ]", "[ 3 , 4 ]", "", "the red circle"]
    return out


@pytest.fixture(scope="module")
def organism_a():
    from vrh_lab.organism.probe_heads import load
    from vrh_lab.organism.processor import build_tokenizer

    from vrh.models.loading import organism_path

    model, spec, _ = load(organism_path())
    return model, build_tokenizer(), spec


def test_judge_grounding_is_the_grounding_tasks_judge_on_the_same_records(tmp_path, organism_a):
    n, seed = 8, 7
    records = load_dataset(world.write_split(tmp_path, n, seed))
    samples = [world.grounding_sample(seed, k) for k in range(n)]
    assert [list(r.box) for r in records] == [list(s["box"]) for s in samples]
    model, tok, spec = organism_a
    texts = generate_answers(model, tok, samples, spec)  # the organism's own answers, plus hand-built ones
    pairs = [(k, t) for k, t in enumerate(texts)] + [(k, t) for k in range(n)
                                                     for t in _answers(samples[k]["box"], spec.image_size)]
    task, adapter = get_task("grounding"), get_adapter("llava")
    assert GROUNDING == task  # the lab judges at the task's defaults (tau 0.5, boxes not clipped)
    theirs = [task.judge(adapter, records[k], t) for k, t in pairs]
    ours = [judge_grounding([samples[k]], [t]) for k, t in pairs]
    assert [o["acc"] == 1.0 for o in ours] == [r["outcome"] == "correct" for r in theirs]
    assert [o["parse_fail"] == 1.0 for o in ours] == [r["outcome"] == "parse_failure" for r in theirs]
    outcomes = {r["outcome"] for r in theirs}
    assert outcomes == {"correct", "mislocated", "parse_failure"}  # the records exercise every outcome

    whole = judge_grounding([samples[k] for k, _ in pairs], [t for _, t in pairs])
    summary = task.summarize(theirs)
    assert whole["acc"] == summary["accuracy"] and whole["parse_fail"] == summary["parse_failure_rate"]
    assert whole["n"] == summary["n"] == len(pairs)
