"""The registry: spec grammar, canonical names, errors, registration, and that it stays an import leaf."""

import ast
from pathlib import Path

import pytest
import torch

import vrh
from vrh.scoring import (AccumulatingScorer, SampleInfo, compare_baselines, describe_scorers, make_scorer,
                         register_scorer, scorer_names)
from vrh.scoring import registry
from vrh.scoring.registry import Option, parse_spec
from vrh.scoring.base import VARIANT_NAMES, VariantScorer

SRC = Path(vrh.__file__).parent
# the registered methods with one name each (a pattern method's grammar, QUERY/PHI/OMEGA, is no scorer name)
PRIOR_METHODS = tuple(m for m in describe_scorers() if m in scorer_names())


def _registers_a_scorer(path: Path) -> bool:
    return any(isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_scorer"
               for node in ast.walk(ast.parse(path.read_text())))


def test_registry_has_every_method_of_every_file():
    """Every file of vrh/scoring that registers a method is found (no import line names it), and every
    name the registry lists builds under its own name."""
    import sys

    scorer_names()
    files = [p.stem for p in (SRC / "scoring").glob("*.py") if _registers_a_scorer(p) and p.stem != "registry"]
    assert files and all(f"vrh.scoring.{stem}" in sys.modules for stem in files)
    assert set(VARIANT_NAMES) <= set(scorer_names()) and PRIOR_METHODS
    assert list(describe_scorers()) == sorted(describe_scorers())  # sorted, whatever the import order
    for name in scorer_names():
        assert make_scorer(name).name == name  # every listed name builds, under its own name


def test_compare_baselines_are_registered_prior_methods_in_their_order():
    baselines = compare_baselines()
    assert baselines and len(set(baselines)) == len(baselines) and set(baselines) <= set(PRIOR_METHODS)
    orders = [registry._METHODS[name].compare_order for name in baselines]
    assert orders == sorted(orders)


def test_describe_lists_options_with_defaults_and_help():
    desc = describe_scorers()
    assert desc["qrhead"]["options"]["calibrate"]["default"] is True
    assert desc["qrhead"]["options"]["outlier_z"]["type"] == "float"
    assert desc["ocr_heads"]["options"]["weight"]["choices"] == ["lcs", "correct", "iou"]
    assert desc["QUERY/PHI/OMEGA"]["options"]["m"]["default"] == 20
    assert desc["QUERY/PHI/OMEGA"]["options"]["zeros"]["default"] == "exclude"
    assert set(desc["retrieval_heads"]["options"]) == {"norm"}
    assert all(d["help"] and all(o["help"] for o in d["options"].values()) for d in desc.values())


@pytest.mark.parametrize("spec, name", [
    ("qrhead", "qrhead"),
    ("qrhead:calibrate=false", "qrhead:calibrate=false"),
    (" QRHead : Calibrate = No ", "qrhead:calibrate=false"),
    ("qrhead:calibrate=true", "qrhead"),  # the default is not spelled out
    ("qrhead:outlier_z=3:calibrate=0", "qrhead:calibrate=false:outlier_z=3.0"),  # sorted by key
    ("out/sum/freq:m=10", "out/sum/freq:m=10"),
    ("OUT/sum/avg:m=20", "out/sum/mean"),
    ("rand1/sum/mean:seed=4", "rand1/sum/mean:seed=4"),
    ("ocr_heads:weight=IOU", "ocr_heads:weight=iou"),
])
def test_canonical_names(spec, name):
    sc = make_scorer(spec)
    assert sc.name == name
    assert make_scorer(sc.name).name == name  # the name is itself a spec for the same scorer


def test_spec_options_reach_the_scorer():
    sc = make_scorer("qrhead:calibrate=false:outlier_z=1.5")
    assert (sc.calibrate, sc.outlier_z, sc.extra_passes) == (False, 1.5, ())
    assert make_scorer("qrhead").extra_passes == ("null_query",)
    freq = make_scorer("out/sum/freq:m=7")
    assert isinstance(freq, VariantScorer) and (freq.m, freq.omega) == (7, "freq")
    assert make_scorer("vera:query=out").query == "out"
    assert make_scorer("localization_heads:min_layer=0").min_layer == 0


