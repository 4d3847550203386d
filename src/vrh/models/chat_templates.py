"""A checkpoint's chat template rendered within bounds: the template is a program its author wrote.

transformers renders chat templates in Jinja's immutable sandbox, which stops attribute escapes but not a
template that loops ``range(100000)`` three deep (forever) or repeats a string until it holds 10 GB. While
:func:`bounded` is active, transformers compiles templates in :class:`BoundedEnvironment` instead (the same
sandbox, options, filters, globals and extensions as its own): every loop item and every call (a macro's
included) counts against :data:`MAX_STEPS` per render, and no value (a repeated, concatenated, padded, replaced or joined string or list)
nor the output may exceed :data:`MAX_CHARS`, checked before the value is built. A template that breaks a
bound, escapes the sandbox, includes or imports, raises, recurses without end or does not parse is one line
(:class:`TemplateRefused`) naming whose template it is.

Real templates stay far inside: one chat turn renders in tens of loop steps and a few hundred characters.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

MAX_STEPS = 100_000  # loop items and calls one render may take (a real template: tens per message)
MAX_CHARS = 4 * 2**20  # characters (or list items) any value, and the whole output, may hold
MAX_INDENT = 64  # tojson's indent (it repeats per nesting level and item: a huge one is a huge string)

_steps: ContextVar[list[int]] = ContextVar("vrh_template_steps")
_WIDTH = re.compile(r"%[-+ #0]*(\d+)|%[-+ #0]*\d*\.(\d+)|\{[^{}]*?:[^{}]*?(\d+)")  # widths in a format string


class TemplateRefused(ValueError):
    """A chat template that broke a bound or could not be rendered; one line."""


class TemplateTooCostly(TemplateRefused):
    """A chat template that broke a bound (time or size): never a template merely unsuited to the messages."""


class TemplateBudget(Exception):
    """Raised inside a render that broke a bound (turned into :class:`TemplateRefused` by :func:`bounded`)."""


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def _check(size: int, what: str) -> None:
    if size > MAX_CHARS:
        raise TemplateBudget(f"{what} would hold {size:,} characters, more than the {MAX_CHARS:,} a render may")


def _step() -> None:
    """One step of the render (a loop item, a call) counted against :data:`MAX_STEPS`."""
    steps = _steps.get()
    steps[0] += 1
    if steps[0] > MAX_STEPS:
        raise TemplateBudget(f"its loops and calls took more than {MAX_STEPS:,} steps")


def _count(items: Any) -> Iterator[Any]:
    """``items``, each counted as a step (every loop of a template iterates this)."""
    for item in items:
        _step()
        yield item


def _concat(*parts: Any) -> str:
    """The ``~`` operator, its result's size checked first."""
    strings = [str(p) for p in parts]
    _check(sum(map(len, strings)), "a '~' concatenation")
    return "".join(strings)


def _format_widths(fmt: Any) -> None:
    if isinstance(fmt, str):
        for m in _WIDTH.finditer(fmt):
            _check(max(int(g) for g in m.groups() if g), "a formatted field")


def _grows(name: str, s: str, args: tuple, kwargs: dict) -> None:
    """A string method's result size, checked before it is built."""
    if name in ("ljust", "rjust", "center", "zfill") and args and isinstance(args[0], int):
        _check(args[0], f"str.{name}")
    elif name == "expandtabs":
        _check(len(s) + s.count("\t") * int(args[0] if args else kwargs.get("tabsize", 8)), "str.expandtabs")
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        hits = s.count(args[0]) if args[0] else len(s) + 1
        _check(len(s) + hits * len(args[1]), "str.replace")
    elif name == "join" and args and isinstance(args[0], (list, tuple)):
        _check(sum(len(str(x)) for x in args[0]) + len(s) * len(args[0]), "str.join")


