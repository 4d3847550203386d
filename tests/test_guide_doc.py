"""docs/guide.md's detection pattern describes what detection does by default (issue 37 item 3): it said
"re-run teacher-forced" (the two-pass method) while one pass, during the answering generate, is the default."""

import dataclasses
import re
from pathlib import Path

from vrh.core import generation_capture
from vrh.options import DetectOptions

GUIDE = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()


def _detection_section() -> str:
    return re.search(r"^## Detection .*?(?=^## )", GUIDE, flags=re.S | re.M).group(0)


def test_the_detection_pattern_is_the_default_one_pass_and_names_the_two_pass_flag():
    one_pass = next(f for f in dataclasses.fields(DetectOptions) if f.name == "one_pass")
    section = _detection_section()
    pattern = next(p for p in section.split("\n\n") if p.startswith("Pattern"))
    assert one_pass.default is True
    assert pattern.startswith("Pattern (the default, one pass)") and "re-run" not in pattern
    assert "generate_with_rows" in pattern and hasattr(generation_capture, "generate_with_rows")
    assert f"`{one_pass.metadata['vrh_option']['negate']}`" in section  # the option for the paper's two passes


def test_the_conventions_name_every_answer_type():
    """The guide's "one place" for conventions named three of the six answer types (issue 46 item 17)."""
    from vrh.data import ANSWER_TYPES

    text = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text(encoding="utf-8")
    conventions = text.split("## Conventions", 1)[1].split("\n## ", 1)[0]
    assert [t for t in ANSWER_TYPES if f"`{t}`" not in conventions] == []
    assert "`box_format`" in conventions or '"box_format"' in conventions
