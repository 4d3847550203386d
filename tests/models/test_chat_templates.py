"""A checkpoint's chat template is rendered within bounds (issue 45 items 10, 14): loops count steps, values and
the output are size-checked before they are built, and whatever a template does wrong is one line naming the
checkpoint. No wall-clock: the bounds count steps and characters."""

from __future__ import annotations

import pytest

from vrh.models import chat_templates
from vrh.models.adapters import get_adapter
from vrh.testing import TINY_BUILDERS

from tests.models.adapters.pixels import coord_image

LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}{% endfor %}" \
        "{% endfor %}{% endfor %}"
HOSTILE = {
    "three nested range(100000) loops": (LOOPS, "broke a bound: its loops and calls took more than 100,000 steps"),
    "a macro calling itself twice, 30 deep": (
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(30) }}",
        "its loops and calls took more than 100,000 steps"),
    "tojson with a huge indent": ("{{ messages|tojson(indent=100000000) }}", "tojson's indent 100000000 is more than"),
    "a string repeated 10 GB": ("{{ 'x' * 10000000000 }}", "a repetition would hold 10,000,000,000 characters"),
    "a list repeated": ("{{ ([1] * 10000000000)|length }}", "a repetition would hold 10,000,000,000"),
    "doubling by ~": ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                      "{% endfor %}{{ ns.s }}", "a '~' concatenation would hold 8,388,608 characters"),
    "doubling by +": ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                      "{% endfor %}{{ ns.s }}", "a '+' would hold 8,388,608 characters"),
    "center filter": ("{{ 'x'|center(10000000000) }}", "the center filter would hold"),
    "indent filter": ("{{ ('a\n' * 100000)|indent(1000) }}", "the indent filter would hold"),
    "str.ljust": ("{{ 'x'.ljust(10000000000) }}", "str.ljust would hold 10,000,000,000"),
    "printf width": ("{{ '%10000000000s' % 'x' }}", "a formatted field would hold 10,000,000,000"),
    "format width": ("{{ '{:>10000000000}'.format('x') }}", "a formatted field would hold 10,000,000,000"),
    "huge power": ("{{ 2 ** 100000000 }}", "2 ** 100000000 is a number of more than 65,536 bits"),
    "replace filter": ("{{ ('x' * 1000000)|replace('x', 'yyyyyyyyyy') }}", "the replace filter would hold"),
    "join filter": ("{{ (['x' * 1000000] * 100)|join }}", "the join filter would hold 100,000,000"),
    "str.join": ("{{ ''.join(['x' * 1000000] * 100) }}", "str.join would hold 100,000,000"),
    "output": ("{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}", "its output would hold"),
    "sandbox escape": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "could not be rendered (SecurityError)"),
    "include": ("{% include 'other.jinja' %}", "could not be rendered (TypeError): no loader"),
    "import": ("{% import 'macros.jinja' as m %}", "could not be rendered (TypeError): no loader"),
    "raise": ("{{ raise_exception('no images here') }}", "could not be rendered (TemplateError): no images here"),
    "does not parse": ("{% for %}", "could not be rendered (TemplateSyntaxError)"),
    "endless recursion": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
                          "could not be rendered (RecursionError)"),
}


@pytest.fixture(scope="module")
def llava():
    return TINY_BUILDERS["llava"]()[1]


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_template_is_one_line_naming_the_checkpoint(case, llava, monkeypatch):
    template, message = HOSTILE[case]
    monkeypatch.setattr(llava, "chat_template", template)
    monkeypatch.setattr(llava.tokenizer, "name_or_path", "/ckpt/hostile")
    adapter = get_adapter("llava")
    with pytest.raises(chat_templates.TemplateRefused) as e:
        adapter.build_batch(llava, [coord_image(40, 30)], [adapter.grounding_prompt("a cat")])
    line = str(e.value)
    assert "\n" not in line and line.startswith("the chat template of /ckpt/hostile ") and message in line, line


def test_loops_are_counted_item_by_item(llava, monkeypatch):
    """Two nested range(10) loops take 132 steps: 10 + 100 items, and 2 calls (range, the loop's counter) for the
    outer loop and for each of the 10 inner ones. 132 allowed renders, 131 refuses."""
    monkeypatch.setattr(llava, "chat_template", "{% for i in range(10) %}{% for j in range(10) %}.{% endfor %}"
                                                "{% endfor %}")
    messages = [{"role": "user", "content": "hi"}]
    monkeypatch.setattr(chat_templates, "MAX_STEPS", 132)
    with chat_templates.bounded("c"):
        assert llava.apply_chat_template(messages, tokenize=False) == "." * 100
    monkeypatch.setattr(chat_templates, "MAX_STEPS", 131)
    with pytest.raises(chat_templates.TemplateTooCostly, match="more than 131 steps"), chat_templates.bounded("c"):
        llava.apply_chat_template(messages, tokenize=False)


def test_transformers_compiler_is_restored(llava):
    from transformers.utils import chat_template_utils

    original = chat_template_utils._compile_jinja_template
    with pytest.raises(chat_templates.TemplateRefused), chat_templates.bounded("c"):
        assert chat_template_utils._compile_jinja_template is chat_templates.compile_template
        raise chat_templates.TemplateBudget("stop")
    assert chat_template_utils._compile_jinja_template is original


@pytest.mark.parametrize("family", sorted(TINY_BUILDERS))
def test_every_familys_template_renders_as_transformers_renders_it(family):
    """The bounded environment changes nothing a real template writes: each family's chat, and a teacher-forced
    one, equal transformers' own rendering."""
    from transformers.utils import chat_template_utils

    _, processor = TINY_BUILDERS[family]()
    adapter = get_adapter(family)
    prompt = adapter.grounding_prompt("the red ball")
    bounded = adapter.chat_text(processor, prompt) if hasattr(adapter, "chat_text") else None
    if bounded is None:
        pytest.skip(f"{family} renders no chat template of its own")
    unbounded_compile = chat_template_utils._compile_jinja_template
    try:  # the adapter's own chat_text with the bounded compiler swapped back to transformers'
        chat_templates_compile = chat_templates.compile_template
        chat_templates.compile_template = unbounded_compile
        theirs = adapter.chat_text(processor, prompt)
    finally:
        chat_templates.compile_template = chat_templates_compile
    assert bounded == theirs


@pytest.mark.parametrize("case", ["three nested range(100000) loops", "a string repeated 10 GB", "sandbox escape",
                                  "include", "does not parse"])
def test_a_checkpoints_hostile_template_file_is_one_line_at_the_cli(case, tmp_path, tiny_dataset, capsys):
    """End to end: the template in the checkpoint folder's chat_template.jinja, ``vrh detect`` on it."""
    from vrh.cli import main
    from vrh.testing import save_tiny

    folder = save_tiny(*TINY_BUILDERS["llava"](), tmp_path / "ckpt")
    files = [f for f in folder.iterdir() if f.name.startswith("chat_template")]
    assert [f.name for f in files] == ["chat_template.jinja"]
    files[0].write_text(HOSTILE[case][0], encoding="utf-8")
    rc = main(["detect", "--model", str(folder), "--data", str(tiny_dataset), "--n", "2", "--out",
               str(tmp_path / "det"), "--max-new-tokens", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith(f"vrh detect: error: the chat template of {folder} ") and \
        HOSTILE[case][1] in err[-1], err
