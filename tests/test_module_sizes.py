"""No library module over 500 lines (the project's style: modules stay under ~500 lines; issue 47 item 3 split the last
ones): a module that grows past it is split by concern, not allowed to become a god file."""

from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "vrh"
MAX_LINES = 500


def test_no_library_module_is_over_500_lines():
    sizes = {p.relative_to(SRC).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in SRC.rglob("*.py")}
    over = sorted(f"{name} ({n} lines)" for name, n in sizes.items() if n > MAX_LINES)
    assert len(sizes) > 100 and not over, f"modules over {MAX_LINES} lines (split them by concern): {over}"
