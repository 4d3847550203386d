"""Answer formats: how a grounding prompt asks for a box and how the answer writes it, as named variants.

A checkpoint's box format is not always written down (Magma, Phi-4 reasoning-vision): the words that make it
answer a box, and the frame of the numbers it writes (pixels, 0-1 fractions, 0-1000 integers, ...), must then
be found by trying. An :class:`AnswerFormat` is one such guess: a name, a prompt template with an
``{expression}`` slot, and a *box writing* (:class:`BoxWriting`: how a box is read from an answer and written
for teacher forcing, registered by name). ``vrh probe-format`` runs every variant on a few samples; every
grounding command takes ``--answer-format NAME`` and records the variant it used in ``config.json``
(``model.answer_format``, :func:`record`).

Where the variants come from, for one adapter (:func:`declared`):

* the family's own, ``answer_formats`` in its adapter file, the first its default; a family that declares none
  has one, :data:`NATIVE`: its ``prompt_template`` / ``grounding_prompt``, ``parse_box`` and ``format_box``,
  exactly as before variants existed;
* the shared ones (:data:`SHARED`), for any family, by name;
* a user's JSON file, ``--answer-format my_formats.json:NAME`` (:func:`read_variants`): a list of objects
  ``{"name": ..., "prompt": "... {expression} ...", "box": "<a registered box writing>", "about": ...}``;
  ``prompt`` or ``box`` left out means the family's own.

A variant is put in place by :func:`apply`: a copy of the adapter whose ``grounding_prompt``, ``parse_box`` and
``format_box`` are the variant's, so a run never changes the adapter another run holds.

Shared box writings read a box with :func:`vrh.data.boxes.parse_box` (any way of writing four numbers it
accepts) and then keep it only when every coordinate lies inside the writing's frame, edges included: numbers
outside it (``[40, 20, 80, 60]`` read as 0-1 fractions) mean the model is not writing this format, so the
answer counts as no box rather than as a mislocated one. That keeps ``vrh probe-format``'s parse rate telling
frames apart; a family's own ``parse_box`` (the native variant) keeps its own rule.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from vrh.data import boxes

Box = tuple[float, float, float, float]  # (x1, y1, x2, y2), original-image pixels
SLOT = "{expression}"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # no ':' (FILE:NAME) and no blanks (a CLI value)


# --- box writings ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BoxWriting:
    """How answers write a box: ``read(text, meta, image_size)`` -> original-pixel box or None, and
    ``write(box, meta, image_size)`` -> the answer text (teacher forcing on the ground truth). ``meta`` is the
    adapter's per-sample dict from ``build_batch`` (``resized_size`` where the processor resizes)."""

    name: str
    about: str  # one line, as ``vrh models`` shows a family's box_convention
    read: Callable[[str, dict[str, Any], tuple[int, int]], Box | None]
    write: Callable[[Box, dict[str, Any], tuple[int, int]], str]


_WRITINGS: dict[str, BoxWriting] = {}


def register_box_writing(writing: BoxWriting) -> BoxWriting:
    """Register ``writing`` under its name (a second, different one of the same name is an error)."""
    if not NAME_RE.match(writing.name):
        raise ValueError(f"box writing name {writing.name!r}: letters, digits, '_', '.', '-' only")
    if _WRITINGS.get(writing.name, writing) is not writing:
        raise ValueError(f"box writing {writing.name!r} registered twice")
    _WRITINGS[writing.name] = writing
    return writing


def box_writings() -> dict[str, BoxWriting]:
    return dict(_WRITINGS)


def box_writing(name: str) -> BoxWriting:
    if name not in _WRITINGS:
        raise ValueError(f"no box writing {name!r}; registered: {', '.join(sorted(_WRITINGS))}")
    return _WRITINGS[name]


