"""benchmarks/capture.py --quick runs end to end and its last line is the JSON object issue 16 asks for.

Only the shape is checked: timings are never asserted in tests (the full run is the measurement)."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "capture.py"


def test_quick_run_prints_the_ratios_as_json_last(capsys, monkeypatch):
    monkeypatch.setenv("VRH_NO_PROGRESS", "1")
    spec = importlib.util.spec_from_file_location("vrh_benchmark_capture", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    returned = bench.main(["--quick"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(last)
    assert result == returned
    assert set(result) == {"by_visual_tokens", "masked_generate_vs_unmasked", "conditions_batched_vs_sequential",
                           "detect_vs_generate"}
    assert set(result["by_visual_tokens"]) == {"64", "256"}
    for per_n in result["by_visual_tokens"].values():
        assert set(per_n) == {"time_vs_forward", "mem_vs_forward", "eager_mem_vs_vrh"}
        assert per_n["time_vs_forward"] > 0
        assert all(per_n[k] is None or per_n[k] > 0 for k in ("mem_vs_forward", "eager_mem_vs_vrh"))
    assert result["masked_generate_vs_unmasked"] > 0 and result["conditions_batched_vs_sequential"] > 0
