"""lab/benchmarks/organism_step.py --tiny runs end to end and prints its JSON last (timings are never asserted)."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "lab" / "benchmarks" / "organism_step.py"


def test_tiny_run_prints_rates_and_build_hours_as_json_last(capsys):
    spec = importlib.util.spec_from_file_location("vrh_benchmark_organism_step", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    returned = bench.main(["--tiny", "--steps", "1", "--rounds", "1"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result == returned
    assert set(result) == {"text", "image", "c1r_build_hours_1_thread", "c1r_build_hours_2_threads"}
    for kind in ("text", "image"):
        assert set(result[kind]) == {"s_per_step_1_thread", "s_per_step_2_threads", "speedup_2_vs_1"}
        assert all(v > 0 for v in result[kind].values())