def _frame_size(frame: str, meta: dict[str, Any], image_size: tuple[int, int]) -> tuple[float, float]:
    """(width, height) of a frame: the scale of a relative one, the image's (or the resized image's) pixels."""
    if frame == "pixels":
        return image_size
    if frame == "resized":
        return tuple(meta.get("resized_size") or image_size)  # no resize recorded: the original
    return (float(frame), float(frame))


def _reader(frame: str) -> Callable[[str, dict[str, Any], tuple[int, int]], Box | None]:
    def read(text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        found = boxes.parse_box(text)
        if found is None:
            return None
        box = found[1]
        fw, fh = _frame_size(frame, meta, image_size)
        if not all(0 <= v <= edge for v, edge in zip(box, (fw, fh, fw, fh))):
            return None  # outside the frame: not this format (module docstring)
        return boxes.from_resized(box, (fw, fh), image_size)  # frame units -> original pixels
    return read


def _writer(frame: str, decimals: int, json_key: bool) -> Callable[[Box, dict[str, Any], tuple[int, int]], str]:
    def write(box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        scaled = boxes.to_resized(box, _frame_size(frame, meta, image_size), image_size)
        coords = "[" + ", ".join(f"{v:.{decimals}f}" if decimals else str(int(round(v))) for v in scaled) + "]"
        return '{"bbox_2d": ' + coords + "}" if json_key else coords
    return write


def _shared_writing(name: str, frame: str, about: str, decimals: int = 0, json_key: bool = False) -> BoxWriting:
    return register_box_writing(BoxWriting(name, about, _reader(frame), _writer(frame, decimals, json_key)))


_shared_writing("pixels", "pixels", "[x1, y1, x2, y2] integer pixels of the original image")
_shared_writing("resized", "resized", "[x1, y1, x2, y2] integer pixels of the image as the processor resized it")
_shared_writing("norm1", "1", "[x1, y1, x2, y2] fractions 0-1 of the image width and height", decimals=3)
_shared_writing("norm1000", "1000", "[x1, y1, x2, y2] integers 0-1000 relative to the image width and height")
_shared_writing("norm999", "999", "[x1, y1, x2, y2] integers 0-999 relative to the image width and height "
                                  "(x = v / 999 * width)")
_shared_writing("json_pixels", "pixels", 'JSON {"bbox_2d": [x1, y1, x2, y2]}, integer pixels of the original image',
                json_key=True)
_shared_writing("json_resized", "resized", 'JSON {"bbox_2d": [x1, y1, x2, y2]}, integer pixels of the resized image '
                                           "(Qwen2.5-VL's frame)", json_key=True)
_shared_writing("json_norm1000", "1000", 'JSON {"bbox_2d": [x1, y1, x2, y2]}, integers 0-1000 relative '
                                         "(Qwen3-VL's frame)", json_key=True)


# --- answer formats ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class AnswerFormat:
    """One prompt/answer variant. ``prompt``: a template with one ``{expression}`` slot (None: the family's
    own ``grounding_prompt``); ``box``: a registered box writing (None: the family's own ``parse_box`` and
    ``format_box``); ``about``: one line for tables and ``--help``; ``bos``: how the tokenized prompt begins, one of
    :data:`BOS_MODES` (None: the family's own, its adapter's ``bos``)."""

    name: str
    prompt: str | None = None
    box: str | None = None
    about: str = ""
    bos: str | None = None

    def __post_init__(self):
        where = f"answer format {self.name!r}"
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise ValueError(f"{where}: a name is letters, digits, '_', '.', '-' (no ':' or blank)")
        if self.prompt is not None:
            if not isinstance(self.prompt, str) or self.prompt.count(SLOT) != 1:
                raise ValueError(f"{where}: prompt must be a string with exactly one {SLOT} slot, got {self.prompt!r}")
            try:
                self.prompt.format(expression="x")
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(f"{where}: prompt {self.prompt!r} has another brace field than {SLOT} ({e!r}; "
                                 "write a literal brace as {{ or }})") from None
        if self.box is not None and self.box not in _WRITINGS:
            raise ValueError(f"{where}: no box writing {self.box!r}; registered: {', '.join(sorted(_WRITINGS))}")
        if self.bos is not None and self.bos not in BOS_MODES:
            raise ValueError(f"{where}: bos must be one of {', '.join(BOS_MODES)}, got {self.bos!r}")

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "prompt": self.prompt, "box": self.box, "about": self.about}
        return {**out, "bos": self.bos} if self.bos is not None else out


# how a chat-template family's tokenized prompt begins (ChatTemplateAdapter.leading_bos): "one" BOS (the template's
# dropped where the tokenizer adds its own: vrh's one_bos, transformers' own tokenize=True), or as "template" and
# tokenizer give it (both kept where both write one: Magma's authors' path, two BOS with Llama 3's tokenizer)
BOS_MODES = ("one", "template")


NATIVE = AnswerFormat("native", about="the family's own prompt and box format (its box_convention)")
_ASK = "Locate {expression} in the image. Answer with its bounding box [x1, y1, x2, y2] "
SHARED: tuple[AnswerFormat, ...] = (
    AnswerFormat("pixels", _ASK + "in pixels of the image.", "pixels", box_writing("pixels").about),
    AnswerFormat("resized", _ASK + "in pixels of the image.", "resized", box_writing("resized").about),
    AnswerFormat("norm1", _ASK + "as fractions of the image width and height, from 0 to 1.", "norm1",
                 box_writing("norm1").about),
    AnswerFormat("norm1000", _ASK + "as integers from 0 to 1000, relative to the image width and height.",
                 "norm1000", box_writing("norm1000").about),
    AnswerFormat("norm999", _ASK + "as integers from 0 to 999, relative to the image width and height.",
                 "norm999", box_writing("norm999").about),
    AnswerFormat("json_pixels", "Locate {expression} in the image and output its bbox coordinates in JSON format.",
                 "json_pixels", box_writing("json_pixels").about),
    AnswerFormat("json_resized", "Locate {expression} in the image and output its bbox coordinates in JSON format.",
                 "json_resized", box_writing("json_resized").about),
    AnswerFormat("json_norm1000", "Locate {expression} in the image, output its bbox coordinates using JSON format.",
                 "json_norm1000", box_writing("json_norm1000").about),
)


def shared(*names: str) -> tuple[AnswerFormat, ...]:
    """The shared variants of these names, in this order: what a family adds to its ``answer_formats``.

    >>> [f.name for f in shared("norm1000", "pixels")]
    ['norm1000', 'pixels']
    """
    by_name = {f.name: f for f in SHARED}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"no shared answer format {unknown}; shared: {', '.join(by_name)}")
    return tuple(by_name[n] for n in names)


