"""Prompt snapshots: the full prompt the qwen2_5_vl adapter builds for one converted sample of each source
below (the converter's text, the task's prompt through the adapter, the chat template), so a change to any of
them shows up here as a diff instead of silently moving every number. A new source may add its row here; no
list elsewhere has to name it. The chat template is the tiny test
processor's (Qwen's turn markers without the default system turn a real checkpoint's template adds)."""

import io

import pytest
from PIL import Image

from vrh.models.adapters import get_adapter
from vrh.data.sources import RowContext, get_source, source_names
from vrh.data.sources.choices import CHOICE_SUFFIX
from vrh.data.sources.images import ImageStore
from vrh.tasks import get_task

CHAT = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{}<|im_end|>\n<|im_start|>assistant\n"


def png(w=40, h=30, mask=False):
    im = Image.new("L" if mask else "RGB", (w, h), 0 if mask else "gray")
    if mask:
        im.paste(255, (5, 5, 20, 20))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def rows(folder):
    """One row per source, in its real schema (plus the private keys each read_rows adds)."""
    Image.new("RGB", (40, 30), "gray").save(folder / "a.jpg")
    image = {"bytes": png(), "path": None}
    grounding = {"question_id": "1", "image": image, "answer": ["the man in red", "red guy"], "bbox": [2, 3, 10, 12],
                 "file_name": "COCO_1.jpg"}
    refer = {"ref_id": 1, "ann_id": 5, "image_id": 1, "split": "val", "sentences": [{"sent": "the man in red"}],
             "_ann": {"bbox": [2, 3, 10, 12]}, "_image_path": folder / "a.jpg"}
    spatial = {"id": 1, "image": image, "mask": {"bytes": png(mask=True), "path": None}, "object": "the free spot",
               "prompt": "Please point to the free spot left of the cup.",
               "suffix": "Your answer should be formatted as a list of tuples, i.e. [(x1, y1)], where each tuple "
                         "contains the x and y coordinates of a point satisfying the conditions above. The "
                         "coordinates should be between 0 and 1, indicating the normalized pixel locations of the "
                         "points in the image."}
    return {
        "refcoco": grounding, "refcoco+": grounding, "refcocog": grounding,
        "refcoco-refer": refer, "refcoco+-refer": refer, "refcocog-refer": refer,
        "refspatial": spatial, ("refspatial", "point"): spatial,
        "toloka": {"image": "https://x/a.jpg", "width": "40", "height": "30", "left": "2", "top": "3", "right": "12",
                   "bottom": "15", "question": "What do you sit on?", "_image_path": folder / "a.jpg"},
        "cvbench": {"idx": 0, "image": image, "prompt": "Which object is closer to the camera?\nSelect from the "
                    "following choices.\n(A) lamp\n(B) chair", "choices": ["lamp", "chair"], "answer": "(B)",
                    "source": "Omni3D"},
        "mmstar": {"index": 1, "image": image, "question": "Which is on the table?\nOptions: A: a cup, B: a pen",
                   "answer": "A"},
        "countbenchqa": {"image": image, "question": "How many cats are there?", "number": 3},
        "countbench": {"image": image, "question": "How many cats are there?", "number": 3},
        "spatial457": {"image": image, "question": "What color is the small cube?", "answer": "red"},
        "mathvista": {"pid": "1", "question": "What is the measure of angle B?", "choices": ["30°", "60°"],
                      "answer": "60°", "question_type": "multi_choice", "decoded_image": image, "metadata": {}},
        ("mathvista", "float"): {"pid": "2", "question": "How long is the bar?", "choices": None, "answer": "1.5",
                                 "question_type": "free_form", "answer_type": "float", "precision": 1.0,
                                 "unit": "cm", "decoded_image": image, "metadata": {}},
        "vaw": {"image_id": "9", "instance_id": "3", "instance_bbox": [2, 3, 10, 12], "object_name": "mug",
                "positive_attributes": ["red"], "negative_attributes": ["blue", "green", "white"],
                "_image_path": folder / "a.jpg", "_types": {"red": ("color",), "blue": ("color",),
                                                            "green": ("color",), "white": ("color",)}},
        "spatialrgpt": {"id": "r2", "image_info": {"file_path": "a.jpg"}, "text_q": "How tall is Region [0]?",
                        "conversations": [{"from": "gpt", "value": "Region [0] is 30.05 inches tall."}],
                        "bbox": [[2, 2, 12, 10]], "qa_info": {"type": "quantitative", "category": "height_data"},
                        "_images": folder},
        ("spatialrgpt", "subset=qualitative"): {
            "id": "r1", "image_info": {"file_path": "a.jpg"}, "text_q": "Is Region [0] behind Region [1]?",
            "conversations": [{"from": "gpt", "value": "Yes, it is."}], "bbox": [[2, 2, 12, 10], [20, 4, 36, 20]],
            "qa_info": {"type": "qualitative", "category": "behind_predicate"}, "_images": folder},
    }


