"""The synthetic world: determinism, unambiguous expressions, boxes in the image, the JSONL format."""

import json

import numpy as np

from vrh.organism import world


def test_samples_are_deterministic_by_seed():
    for k in range(20):
        a, b = world.grounding_sample(3, k), world.grounding_sample(3, k)
        assert a["expression"] == b["expression"] and a["box"] == b["box"]
        assert np.array_equal(np.asarray(world.render(a["scene"])), np.asarray(world.render(b["scene"])))
    assert [world.grounding_sample(3, k)["box"] for k in range(10)] != \
        [world.grounding_sample(4, k)["box"] for k in range(10)]


def test_every_expression_refers_to_exactly_one_object_and_box_is_inside():
    kinds = set()
    for k in range(300):
        s = world.grounding_sample(0, k)
        kinds.add(s["kind"])
        assert world.resolve(s["scene"], s["spec"]) == [s["target"]]
        x1, y1, x2, y2 = s["box"]
        assert 0 <= x1 < x2 <= world.IMAGE_SIZE and 0 <= y1 < y2 <= world.IMAGE_SIZE
        assert 2 <= len(s["scene"].objects) <= 5
    assert kinds == {"attribute", "relation", "comparison"}


def test_vqa_answers_match_the_scene():
    for k in range(100):
        s = world.vqa_sample(0, k)
        objs = s["scene"].objects
        q = s["question"]
        if q.startswith("how many"):
            shape = q.split()[2][:-1]
            assert s["answer"] == str(sum(o.shape == shape for o in objs))
        elif q.startswith("what colour"):
            shape = q.split()[4]
            assert [o.colour for o in objs if o.shape == shape] == [s["answer"]]


def test_write_split_jsonl_format(tmp_path):
    for task in ("grounding", "vqa"):
        path = world.write_split(tmp_path / task, 5, seed=1, task=task)
        recs = [json.loads(line) for line in path.read_text().splitlines()]
        assert len(recs) == 5 and len({r["id"] for r in recs}) == 5
        for r in recs:
            extra = {"kind"} if task == "grounding" else set()  # expression kind, kept in Sample.meta
            assert set(r) == {"id", "image", "task", "expression", "box", "box_format", "question", "answer"} | extra
            assert r["task"] == task and r["box_format"] == "xyxy"
            assert (path.parent / r["image"]).exists()
            if task == "grounding":
                assert r["expression"] and len(r["box"]) == 4
            else:
                assert r["question"] and r["answer"]


def test_curriculum_levels_give_attribute_expressions_with_their_object_counts():
    for level, (lo, hi) in world.LEVELS.items():
        if level == "full":
            continue
        for i in range(20):
            s = world.grounding_sample(0, i, level=level)
            assert s["kind"] == "attribute"
            assert lo <= len(s["scene"].objects) <= hi
            assert world.resolve(s["scene"], s["spec"]) == [s["target"]]


def test_contrast_level_puts_the_referent_among_look_alikes():
    """Each distractor copies the referent but for one or two attributes, so the expression must name the
    attribute a shortcut would skip: colour is needed far more often than in the full world."""
    needs_colour = {"contrast": 0, "full": 0}
    for i in range(300):
        s = world.grounding_sample(4, i, level="contrast")
        objs, ref = s["scene"].objects, s["scene"].objects[s["target"]]
        assert 2 <= len(objs) <= 5 and world.resolve(s["scene"], s["spec"]) == [s["target"]]
        for o in objs:
            if o is not ref:
                assert 1 <= sum(getattr(o, k) != getattr(ref, k) for k in ("colour", "shape", "size")) <= 2
        needs_colour["contrast"] += "colour" in s["spec"]
        f = world.grounding_sample(4, i)
        needs_colour["full"] += f["kind"] == "attribute" and "colour" in f["spec"]
    assert world.grounding_sample(4, 7, level="contrast") == world.grounding_sample(4, 7, level="contrast")
    assert needs_colour["contrast"] > 2 * needs_colour["full"]