def _bounded_filters(filters: dict[str, Any]) -> dict[str, Any]:
    """Jinja's filters that can grow a value, each checking the result's size first."""
    wrapped = dict(filters)

    def pad(name: str):
        original = filters[name]

        def run(value: Any, width: Any = 80 if name == "center" else 4, *args: Any, **kwargs: Any) -> Any:
            text = str(value)
            if isinstance(width, int):
                _check(len(text) + width * (1 if name == "center" else text.count("\n") + 1), f"the {name} filter")
            return original(value, width, *args, **kwargs)
        return run

    for name in ("center", "indent"):
        if name in filters:
            wrapped[name] = pad(name)
    if "replace" in filters:
        original_replace = filters["replace"]

        def replace(eval_ctx: Any, s: Any, old: Any, new: Any, count: Any = None) -> Any:
            text, old_s, new_s = str(s), str(old), str(new)
            _check(len(text) + (text.count(old_s) if old_s else len(text) + 1) * len(new_s), "the replace filter")
            return original_replace(eval_ctx, s, old, new, count)
        replace.jinja_pass_arg = getattr(original_replace, "jinja_pass_arg", None)  # type: ignore[attr-defined]
        wrapped["replace"] = replace
    if "join" in filters:
        original_join = filters["join"]

        def join(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> Any:
            items = list(value)
            _check(sum(len(str(x)) for x in items) + len(str(d)) * len(items), "the join filter")
            return original_join(eval_ctx, items, d, attribute)
        join.jinja_pass_arg = getattr(original_join, "jinja_pass_arg", None)  # type: ignore[attr-defined]
        wrapped["join"] = join
    if "format" in filters:
        original_format = filters["format"]

        def format_(value: Any, *args: Any, **kwargs: Any) -> Any:
            _format_widths(value)
            return original_format(value, *args, **kwargs)
        wrapped["format"] = format_
    if "tojson" in filters:
        original_tojson = filters["tojson"]

        def tojson(value: Any, *args: Any, indent: Any = None, **kwargs: Any) -> Any:
            if isinstance(indent, int) and indent > MAX_INDENT or isinstance(indent, str) and len(indent) > MAX_INDENT:
                raise TemplateBudget(f"tojson's indent {indent if isinstance(indent, int) else len(indent)} is more "
                                     f"than the {MAX_INDENT} a render may use")
            return original_tojson(value, *args, indent=indent, **kwargs)
        wrapped["tojson"] = tojson
    if "wordwrap" in filters:
        original_wrap = filters["wordwrap"]

        def wordwrap(environment: Any, s: Any, width: int = 79, *args: Any, **kwargs: Any) -> Any:
            _check(len(str(s)) * 2, "the wordwrap filter")
            return original_wrap(environment, s, width, *args, **kwargs)
        wordwrap.jinja_pass_arg = getattr(original_wrap, "jinja_pass_arg", None)  # type: ignore[attr-defined]
        wrapped["wordwrap"] = wordwrap
    return wrapped


@functools.cache
def _environment_class() -> type:
    import jinja2
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.visitor import NodeTransformer

    class Counted(NodeTransformer):
        """Every ``for`` loop iterates :func:`_count` over its items; every ``~`` goes through :func:`_concat`."""

        def visit_For(self, node: nodes.For) -> nodes.Node:
            node = self.generic_visit(node)
            node.iter = nodes.Call(nodes.Name("__vrh_count__", "load"), [node.iter], [], None, None,
                                   lineno=node.lineno)
            return node

        def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
            node = self.generic_visit(node)
            return nodes.Call(nodes.Name("__vrh_concat__", "load"), list(node.nodes), [], None, None,
                              lineno=node.lineno)

    class BoundedTemplate(jinja2.Template):
        def render(self, *args: Any, **kwargs: Any) -> str:
            token = _steps.set([0])
            try:
                out, size = [], 0
                for chunk in self.generate(*args, **kwargs):
                    size += len(chunk)
                    _check(size, "its output")
                    out.append(chunk)
                return "".join(out)
            finally:
                _steps.reset(token)

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        """transformers' sandbox with vrh's bounds (see the module docstring)."""

        intercepted_binops = frozenset({"*", "**", "%", "+"})
        template_class = BoundedTemplate

        def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
            return Counted().visit(super()._parse(source, name, filename))

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "*" and isinstance(right, int) and _size(left):
                _check(_size(left) * right, "a repetition")
            elif operator == "*" and isinstance(left, int) and _size(right):
                _check(_size(right) * left, "a repetition")
            elif operator == "+" and _size(left) and _size(right):
                _check(_size(left) + _size(right), "a '+'")
            elif operator == "%":
                _format_widths(left)
            elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
                if right > 0 and right * math.log2(abs(left)) > 2**16:
                    raise TemplateBudget(f"{left} ** {right} is a number of more than 65,536 bits")
            return super().call_binop(context, operator, left, right)

        def wrap_str_format(self, value: Any) -> Any:
            """``str.format`` / ``format_map``, which Jinja wraps at attribute access: its widths checked there."""
            fmt = super().wrap_str_format(value)
            if fmt is not None:
                _format_widths(getattr(value, "__self__", None))
            return fmt

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's
            _step()  # every call, a macro's included: a macro calling itself twice, 30 deep, is 2^30 calls
            owner = getattr(__obj, "__self__", None)
            if isinstance(owner, str):
                _grows(getattr(__obj, "__name__", ""), owner, args, kwargs)
            return super().call(__context, __obj, *args, **kwargs)

    return BoundedEnvironment


@functools.lru_cache(maxsize=64)
def compile_template(source: str) -> Any:
    """``source`` compiled as transformers compiles a chat template (its own environment's options, filters,
    globals and extensions, read off a template it compiled), in :class:`BoundedEnvironment`."""
    from transformers.utils import chat_template_utils

    theirs = chat_template_utils._cached_compile_jinja_template("").environment
    env = _environment_class()(trim_blocks=theirs.trim_blocks, lstrip_blocks=theirs.lstrip_blocks,
                               extensions=[type(e) for e in theirs.extensions.values()])
    env.filters.update(_bounded_filters({**theirs.filters}))
    env.globals.update({k: v for k, v in theirs.globals.items() if k != "activate_tracker"})
    env.globals.update(__vrh_count__=_count, __vrh_concat__=_concat)
    return env.from_string(source)


@contextlib.contextmanager
def bounded(whose: str) -> Iterator[None]:
    """Render chat templates (``apply_chat_template`` inside the block) in :class:`BoundedEnvironment`; a template
    that cannot be rendered within bounds is :class:`TemplateRefused`, one line naming ``whose`` template it is
    (a checkpoint folder). transformers' own compiler is restored on the way out."""
    import jinja2
    from transformers.utils import chat_template_utils

    original = chat_template_utils._compile_jinja_template
    chat_template_utils._compile_jinja_template = compile_template
    try:
        yield
    except (TemplateBudget, jinja2.TemplateError, RecursionError, OverflowError, TypeError) as e:
        kind = type(e).__name__
        detail = " ".join(str(e).split())[:200] or kind
        what = "broke a bound" if isinstance(e, TemplateBudget) else f"could not be rendered ({kind})"
        refused = TemplateTooCostly if isinstance(e, TemplateBudget) else TemplateRefused
        raise refused(f"the chat template of {whose} {what}: {detail}") from None
    finally:
        chat_template_utils._compile_jinja_template = original


def whose(processor: Any) -> str:
    """Where ``processor``'s (or a tokenizer's) template came from, for :func:`bounded`'s messages."""
    tok = getattr(processor, "tokenizer", processor)
    return str(getattr(tok, "name_or_path", "") or getattr(processor, "name_or_path", "") or "the processor")