SNAPSHOTS = {
    "refcoco": "Locate the man in red in the image and output its bbox coordinates in JSON format.",
    "refcoco-refer": "Locate the man in red in the image and output its bbox coordinates in JSON format.",
    "refspatial": "Locate the free spot in the image and output its bbox coordinates in JSON format.",
    ("refspatial", "point"): (
        "Please point to the free spot left of the cup. Your answer should be formatted as a list of tuples, i.e. "
        "[(x1, y1)], where each tuple contains the x and y coordinates of a point satisfying the conditions above. "
        "The coordinates should be between 0 and 1, indicating the normalized pixel locations of the points in the "
        "image."),
    "toloka": "Locate the What do you sit on? in the image and output its bbox coordinates in JSON format.",
    "cvbench": ("Which object is closer to the camera?\nSelect from the following choices.\n(A) lamp\n(B) chair\n"
                "Answer with the option's letter from the given choices directly."),
    "mmstar": ("Which is on the table?\nOptions: A: a cup, B: a pen\n"
               "Answer with the option's letter from the given choices directly."),
    "countbenchqa": "How many cats are there?\nAnswer with a single number.",  # lmms-eval's post-prompt
    "countbench": ("Look at the image carefully and count the objects. Answer with just a number, without any "
                   "additional text. How many cats are there?"),  # lmms-eval countbench's pre-prompt
    "spatial457": "What color is the small cube?",
    "mathvista": ("What is the measure of angle B?\nChoices:\n(A) 30°\n(B) 60°\n"
                  "Answer with the option's letter from the given choices directly."),
    "vaw": ("What is the color of the mug in the red box?\nChoices:\n(A) red\n(B) green\n(C) blue\n(D) white\n"
            "Answer with the option's letter from the given choices directly."),
    ("mathvista", "float"): ("How long is the bar? (Unit: cm)\nPlease answer the question requiring a floating-point "
                             "number with one decimal place and provide the final value, e.g., 1.2, 1.3, 1.4, at the "
                             "end."),  # MathVista's own hint (build_query.py)
    "spatialrgpt": "Region [0] is outlined in red. How tall is Region [0]?\nAnswer with a number and its unit of length.",
    ("spatialrgpt", "subset=qualitative"): (
        "Region [0] is outlined in red and Region [1] in blue. Is Region [0] behind Region [1]?\n"
        "Answer with yes or no."),
}
SNAPSHOTS["refcoco+"] = SNAPSHOTS["refcocog"] = SNAPSHOTS["refcoco"]
SNAPSHOTS["refcoco+-refer"] = SNAPSHOTS["refcocog-refer"] = SNAPSHOTS["refcoco-refer"]


@pytest.fixture(scope="module")
def qwen25():
    from vrh.testing.tiny_models import tiny_qwen2_5_vl

    _, processor = tiny_qwen2_5_vl(seed=0)
    return get_adapter("qwen2_5_vl"), processor


def full_prompt(key, folder, adapter, processor):
    name, task_option = key if isinstance(key, tuple) else (key, None)
    source = get_source(name)
    # a variant is a source option ("subset=qualitative"), a --task value ("point"), or just another row
    options = dict([task_option.split("=", 1)]) if task_option and "=" in task_option else (
        {"task": task_option} if task_option in ("point", "grounding") else {})
    ctx = RowContext(source=name, split=source.default_split, images=ImageStore(folder / "images"), options=options)
    [sample] = source.convert_row("1", rows(folder)[key], ctx)
    return adapter.chat_text(processor, get_task(sample.task).prompt(adapter, sample))


def test_every_snapshot_is_of_a_registered_source():
    assert {k if isinstance(k, str) else k[0] for k in SNAPSHOTS} <= set(source_names())
    assert CHOICE_SUFFIX == "Answer with the option's letter from the given choices directly."


@pytest.mark.parametrize("key", list(SNAPSHOTS), ids=str)
def test_prompt_snapshot(key, tmp_path, qwen25):
    adapter, processor = qwen25
    assert full_prompt(key, tmp_path, adapter, processor) == CHAT.format(SNAPSHOTS[key])