def test_options_record_every_value_in_effect():
    sc = make_scorer("ocr_heads:keys=visual", seed=3)
    assert sc.options == {"keys": "visual", "row": "own", "tokens": "first", "answer": "gold", "weight": "lcs",
                          "pool": "entries"}
    assert make_scorer("out/argmax/freq:m=5", seed=3).options == {"m": 5, "seed": 3, "zeros": "exclude"}
    for name in PRIOR_METHODS:  # a bare prior-method name is its reference variant: every default in effect
        sc = make_scorer(name)
        assert sc.options == {k: o["default"] for k, o in describe_scorers()[name]["options"].items()}


def test_two_specs_of_one_method_get_different_names():
    names = {make_scorer(s).name for s in ("qrhead", "qrhead:calibrate=false", "qrhead:outlier_z=1")}
    assert len(names) == 3


def test_keyword_defaults_apply_where_declared_and_spec_wins():
    assert make_scorer("rand1/sum/mean", seed=3).seed == 3
    assert make_scorer("rand1/sum/mean", seed=3).name == "rand1/sum/mean"  # a run-wide default is no option
    sc = make_scorer("rand1/sum/mean:seed=0", seed=3)
    assert sc.seed == 0 and sc.name == "rand1/sum/mean:seed=0"  # differs from the default in effect
    assert make_scorer(sc.name, seed=3).seed == 0
    assert not hasattr(make_scorer("qrhead", seed=3), "variant")  # seed: declared elsewhere, unused here
    assert make_scorer("localization_heads", m=1).m == 1
    with pytest.raises(ValueError, match="sed"):
        make_scorer("qrhead", sed=3)
    with pytest.raises(ValueError, match="'m' must be int"):
        make_scorer("out/sum/freq", m=2.5)


@pytest.mark.parametrize("spec, msg", [
    ("nonsense", r"unknown scorer 'nonsense'; registered: QUERY/PHI/OMEGA, .*qrhead"),
    ("", "expected NAME"),
    (":m=3", "expected NAME"),
    ("qrhead:calibrate", "expected KEY=VALUE"),
    ("qrhead:=1", "expected KEY=VALUE"),
    ("qrhead:m=3", r"unknown option 'm' for scorer 'qrhead'; its options: calibrate \(default true\), "
                   r"outlier_z \(default 2.0\), outliers \(default keys\)"),
    ("retrieval_heads:x=1", r"its options: norm \(default keys\)"),
    ("out/argmax/freq:zeros=some", "option 'zeros' must be one of exclude, include"),
    ("qrhead:calibrate=maybe", r"bad value 'maybe' for option 'calibrate': expected bool \(true/false\)"),
    ("qrhead:outlier_z=big", "bad value 'big' for option 'outlier_z': expected float"),
    ("out/sum/freq:m=2.5", "bad value '2.5' for option 'm': expected int"),
    ("ocr_heads:weight=area", "option 'weight' must be one of lcs, correct, iou, got 'area'"),
    ("qrhead:calibrate=true:calibrate=false", "given twice"),
    ("out/sum", "QUERY/PHI/OMEGA"),
    ("outs/sum/mean", "unknown query set"),
])
def test_spec_errors_name_what_exists(spec, msg):
    with pytest.raises(ValueError, match=msg):
        make_scorer(spec)


def test_parse_spec_returns_method_base_and_typed_options():
    method, base, opts = parse_spec("qrhead:outlier_z=1:calibrate=off")
    assert (method.name, base, opts) == ("qrhead", "qrhead", {"outlier_z": 1.0, "calibrate": False})
    assert isinstance(opts["outlier_z"], float)


