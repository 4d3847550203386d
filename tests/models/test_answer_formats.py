"""Answer formats (vrh.models.answer_formats): the shared box writings, the variant value, a user's file, which
variant a name resolves to, and the adapter copy a variant is applied to (the family's own untouched)."""

import json

import pytest

from vrh.models import answer_formats as af
from vrh.models.adapters import get_adapter, registered_adapters

SIZE = (200, 100)  # original image (width, height)
META = {"resized_size": (400, 300)}
BOX = (20.0, 10.0, 120.0, 60.0)


@pytest.mark.parametrize("name", sorted(af.box_writings()))
def test_every_shared_writing_reads_back_what_it_writes(name):
    w = af.box_writing(name)
    text = w.write(BOX, META, SIZE)
    back = w.read(f"The box is {text}.", META, SIZE)
    assert back == pytest.approx(BOX, abs=0.6)  # integer frames round to a unit of their frame


def test_writings_put_the_numbers_in_their_frame():
    assert af.box_writing("pixels").write(BOX, META, SIZE) == "[20, 10, 120, 60]"
    assert af.box_writing("resized").write(BOX, META, SIZE) == "[40, 30, 240, 180]"
    assert af.box_writing("norm1").write(BOX, META, SIZE) == "[0.100, 0.100, 0.600, 0.600]"
    assert af.box_writing("norm1000").write(BOX, META, SIZE) == "[100, 100, 600, 600]"
    assert af.box_writing("json_norm1000").write(BOX, META, SIZE) == '{"bbox_2d": [100, 100, 600, 600]}'
    assert af.box_writing("resized").read("[40, 30, 240, 180]", {}, SIZE) is None  # no resize: the original frame
    assert af.box_writing("resized").read("[40, 30, 200, 100]", {}, SIZE) == (40.0, 30.0, 200.0, 100.0)


def test_a_box_outside_a_writings_frame_is_no_box_of_it():
    text = "[40, 20, 80, 60]"
    assert af.box_writing("norm1").read(text, META, SIZE) is None  # 40 is no fraction
    assert af.box_writing("norm1000").read(text, META, SIZE) == (8.0, 2.0, 16.0, 6.0)
    assert af.box_writing("pixels").read("[40, 20, 280, 60]", META, SIZE) is None  # wider than the image
    assert af.box_writing("pixels").read("[0, 0, 200, 100]", META, SIZE) == (0.0, 0.0, 200.0, 100.0)  # edges in
    assert af.box_writing("norm999").read("[0, 0, 999, 999]", META, SIZE) == (0.0, 0.0, 200.0, 100.0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="a:b"), "a name is letters"),
    (dict(name="x", prompt="no slot"), "exactly one {expression}"),
    (dict(name="x", prompt="{expression} {expression}"), "exactly one {expression}"),
    (dict(name="x", prompt="{expression} at {where}"), "another brace field"),
    (dict(name="x", box="norm7"), "answer format 'x': no box writing 'norm7'; registered: json_norm1000"),
])
def test_a_bad_variant_is_refused_naming_why(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("(", r"\(")):
        af.AnswerFormat(**kwargs)


def test_a_literal_brace_is_written_twice():
    fmt = af.AnswerFormat("j", prompt='Answer {{"bbox": [...]}} for {expression}.', box="norm1000")
    assert af.apply(get_adapter("llava"), fmt).grounding_prompt("the cat") == 'Answer {"bbox": [...]} for the cat.'