def declared(adapter: Any) -> tuple[AnswerFormat, ...]:
    """The variants ``adapter``'s family declares (``answer_formats``), the first its default; (NATIVE,) when
    it declares none."""
    found = tuple(getattr(adapter, "answer_formats", ()) or ()) or (NATIVE,)
    names = [f.name for f in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice or not all(isinstance(f, AnswerFormat) for f in found):
        raise ValueError(f"{type(adapter).__name__}.answer_formats must be AnswerFormat values with distinct names"
                         + (f"; {twice} appear twice" if twice else ""))
    return found


def read_variants(path: str | Path) -> tuple[AnswerFormat, ...]:
    """The variants of a user's JSON file: a list of ``{"name", "prompt", "box", "about"}`` objects (only
    ``name`` required). Errors name the file and the entry."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"no answer-format file {file}")
    from vrh.infra.json_text import read_json

    entries = read_json(file, max_bytes=2**20, max_depth=8)  # too big, not UTF-8, not JSON: one line naming it
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"answer-format file {file}: expected a non-empty JSON list of "
                         '{"name": ..., "prompt": "... {expression} ...", "box": ...} objects')
    keys = {f.name for f in fields(AnswerFormat)}
    out: list[AnswerFormat] = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or "name" not in e or set(e) - keys:
            extra = sorted(set(e) - keys) if isinstance(e, dict) else []
            raise ValueError(f"answer-format file {file}, entry {i}: expected an object with 'name' and any of "
                             f"'prompt', 'box', 'about'" + (f"; unknown keys {extra}" if extra else ""))
        try:
            out.append(AnswerFormat(**e))
        except ValueError as err:
            raise ValueError(f"answer-format file {file}, entry {i}: {err}") from None
    names = [f.name for f in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"answer-format file {file}: {twice} named twice")
    return tuple(out)


def resolve(spec: str | AnswerFormat | None, adapter: Any) -> AnswerFormat:
    """The variant ``spec`` names for ``adapter``: None -> the family's first; ``NAME`` -> one the family
    declares, else a shared one; ``FILE.json:NAME`` -> that entry of a user's file; an AnswerFormat as is."""
    if isinstance(spec, AnswerFormat):
        return spec
    family = declared(adapter)
    if spec is None:
        return family[0]
    file, colon, name = spec.rpartition(":")
    if colon and file.endswith(".json"):
        found = {f.name: f for f in read_variants(file)}
        if name not in found:
            raise ValueError(f"--answer-format {spec}: {file} has no variant {name!r} (it has {', '.join(found)})")
        return found[name]
    known = {f.name: f for f in (*SHARED, *family)}  # the family's own win over a shared one of the same name
    if spec not in known:
        raise ValueError(f"--answer-format {spec!r}: not a variant of {getattr(adapter, 'name', '?')} "
                         f"({', '.join(f.name for f in family)}) nor a shared one ({', '.join(f.name for f in SHARED)}); "
                         "a variant of your own is FILE.json:NAME (docs/guide.md, 'When your checkpoint's box format "
                         "is unknown')")
    return known[spec]


_OVERRIDES = "_answer_format_overrides"  # instance attributes apply() set, undone by the next apply()


def apply(adapter: Any, fmt: AnswerFormat) -> Any:
    """A shallow copy of ``adapter`` answering in ``fmt``: its ``grounding_prompt``, ``parse_box``,
    ``format_box`` and ``box_convention`` are the variant's where the variant sets them, the family's own
    otherwise; ``answer_format`` says which. ``adapter`` itself is not changed."""
    out = copy.copy(adapter)
    for key in out.__dict__.pop(_OVERRIDES, ()):
        out.__dict__.pop(key, None)
    set_: dict[str, Any] = {"answer_format": fmt}
    if fmt.prompt is not None:
        template = fmt.prompt
        set_["grounding_prompt"] = lambda expression: template.format(expression=expression)
    if fmt.box is not None:
        w = box_writing(fmt.box)
        set_.update(parse_box=w.read, format_box=w.write, box_convention=w.about)
    if fmt.bos is not None:
        set_["bos"] = fmt.bos
    out.__dict__.update(set_, **{_OVERRIDES: tuple(set_)})
    return out


def in_use(adapter: Any) -> AnswerFormat:
    """The variant ``adapter`` answers in (:data:`NATIVE` for an adapter no variant was applied to)."""
    return getattr(adapter, "answer_format", None) or NATIVE


def prompt_template(adapter: Any) -> str | None:
    """The grounding prompt ``adapter`` writes, with its ``{expression}`` slot (None: a family without one)."""
    try:
        return adapter.grounding_prompt(SLOT)
    except NotImplementedError:
        return None


def record(adapter: Any) -> dict[str, Any]:
    """What ``config.json`` records of the variant in use: its name, the prompt template in effect and the box
    writing (``native``: the family's own parse_box / format_box)."""
    fmt = in_use(adapter)
    out = {"name": fmt.name, "prompt": prompt_template(adapter), "box": fmt.box or "native"}
    bos = getattr(adapter, "bos", "one")  # recorded where it is not the one BOS every family had before (Magma)
    return {**out, "bos": bos} if bos != "one" else out
