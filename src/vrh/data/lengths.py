"""Lengths written in text, as SpatialRGPT-Bench states its sizes and a model answers them: the first number with a
unit of length, in meters. The data layer reads gold sizes with it (:mod:`vrh.data.sources.spatialrgpt`), and the
``length`` answer rule reads predictions with it (:mod:`vrh.tasks.answer_rules`)."""

from __future__ import annotations

import re

# Units of length -> meters (SpatialRGPT's factors for inch, foot and cm; mm and km by definition). Bare
# "in" is not a unit here ("2 in height"), and neither is a lone "'" or '"'.
METERS_PER_UNIT = {"m": 1.0, "cm": 0.01, "mm": 0.001, "km": 1000.0, "in": 0.0254, "ft": 0.3048}
_UNIT_WORDS = {"m": "meters?|metres?|m", "cm": "centimeters?|centimetres?|cm", "mm": "millimeters?|millimetres?|mm",
               "km": "kilometers?|kilometres?|km", "in": "inch(?:es)?", "ft": "feet|foot|ft"}
_LENGTH_RE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)\s*+(?:(" + ")|(".join(_UNIT_WORDS.values()) + r"))\b",
                        re.IGNORECASE)
_INCHES_AFTER_FEET_RE = re.compile(r"\s*+(?:and\s++|,\s*+)?(\d+(?:\.\d+)?)\s*+(?:inch(?:es)?)\b", re.IGNORECASE)


def parse_length(text: str) -> float | None:
    """The first length with a unit in ``text``, in meters (feet followed by inches add up), or ``None``.

    >>> parse_length("Region [0] is 30.05 inches in height."), parse_length("It is 1.2 m wide (3.9 feet).")
    (0.76327, 1.2)
    >>> parse_length("5 feet 6 inches"), parse_length("about 80 cm"), parse_length("2 in height"), parse_length("3")
    (1.6764, 0.8, None, None)
    """
    m = _LENGTH_RE.search(text)
    if m is None:
        return None
    unit = list(_UNIT_WORDS)[next(i for i, g in enumerate(m.groups()[1:]) if g is not None)]
    meters = float(m.group(1)) * METERS_PER_UNIT[unit]
    if unit == "ft" and (inches := _INCHES_AFTER_FEET_RE.match(text, m.end())):
        meters += float(inches.group(1)) * METERS_PER_UNIT["in"]
    return round(meters, 9)  # 9 decimals: a nanometre, past any size asked, and no float noise in records
