"""benchmarks/sweep.py --quick runs end to end (shared and today's records compared inside) and its last line is
the JSON object issue 36 asks for. Only the shape is checked: timings are never asserted in tests."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sweep.py"


def test_quick_run_prints_the_ratios_as_json_last(capsys, monkeypatch):
    monkeypatch.setenv("VRH_NO_PROGRESS", "1")
    spec = importlib.util.spec_from_file_location("vrh_benchmark_sweep", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    returned = bench.main(["--quick"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result == returned
    assert set(result) == {"organism", "vlm", "vlm_vrh_only", "setup"}
    for name in ("organism", "vlm", "vlm_vrh_only"):
        r = result[name]
        assert r["time_ratio"] > 0 and 0 < r["rows_started_above_layer0"] < 1
        assert set(r) == {"time_ratio", "cpu_time_ratio", "today_s", "shared_s", "mem_ratio", "today_mib",
                          "shared_mib", "rows_started_above_layer0"}
    assert bench.parse_args(["--device", "cuda", "--dtype", "bfloat16", "--size", "7b"]).size == "7b"