def test_a_users_file_is_read_and_its_errors_name_the_entry(tmp_path):
    f = tmp_path / "mine.json"
    f.write_text(json.dumps([{"name": "ask_1000", "prompt": "Box of {expression}, 0-1000:", "box": "norm1000"},
                             {"name": "own_prompt_norm1", "box": "norm1"}]))
    mine = af.read_variants(f)
    assert [v.name for v in mine] == ["ask_1000", "own_prompt_norm1"] and mine[1].prompt is None
    for content, message in [("{}", "expected a non-empty JSON list"), ("[", "is not valid JSON"),
                             ('[{"name": "a", "colour": 1}]', r"entry 0: .*unknown keys \['colour'\]"),
                             ('[{"prompt": "{expression}"}]', "entry 0: expected an object with 'name'"),
                             ('[{"name": "a", "box": "nope"}]', "entry 0: answer format 'a': no box writing"),
                             ('[{"name": "a"}, {"name": "a"}]', r"\['a'\] named twice")]:
        f.write_text(content)
        with pytest.raises(ValueError, match=message):
            af.read_variants(f)
    with pytest.raises(FileNotFoundError, match="no answer-format file"):
        af.read_variants(tmp_path / "absent.json")


def test_a_name_resolves_to_the_familys_then_a_shared_then_a_files_variant(tmp_path):
    llava, qwen = get_adapter("llava"), get_adapter("qwen2_5_vl")
    assert af.resolve(None, llava) is af.declared(llava)[0] is af.NATIVE
    assert af.resolve(None, qwen) is af.NATIVE  # a family that declares nothing has its own format only
    assert af.resolve("norm999", qwen).box == "norm999"  # a shared variant, for any family
    f = tmp_path / "mine.json"
    f.write_text(json.dumps([{"name": "ask", "prompt": "Where is {expression}?", "box": "pixels"}]))
    assert af.resolve(f"{f}:ask", qwen).prompt == "Where is {expression}?"
    with pytest.raises(ValueError, match=r"--answer-format 'norm7': not a variant of qwen2_5_vl \(native\) nor a "
                                         "shared one"):
        af.resolve("norm7", qwen)
    with pytest.raises(ValueError, match="has no variant 'other'"):
        af.resolve(f"{f}:other", qwen)


@pytest.mark.parametrize("name", sorted(registered_adapters()))
def test_every_familys_default_variant_is_its_own_format_unchanged(name):
    """Every registered family (those added later included) declares valid variants, and its first one, applied,
    asks and reads exactly as the family did before variants existed."""
    adapter = registered_adapters()[name]()
    variants = af.declared(adapter)
    assert variants and len({v.name for v in variants}) == len(variants)
    first = af.apply(adapter, variants[0])
    if variants[0] is af.NATIVE:
        assert af.prompt_template(first) == af.prompt_template(adapter)
        for method in ("grounding_prompt", "parse_box", "format_box"):
            assert getattr(type(first), method) is getattr(type(adapter), method)
            assert method not in first.__dict__  # the class's own method, not a copy of it


def test_applying_a_variant_copies_the_adapter_and_a_later_one_undoes_it():
    llava = get_adapter("llava")
    norm1 = af.apply(llava, af.resolve("norm1", llava))
    assert norm1 is not llava and "parse_box" not in llava.__dict__ and llava.answer_format is None
    assert norm1.grounding_prompt("the cat").startswith("Locate the cat in the image.")
    assert norm1.parse_box("[0.1, 0.1, 0.6, 0.6]", {}, SIZE) == pytest.approx(BOX)
    assert norm1.format_box(BOX, {}, SIZE) == "[0.100, 0.100, 0.600, 0.600]"
    back = af.apply(norm1, af.NATIVE)
    assert back.parse_box("[20, 10, 120, 60]", {}, SIZE) == BOX  # llava's own pixels again
    assert back.grounding_prompt("the cat") == llava.grounding_prompt("the cat")
    assert af.record(back) == {"name": "native", "prompt": llava.prompt_template, "box": "native"}
    assert af.record(norm1)["box"] == "norm1" and af.in_use(norm1).name == "norm1"


def test_the_expression_is_located_in_a_variants_prompt():
    llava = af.apply(get_adapter("llava"), af.resolve("pixels", get_adapter("llava")))
    prompt = llava.grounding_prompt("image")  # the expression is also a word of the template
    assert llava.expression_offset(prompt, "image") == len("Locate ")
