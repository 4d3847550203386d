"""Images of converted benchmarks: decoded once, checked, written under ``DIR/images``; GT boxes checked
against them.

Benchmarks ship images as encoded bytes inside parquet rows (``{"bytes", "path"}`` structs) or as files
in a folder. Every image is fully decoded before it is written, because a truncated JPEG opens fine and
fails only when its pixels are read -- mid-run, hours later. The original bytes are written unchanged
(no re-encoding, so pixels are exactly the benchmark's), named after the benchmark's file name when it has
one (``COCO_train2014_000000581857.jpg``): many RefCOCO rows share one COCO image, and a shared name
with identical bytes is written once.
"""

from __future__ import annotations

import hashlib
import io
import re
from pathlib import Path
from typing import Any

from vrh.data.jsonl import BOUNDS_TOLERANCE
from vrh.data.sources.registry import SkipRow
from vrh.runs import safe_paths

_EXTENSIONS = {"JPEG": ".jpg", "PNG": ".png", "GIF": ".gif", "BMP": ".bmp", "WEBP": ".webp", "TIFF": ".tif"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def decode(data: bytes) -> tuple[str, tuple[int, int]]:
    """(PIL format, (width, height)) of encoded image bytes, after decoding every pixel; SkipRow if the
    bytes are not a readable image."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()  # forces a full decode: truncated or corrupt data fails here, not mid-run
            return str(im.format), (int(im.width), int(im.height))
    except Exception as e:  # noqa: BLE001 - PIL raises many types for unreadable data
        raise SkipRow(f"unreadable image ({type(e).__name__}: {e})") from None


def image_bytes(value: Any) -> tuple[bytes, str | None]:
    """(bytes, original path or None) of a parquet image cell (``{"bytes": ..., "path": ...}`` struct,
    or raw bytes); SkipRow if there are no bytes."""
    if isinstance(value, dict):
        data, path = value.get("bytes"), value.get("path")
    else:
        data, path = value, None
    if not isinstance(data, (bytes, bytearray)) or not data:
        raise SkipRow("missing image bytes")
    return bytes(data), path if isinstance(path, str) and path else None


class ImageStore:
    """Writes a conversion's images into one folder, each name at most once.

    ``put`` returns the written path and the image's (width, height). The same name with the same bytes
    is written (and decoded) once; the same name with different bytes gets the content hash appended, so
    two different images never share a file.
    """

    def __init__(self, folder: Path, recorder: Any = None):
        self.folder = Path(folder)
        self.recorder = recorder  # a vrh.runs.written.Recorder: each image recorded as vrh's before it is written
        self._names: dict[str, str] = {}  # file name -> sha1 of its bytes
        self._seen: dict[tuple[str | None, str], tuple[Path, tuple[int, int]]] = {}  # (hint, sha1) -> result

    @property
    def n_written(self) -> int:
        return len(self._names)

    def put(self, data: bytes, name_hint: str | None = None) -> tuple[Path, tuple[int, int]]:
        digest = hashlib.sha1(data).hexdigest()
        if (name_hint, digest) in self._seen:
            return self._seen[name_hint, digest]
        fmt, size = decode(data)
        ext = _EXTENSIONS.get(fmt, ".img")
        stem = (_UNSAFE.sub("_", Path(name_hint).stem).strip("._") if name_hint else "") or digest[:16]
        name = f"{stem}{ext}"
        if self._names.get(name, digest) != digest:
            name = f"{stem}-{digest[:12]}{ext}"
        if name not in self._names:
            if self.recorder is not None:
                self.recorder.add(self.folder / name)
            # below the recorder's folder (the --out vrh was given), no name a link: a new file (vrh.runs.safe_paths)
            root = self.recorder.folder if self.recorder is not None else self.folder
            if self.recorder is None:  # a store of its own (no --out above it): its folder is made, as before
                self.folder.mkdir(parents=True, exist_ok=True)
            with safe_paths.open_write(root, self.folder / name, "wb", fresh=True, mkdir=True) as f:
                f.write(data)
            self._names[name] = digest
        self._seen[name_hint, digest] = (self.folder / name, size)
        return self.folder / name, size

    def put_file(self, path: Path) -> tuple[Path, tuple[int, int]]:
        """Copy a local image file into the store (checked like bytes); SkipRow if it cannot be read."""
        return self.put(self.read(path), Path(path).name)

    @staticmethod
    def read(path: Path) -> bytes:
        """A local image file's bytes (not yet checked); SkipRow if the file cannot be read."""
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise SkipRow(f"cannot read image file {path}: {e.strerror}") from None


def check_box(box: tuple[float, float, float, float], size: tuple[int, int]) -> tuple[float, float, float, float]:
    """The xyxy pixel box, clipped onto the image, or SkipRow: non-positive area, or more than the
    loader's ``BOUNDS_TOLERANCE`` outside the image (the same rule :func:`vrh.data.load_dataset` applies,
    so a converted file always loads).

    >>> check_box((-0.5, 0, 10, 640.4), (480, 640))
    (0.0, 0.0, 10.0, 640.0)
    >>> check_box((0, 0, 500, 10), (480, 640))
    Traceback (most recent call last):
    ...
    vrh.data.sources.registry.SkipRow: box [0.0, 0.0, 500.0, 10.0] (xyxy px) lies outside the 480x640 image
    """
    x1, y1, x2, y2 = (float(v) for v in box)
    if not x2 > x1 or not y2 > y1:  # `not >` also catches NaN
        raise SkipRow(f"box {[x1, y1, x2, y2]} (xyxy px) has non-positive width or height")
    W, H = size
    tol = BOUNDS_TOLERANCE
    if x1 < -tol or y1 < -tol or x2 > W + tol or y2 > H + tol:
        raise SkipRow(f"box {[x1, y1, x2, y2]} (xyxy px) lies outside the {W}x{H} image")
    return max(x1, 0.0), max(y1, 0.0), min(x2, float(W)), min(y2, float(H))


def xywh_box(value: Any) -> tuple[float, float, float, float]:
    """A ``[x, y, w, h]`` cell as an xyxy box; SkipRow unless it is 4 finite numbers with w, h > 0."""
    import math

    if (not isinstance(value, (list, tuple)) or len(value) != 4
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)):
        raise SkipRow(f"bbox must be 4 finite numbers [x, y, w, h], got {value!r}")
    x, y, w, h = (float(v) for v in value)
    if w <= 0 or h <= 0:
        raise SkipRow(f"bbox {list(value)} (xywh) has non-positive width or height")
    return x, y, x + w, y + h