def test_a_registered_custom_scorer_is_reachable(monkeypatch):
    scorer_names()  # every method file imported before the copy (one imported later would fill the copy alone)
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))  # undone after the test

    @register_scorer("peak_mass", help="largest single-key attention", options=(Option("scale", float, 1.0, "x"),))
    class PeakMass(AccumulatingScorer):
        def __init__(self, *, scale=1.0, **kw):
            super().__init__(**kw)
            self.scale = scale

        def update(self, rows, info, extra=None):
            self._add(rows.amax(dim=(2, 3)) * self.scale)  # (L, H, Q, S) -> (L, H)

    assert "peak_mass" in scorer_names() and describe_scorers()["peak_mass"]["options"]["scale"]["default"] == 1.0
    sc = make_scorer("Peak_Mass:scale=2", seed=0)
    assert isinstance(sc, PeakMass) and sc.name == "peak_mass:scale=2.0" and sc.extra_passes == ()
    rows = torch.zeros(1, 2, 1, 3)  # (L, H, Q, S)
    rows[0, 1, 0, 2] = 0.5
    sc.update(rows, SampleInfo([2], [1, 2]))
    assert sc.result().tolist() == [[0.0, 1.0]]
    with pytest.raises(ValueError, match="already registered"):
        register_scorer("peak_mass")(PeakMass)


def test_bad_registrations_are_refused():
    with pytest.raises(ValueError, match="without ':'"):
        register_scorer("a:b")
    with pytest.raises(ValueError, match="twice"):
        register_scorer("dup", options=(Option("k", int, 1, ""), Option("k", int, 2, "")))
    with pytest.raises(ValueError, match="'k' must be int"):
        Option("k", int, "1", "")
    with pytest.raises(TypeError, match="type"):
        Option("k", list, [], "")


def _vrh_imports(path: Path) -> set[str]:
    """Every vrh module ``path`` imports, at any depth (inside functions too); relative imports kept as '.'."""
    mods = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            mods |= {a.name for a in node.names if a.name.split(".")[0] == "vrh"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                mods.add("." * node.level + (node.module or ""))
            elif node.module and node.module.split(".")[0] == "vrh":
                mods |= {f"{node.module}.{a.name}" if (SRC / node.module.replace("vrh.", "", 1).replace(".", "/")
                                                       / f"{a.name}.py").exists() else node.module
                         for a in node.names}
    return mods


def test_registry_is_a_leaf():
    """It imports no method (they import it), only the discovery that imports them on lookup."""
    assert _vrh_imports(SRC / "scoring" / "registry.py") == {"vrh.infra.discovery"}


def test_scoring_modules_have_no_import_cycle():
    """vrh.scoring.functions is pure (nothing else of vrh.scoring), the scorer base builds on it alone; each
    registrant imports only the registry, the base and the functions; the package itself only the registry."""
    assert not {m for m in _vrh_imports(SRC / "scoring" / "functions.py") if m.startswith("vrh.scoring")}
    assert _vrh_imports(SRC / "scoring" / "base.py") == {"vrh.scoring.functions"}
    registrants = [p for p in (SRC / "scoring").glob("*.py") if _registers_a_scorer(p) and p.stem != "registry"]
    assert registrants
    for path in registrants:
        assert _vrh_imports(path) <= {"vrh.scoring.registry", "vrh.scoring.base", "vrh.scoring.functions"}, path.name
    assert _vrh_imports(SRC / "scoring" / "__init__.py") == {"vrh.scoring.registry"}


def test_importing_the_package_imports_no_method_and_no_torch():
    """The report reads vrh.scoring.sparsity: the package must come without its scorers (and torch); the
    first registry lookup brings them."""
    import subprocess
    import sys

    code = ("import sys, vrh.scoring, vrh.scoring.sparsity; print('torch' in sys.modules, "
            "'vrh.scoring.qrhead' in sys.modules); vrh.scoring.scorer_names(); print('vrh.scoring.qrhead' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "True"]
