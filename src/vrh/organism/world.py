"""A deterministic synthetic referring-expression world: scenes of coloured shapes, drawn with PIL.

Every sample is a pure function of ``(seed, index)``, so training streams are infinite and resumable
without saving any data-loader state, and held-out sets are fixed by their seed.

Grounding expressions are built from a structured *spec* and checked against an independent resolver
(:func:`resolve`) so that every expression refers to exactly one object of its scene.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

IMAGE_SIZE = 112
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 200, 30),
    "purple": (140, 60, 180),
    "orange": (240, 130, 20),
}
SHAPES = ("circle", "square", "triangle", "diamond")
PLURALS = {s: s + "s" for s in SHAPES}
SIZES: dict[str, int] = {"small": 14, "medium": 22, "large": 30}  # nominal side in px (+-2 jitter)
RELATIONS = ("left of", "right of", "above", "below")
RELATION_MARGIN = 4  # px: centres must differ by more than this for a relation to hold


@dataclass(frozen=True)
class Obj:
    colour: str
    shape: str
    size: str
    box: tuple[int, int, int, int]  # xyxy, pixels, exclusive right/bottom edge

    @property
    def cx(self) -> float:
        return (self.box[0] + self.box[2]) / 2

    @property
    def cy(self) -> float:
        return (self.box[1] + self.box[3]) / 2

    @property
    def area(self) -> int:
        return (self.box[2] - self.box[0]) * (self.box[3] - self.box[1])


@dataclass(frozen=True)
class Scene:
    objects: tuple[Obj, ...]
    texture_seed: int
    size: int = IMAGE_SIZE


def seeded_rng(seed: int, index: int, salt: str = "") -> random.Random:
    """The random stream of sample ``index`` of stream ``seed`` (``salt`` names the stream's use: "grounding",
    "vqa", ...; the lab's training mixture draws its own from it)."""
    # sha256 rather than hash(): Python's str hash is salted per process, which would break determinism
    digest = hashlib.sha256(f"{seed}:{index}:{salt}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def sample_scene(rng: random.Random, min_objects: int = 2, max_objects: int = 5,
                 size: int = IMAGE_SIZE) -> Scene:
    """2-5 non-overlapping objects (2 px gap) placed uniformly at random."""
    n = rng.randint(min_objects, max_objects)
    objs: list[Obj] = []
    attempts = 0
    while len(objs) < n and attempts < 200:
        attempts += 1
        sz = rng.choice(list(SIZES))
        box = _free_box(rng, sz, objs, size)
        if box is None:
            continue
        objs.append(Obj(rng.choice(list(COLOURS)), rng.choice(SHAPES), sz, box))
    return Scene(tuple(objs), texture_seed=rng.getrandbits(32), size=size)


def _free_box(rng: random.Random, sz: str, objs: list[Obj], size: int) -> tuple[int, int, int, int] | None:
    """One random placement of an object of size class ``sz`` (+-2 px jitter); None if it would come
    within 2 px of a placed object."""
    side = SIZES[sz] + rng.randint(-2, 2)
    x1, y1 = rng.randint(1, size - side - 1), rng.randint(1, size - side - 1)
    box = (x1, y1, x1 + side, y1 + side)
    return None if any(_overlap(box, o.box, gap=2) for o in objs) else box


def contrast_scene(rng: random.Random, min_objects: int = 2, max_objects: int = 5,
                   size: int = IMAGE_SIZE) -> tuple[Scene, int]:
    """A referent and 1-4 distractors that each copy it but for one or two of colour / shape / size
    (redrawn to another value), placed as :func:`sample_scene` places objects; returns (scene, referent).

    Every distractor differs from the referent somewhere, so its full description is unique, and the
    shortest unique description usually needs the attribute the distractors share least: e.g. "the red
    object" among squares of other colours and red shapes of other kinds. Organism C's hard world
    (recipe C5): the full world lets many expressions be resolved by shape alone (docs/organism.md).
    """
    n = rng.randint(min_objects, max_objects)
    ref = (rng.choice(list(COLOURS)), rng.choice(SHAPES), rng.choice(list(SIZES)))
    values = (list(COLOURS), list(SHAPES), list(SIZES))
    attrs = [ref]
    for _ in range(n - 1):
        # which of (colour, shape, size) to redraw: one (size less often: the full world's attribute
        # expressions rarely need it), a second one in a third of the distractors
        changed = set(rng.choices(range(3), weights=(3, 3, 1)))
        if rng.random() < 1 / 3:
            changed.add(rng.choice([j for j in range(3) if j not in changed]))
        attrs.append(tuple(rng.choice([v for v in values[j] if v != ref[j]]) if j in changed else ref[j]
                           for j in range(3)))
    order = list(range(n))
    rng.shuffle(order)  # the referent's place in the object list is random
    objs: list[Obj] = []
    where: dict[int, int] = {}  # attrs index -> object index
    attempts = 0
    for k in order:
        while attempts < 400:
            attempts += 1
            colour, shape, sz = attrs[k]
            box = _free_box(rng, sz, objs, size)
            if box is not None:
                where[k] = len(objs)
                objs.append(Obj(colour, shape, sz, box))
                break
    if 0 not in where or len(objs) < min_objects:  # no room left: a fresh scene, one object fewer
        return contrast_scene(rng, min_objects, max(min_objects, n - 1), size)
    return Scene(tuple(objs), texture_seed=rng.getrandbits(32), size=size), where[0]


def _overlap(a, b, gap: int) -> bool:
    return not (a[2] + gap <= b[0] or b[2] + gap <= a[0] or a[3] + gap <= b[1] or b[3] + gap <= a[1])


# --- rendering ---------------------------------------------------------------------------------

def render(scene: Scene) -> Image.Image:
    """Light noisy background with a few faint clutter lines, then the objects."""
    r = np.random.default_rng(scene.texture_seed)
    base = r.integers(225, 250)
    noise = r.normal(0, 6, (scene.size, scene.size, 1))  # grey texture, shared across channels
    arr = np.clip(base + noise, 0, 255).astype(np.uint8).repeat(3, axis=2)  # [H, W, 3]
    img = Image.fromarray(arr, "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(int(r.integers(0, 4))):
        pts = [tuple(int(v) for v in r.integers(0, scene.size, 2)) for _ in range(2)]
        draw.line(pts, fill=tuple(int(v) for v in r.integers(170, 210, 3)), width=1)
    for o in scene.objects:
        _draw_object(draw, o)
    return img


def _draw_object(draw: ImageDraw.ImageDraw, o: Obj) -> None:
    x1, y1, x2, y2 = o.box
    x2, y2 = x2 - 1, y2 - 1  # PIL boxes are inclusive
    fill = COLOURS[o.colour]
    if o.shape == "circle":
        draw.ellipse((x1, y1, x2, y2), fill=fill)
    elif o.shape == "square":
        draw.rectangle((x1, y1, x2, y2), fill=fill)
    elif o.shape == "triangle":
        draw.polygon([((x1 + x2) / 2, y1), (x2, y2), (x1, y2)], fill=fill)
    else:  # diamond
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        draw.polygon([(cx, y1), (x2, cy), (cx, y2), (x1, cy)], fill=fill)


# --- referring expressions ----------------------------------------------------------------------
# A spec is a dict: {"kind": "attribute", "colour"?, "shape"?, "size"?}
#                   {"kind": "relation", "target": attr-spec, "relation": str, "anchor": attr-spec}
#                   {"kind": "comparison", "extreme": "largest"|"smallest", "colour"?|"shape"?}

def _matches(o: Obj, spec: dict[str, Any]) -> bool:
    return all(spec.get(k) in (None, getattr(o, k)) for k in ("colour", "shape", "size"))


def _relation_holds(o: Obj, anchor: Obj, relation: str) -> bool:
    m = RELATION_MARGIN
    return {"left of": o.cx < anchor.cx - m, "right of": o.cx > anchor.cx + m,
            "above": o.cy < anchor.cy - m, "below": o.cy > anchor.cy + m}[relation]


def resolve(scene: Scene, spec: dict[str, Any]) -> list[int]:
    """Indices of the objects a spec refers to (a valid expression yields exactly one)."""
    objs = scene.objects
    if spec["kind"] == "attribute":
        return [i for i, o in enumerate(objs) if _matches(o, spec)]
    if spec["kind"] == "relation":
        anchors = resolve(scene, spec["anchor"])
        if len(anchors) != 1:
            return []
        a = objs[anchors[0]]
        return [i for i, o in enumerate(objs) if i != anchors[0] and _matches(o, spec["target"])
                and _relation_holds(o, a, spec["relation"])]
    if spec["kind"] == "comparison":
        group = [i for i, o in enumerate(objs) if _matches(o, spec)]
        if len(group) < 2:
            return []
        key = (lambda i: objs[i].area) if spec["extreme"] == "largest" else (lambda i: -objs[i].area)
        best = max(group, key=key)
        # a strict size *class* gap, so "largest" is visible to the eye, not a 1-px jitter
        rank = list(SIZES)
        others = [rank.index(objs[i].size) for i in group if i != best]
        mine = rank.index(objs[best].size)
        ok = all(mine > r for r in others) if spec["extreme"] == "largest" else all(mine < r for r in others)
        return [best] if ok else []
    raise ValueError(f"unknown spec kind {spec['kind']!r}")


def spec_text(spec: dict[str, Any]) -> str:
    if spec["kind"] == "attribute":
        words = [spec.get("size"), spec.get("colour"), spec.get("shape") or "object"]
        return "the " + " ".join(w for w in words if w)
    if spec["kind"] == "relation":
        return f"{spec_text(spec['target'])} {spec['relation']} {spec_text(spec['anchor'])}"
    noun = spec.get("shape") or "object"
    return f"the {spec['extreme']} " + " ".join(w for w in (spec.get("colour"), noun) if w)


def _minimal_attribute(scene: Scene, i: int, rng: random.Random) -> dict[str, Any] | None:
    """The shortest unique attribute description of object i (random among equally short ones)."""
    o = scene.objects[i]
    combos = [("shape",), ("colour",), ("colour", "shape"), ("size", "shape"), ("size", "colour"),
              ("size", "colour", "shape")]
    for n_attr in (1, 2, 3):
        cands = [c for c in combos if len(c) == n_attr]
        rng.shuffle(cands)
        for c in cands:
            spec = {"kind": "attribute", **{k: getattr(o, k) for k in c}}
            if resolve(scene, spec) == [i]:
                return spec
    return None


def _attribute_spec(scene, rng):
    i = rng.randrange(len(scene.objects))
    spec = _minimal_attribute(scene, i, rng)
    if spec is not None and rng.random() < 0.5 and "shape" not in spec:
        # sometimes name the shape too, so "the red circle" style phrases are common
        spec2 = {**spec, "shape": scene.objects[i].shape}
        spec = spec2 if resolve(scene, spec2) == [i] else spec
    return spec, i


def _relation_spec(scene, rng):
    n = len(scene.objects)
    t, a = rng.sample(range(n), 2)
    anchor = _minimal_attribute(scene, a, rng)
    if anchor is None:
        return None, -1
    rels = [r for r in RELATIONS if _relation_holds(scene.objects[t], scene.objects[a], r)]
    if not rels:
        return None, -1
    rel = rng.choice(rels)
    o = scene.objects[t]
    for target in ({"kind": "attribute", "shape": o.shape}, {"kind": "attribute", "colour": o.colour},
                   {"kind": "attribute", "colour": o.colour, "shape": o.shape}):
        spec = {"kind": "relation", "target": target, "relation": rel, "anchor": anchor}
        if resolve(scene, spec) == [t]:
            return spec, t
    return None, -1


def _comparison_spec(scene, rng):
    extreme = rng.choice(["largest", "smallest"])
    attr = rng.choice(["colour", "shape", None])
    i = rng.randrange(len(scene.objects))
    spec = {"kind": "comparison", "extreme": extreme}
    if attr:
        spec[attr] = getattr(scene.objects[i], attr)
    got = resolve(scene, spec)
    return (spec, got[0]) if len(got) == 1 else (None, -1)


KIND_WEIGHTS = {"attribute": 0.45, "relation": 0.35, "comparison": 0.20}
_BUILDERS = {"attribute": _attribute_spec, "relation": _relation_spec, "comparison": _comparison_spec}


# curriculum level -> object count range; every level but "full" draws attribute expressions only;
# "contrast": the referent among look-alikes (contrast_scene), its shortest unique attribute description
LEVELS = {"single": (1, 1), "easy": (2, 3), "attribute": (2, 5), "full": (2, 5), "contrast": (2, 5)}


def grounding_sample(seed: int, index: int, size: int = IMAGE_SIZE, level: str = "full") -> dict[str, Any]:
    """Scene + unique expression + GT box for sample ``index`` of stream ``seed``.

    ``level`` (training curriculum): "single" = one object, "easy" = attribute expressions in 2-3 object
    scenes, "contrast" = attribute expressions among look-alikes (:func:`contrast_scene`), "full" = the
    world as described in docs/organism.md (the only level used for evaluation).
    """
    rng = seeded_rng(seed, index, "grounding" if level == "full" else f"grounding-{level}")
    kind = rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0]
    kind = kind if level == "full" else "attribute"
    lo, hi = LEVELS[level]
    while level == "contrast":  # the shortest unique description of the referent; resampled if it has none
        scene, i = contrast_scene(rng, lo, hi, size)
        spec = _minimal_attribute(scene, i, rng)
        if spec is not None and resolve(scene, spec) == [i]:
            return {"scene": scene, "task": "grounding", "kind": kind, "spec": spec,
                    "expression": spec_text(spec), "box": list(scene.objects[i].box), "target": i}
    while True:  # resample the scene until the chosen kind yields a unique expression
        scene = sample_scene(rng, min_objects=lo, max_objects=hi, size=size)
        spec, i = _BUILDERS[kind](scene, rng)
        if spec is not None and resolve(scene, spec) == [i]:
            break
    o = scene.objects[i]
    return {"scene": scene, "task": "grounding", "kind": kind, "spec": spec,
            "expression": spec_text(spec), "box": list(o.box), "target": i}


def vqa_sample(seed: int, index: int, size: int = IMAGE_SIZE) -> dict[str, Any]:
    """Counting, colour and shape questions with one-word answers."""
    rng = seeded_rng(seed, index, "vqa")
    while True:
        scene = sample_scene(rng, size=size)
        q = rng.choice(["count", "colour", "shape"])
        if q == "count":
            shape = rng.choice(SHAPES)
            n = sum(o.shape == shape for o in scene.objects)
            return {"scene": scene, "task": "vqa", "question": f"how many {PLURALS[shape]} are there ?",
                    "answer": str(n)}
        i = rng.randrange(len(scene.objects))
        o = scene.objects[i]
        if q == "colour" and resolve(scene, {"kind": "attribute", "shape": o.shape}) == [i]:
            return {"scene": scene, "task": "vqa", "question": f"what colour is the {o.shape} ?",
                    "answer": o.colour}
        if q == "shape" and resolve(scene, {"kind": "attribute", "colour": o.colour}) == [i]:
            return {"scene": scene, "task": "vqa", "question": f"what shape is the {o.colour} object ?",
                    "answer": o.shape}


def caption_sample(seed: int, index: int, size: int = IMAGE_SIZE, bin_px: int = 4) -> dict[str, Any]:
    """Region captioning, the inverse of grounding: ``what is [ x1 , y1 , x2 , y2 ] ?`` -> ``large red
    circle``. Routing by position is easy for the organism; this job makes it *read* colour and shape
    from the visual tokens (a VQA-form sample, so it uses the VQA prompt)."""
    rng = seeded_rng(seed, index, "caption")
    scene = sample_scene(rng, size=size)
    o = scene.objects[rng.randrange(len(scene.objects))]
    snap = [int(min(size, max(0, round(v / bin_px) * bin_px))) for v in o.box]
    return {"scene": scene, "task": "vqa", "kind": "caption", "question": "what is [ " + " , ".join(map(str, snap)) + " ] ?",
            "answer": f"{o.size} {o.colour} {o.shape}", "box": list(o.box)}


def words() -> list[str]:
    """Every word the world can write in an expression, question or answer (for the vocabulary)."""
    ws = {"the", "object", "how", "many", "are", "there", "what", "colour", "shape", "is", "objects"}
    ws |= set(COLOURS) | set(SHAPES) | set(PLURALS.values()) | set(SIZES) | {"largest", "smallest"}
    ws |= {w for r in RELATIONS for w in r.split()}
    return sorted(ws)


# --- files ----------------------------------------------------------------------------------------

def write_split(out_dir: str | Path, n: int, seed: int, task: str = "grounding",
                size: int = IMAGE_SIZE) -> Path:
    """Write ``n`` samples as PNGs under ``out_dir/images`` plus ``out_dir/<task>.jsonl``, each file recorded
    first as vrh's (:mod:`vrh.runs.written`: a later ``--overwrite`` removes exactly these). ``out_dir`` must be
    empty or a folder this function (or another vrh writer) filled before."""
    from vrh.runs import safe_paths, written

    if task not in ("grounding", "vqa"):
        raise ValueError(f"task must be grounding or vqa, got {task!r}")
    out = Path(out_dir)
    path = out / f"{task}.jsonl"
    sids = [f"{task}-{seed}-{k:06d}" for k in range(n)]
    written.record(out, [path.name, *(f"images/{sid}.png" for sid in sids)])
    safe_paths.mkdirs(out, out / "images")  # no name below out_dir followed if it is a link (vrh.runs.safe_paths)
    with safe_paths.open_write(out, path, "w", fresh=True) as f:
        for k, sid in enumerate(sids):
            s = grounding_sample(seed, k, size) if task == "grounding" else vqa_sample(seed, k, size)
            rel = f"images/{sid}.png"
            with safe_paths.open_write(out, out / rel, "wb", fresh=True) as im:
                render(s["scene"]).save(im, format="PNG")
            rec = {"id": sid, "image": rel, "task": task, "expression": s.get("expression"),
                   "box": s.get("box"), "box_format": "xyxy", "question": s.get("question"),
                   "answer": s.get("answer")}
            if task == "grounding":
                rec["kind"] = s["kind"]  # attribute / relation / comparison (kept in Sample.meta)
            f.write(json.dumps(rec) + "\n")
    return path
