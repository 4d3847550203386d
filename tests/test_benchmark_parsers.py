"""benchmarks/parsers.py --quick runs every hostile case at 1x and 8x and ends with the JSON of its figures. Only
the shape is checked: timings are never asserted in tests (tests/support/regex_work.py counts steps instead)."""

import importlib.util
import json
from pathlib import Path

from tests.support.adversarial_text import ANSWER_CASES, BOX_CASES

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "parsers.py"


def test_quick_run_prints_every_case_as_json_last(capsys):
    spec = importlib.util.spec_from_file_location("vrh_benchmark_parsers", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    returned = bench.main(["--quick"])
    out = capsys.readouterr().out
    assert json.loads(out.strip().splitlines()[-1]) == returned
    assert set(returned["box"]) == set(BOX_CASES) and set(returned["answer"]) == set(ANSWER_CASES)
    for row in [*returned["box"].values(), *returned["answer"].values()]:
        assert len(row["chars"]) == len(row["ms"]) == 2 and len(row["ratios"]) == 1
        assert 7 * row["chars"][0] <= row["chars"][1] <= 9 * row["chars"][0]
    assert "| many brackets | 10000 |" in out