def mask_box(data: bytes) -> tuple[tuple[float, float, float, float], tuple[int, int]]:
    """(xyxy box, mask size) of the mask image's non-zero pixels. Pixel ``i`` spans ``[i, i + 1)``, so a
    one-pixel mask at (3, 5) is the box (3, 5, 4, 6). SkipRow if the mask is unreadable or empty."""
    import numpy as np
    from PIL import Image

    decode(data)
    with Image.open(io.BytesIO(data)) as im:
        m = np.asarray(im.convert("L")) > 0  # (H, W)
    ys, xs = np.nonzero(m)
    if xs.size == 0:
        raise SkipRow("mask is empty (no non-zero pixel)")
    return (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)), (m.shape[1], m.shape[0])


REGION_COLOURS = ("red", "blue", "green", "orange", "magenta", "cyan")  # region k is drawn in colour k


def draw_regions(data: bytes, boxes: list[tuple[float, float, float, float] | None]) -> bytes:
    """The image with box ``k`` outlined in ``REGION_COLOURS[k]`` (about 1% of the short side thick, at least
    2 px; a ``None`` box is not drawn), as PNG bytes. Why drawn: a question about "the mug in the red box"
    or "Region [0]" must show the model which object it means, and a VLM family's box coordinates are not a
    shared language (lmms-eval draws RefCOCO regions the same way for its region-captioning tasks)."""
    from PIL import Image, ImageDraw

    if len(boxes) > len(REGION_COLOURS):
        raise SkipRow(f"{len(boxes)} regions, but only {len(REGION_COLOURS)} colours to draw them apart")
    with Image.open(io.BytesIO(data)) as im:
        canvas = im.convert("RGB")
    width = max(2, min(canvas.size) // 100)
    draw = ImageDraw.Draw(canvas)
    for box, colour in zip(boxes, REGION_COLOURS):
        if box is not None:
            draw.rectangle([float(v) for v in box], outline=colour, width=width)
    buf = io.BytesIO()
    canvas.save(buf, format="PNG")
    return buf.getvalue()
