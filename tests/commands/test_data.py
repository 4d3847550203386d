"""``vrh data list | convert | inspect`` in-process, and a converted RefCOCO-layout set run through
``vrh detect`` and ``vrh evaluate`` on the tiny Qwen2.5-VL checkpoint and on the shipped organism."""

import io
import json

import pytest
from PIL import Image, ImageDraw

from vrh import runs
from vrh.cli import main
from vrh.data import load_dataset


def refcoco_row(i, bbox=None, answer=None):
    im = Image.new("RGB", (84, 56), (240, 240, 240))
    x, y = 4 + 5 * i, 8 + i
    ImageDraw.Draw(im).rectangle([x, y, x + 20, y + 16], fill=(200, 30, 30))
    buf = io.BytesIO()
    im.save(buf, format="JPEG")
    return {"question_id": str(1000 + i), "image": {"bytes": buf.getvalue(), "path": None},
            "question": "Please carefully observe the area circled in the image and come up with a caption.",
            "answer": answer or ["the red box", "red square"], "bbox": bbox or [x, y, 20, 16],
            "file_name": f"COCO_val2014_{i:012d}.jpg"}


@pytest.fixture(scope="module")
def refcoco_snapshot(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("RefCOCO")
    rows = [refcoco_row(i) for i in range(12)] + [refcoco_row(20, bbox=[70, 40, 30, 30]),  # outside the image
                                                  refcoco_row(21, answer=[""])]  # empty expression
    (root / "data").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), root / "data" / "val-00000-of-00001.parquet")
    return root


def test_list_names_every_source_with_its_layout(capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("refcoco", "refcoco+", "refcocog", "cvbench", "mmstar", "countbenchqa", "countbench", "spatial457",
                 "toloka", "refspatial", "mathvista", "vaw", "spatialrgpt", "refcoco-refer", "refcoco+-refer",
                 "refcocog-refer"):
        assert f"\n{name}  [" in "\n" + out, name
    assert "data/<split>-*.parquet" in out and "--all-expressions" in out and "--allow-pickle" in out


def test_convert_and_inspect(refcoco_snapshot, tmp_path, capsys):
    out = tmp_path / "rc"
    assert main(["data", "convert", "refcoco", str(refcoco_snapshot), "--out", str(out), "--limit", "5"]) == 0
    printed = capsys.readouterr().out
    assert "refcoco val: 5 rows read -> 5 samples" in printed
    assert len(load_dataset(out / "data.jsonl")) == 5

    assert main(["data", "inspect", str(out / "data.jsonl"), "--out", str(tmp_path / "look"), "--n-render", "3"]) == 0
    printed = capsys.readouterr().out
    assert "5 samples (grounding 5)" in printed and "boxes: 5" in printed
    summary = json.loads((tmp_path / "look" / "inspect.json").read_text())
    assert summary["boxes"]["n"] == 5 and len(summary["rendered"]) == 3
    first = Image.open(tmp_path / "look" / summary["rendered"][0])
    assert first.width >= 84 and first.getpixel((4, 8))[0] == 255  # the GT box's corner is drawn in red


def test_bad_invocations_are_clear_errors(refcoco_snapshot, tmp_path, capsys):
    assert main(["data", "convert", "nope", str(refcoco_snapshot), "--out", str(tmp_path / "o")]) == 2
    assert "unknown data source 'nope'" in capsys.readouterr().err
    assert main(["data", "convert", "refcoco", str(refcoco_snapshot), "--out", str(tmp_path / "o"),
                 "--split", "testB"]) == 2
    assert "splits found: val" in capsys.readouterr().err
    assert main(["data"]) == 2


PLUGIN_SOURCE = """
from vrh.data.jsonl import Sample
from vrh.data.sources.registry import Source, SourceOption, register_source


def read_rows(src, split, options):
    return iter([("0", {"q": "How many?"})])


def convert_row(key, row, ctx):
    raise ValueError(f"shade={ctx.options.get('shade')!r} count={ctx.options.get('count')!r}")


register_source(Source(name="plugin_toy", summary="a plugin's source", layout="anything", task="vqa",
                       splits=("test",), read_rows=read_rows, convert_row=convert_row,
                       options=(SourceOption("shade", "its own choice", choices=("red", "blue")),
                                SourceOption("count", "its own number", type=int))))
"""


@pytest.fixture
def plugin_source(tmp_path, monkeypatch):
    """A source in a file of the user's (VRH_PLUGINS), with two options of its own; the registry's copy is
    private to the test."""
    from vrh.data.sources import registry, source_names

    source_names()
    monkeypatch.setattr(registry, "_SOURCES", dict(registry._SOURCES))
    plugin = tmp_path / "toy_plugin.py"
    plugin.write_text(PLUGIN_SOURCE)
    monkeypatch.setenv("VRH_PLUGINS", str(plugin))
    return plugin


def test_a_sources_own_options_are_flags_with_no_edit_of_the_command(plugin_source, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["data", "convert", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--shade {red,blue}" in help_text and "plugin_toy: its own choice" in help_text
    assert "--count COUNT" in help_text and "vaw: seed of the multiple-choice generator" in help_text
    # the value reaches the source typed; the row's error is its skip reason (the only row: a failed conversion)
    code = main(["data", "convert", "plugin_toy", str(tmp_path), "--out", str(tmp_path / "o"), "--shade", "blue",
                 "--count", "3"])
    assert code == 2 and "shade='blue' count=3" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["data", "convert", "plugin_toy", str(tmp_path), "--out", str(tmp_path / "o"), "--shade", "green"])
    assert "invalid choice: 'green'" in capsys.readouterr().err
    # another source refuses the plugin's option by name
    assert main(["data", "convert", "refcoco", str(tmp_path), "--out", str(tmp_path / "p"), "--shade", "red"]) == 2
    assert "--shade do not apply to source 'refcoco'" in capsys.readouterr().err


def test_sources_sharing_an_option_must_agree_on_its_type(monkeypatch):
    from vrh.commands.data import source_flags
    from vrh.data.sources import registry, source_names
    from vrh.data.sources.registry import Source, SourceOption

    source_names()
    monkeypatch.setattr(registry, "_SOURCES", dict(registry._SOURCES))
    registry.register_source(Source(name="seed_as_text", summary="", layout="", task="vqa", splits=("test",),
                                    read_rows=None, convert_row=None, options=(SourceOption("seed"),)))
    with pytest.raises(ValueError, match="declare --seed with different types"):
        source_flags()


def test_a_converted_refcoco_set_runs_through_detect_and_evaluate(refcoco_snapshot, tmp_path, tiny_checkpoint,
                                                                  capsys):
    data = tmp_path / "rc"
    assert main(["data", "convert", "refcoco", str(refcoco_snapshot), "--out", str(data)]) == 0
    assert "2 rows skipped" in capsys.readouterr().out
    det = tmp_path / "det"
    assert main(["detect", "--model", tiny_checkpoint, "--data", str(data / "data.jsonl"), "--n", "6",
                 "--out", str(det), "--max-new-tokens", "8", "--batch-size", "4", "--scorers", "out/sum/mean"]) == 0
    cfg = runs.read_json(det / runs.CONFIG)
    assert cfg["data"]["n_detect"] == 6 and len(cfg["eval_ids"]) == 6
    assert all(i.startswith("refcoco-val-") for i in cfg["eval_ids"])
    ev = tmp_path / "ev"
    assert main(["evaluate", "--model", tiny_checkpoint, "--data", str(data / "data.jsonl"), "--mask-heads", str(det),
                 "--k", "2", "--out", str(ev), "--max-new-tokens", "8"]) == 0
    res = runs.read_json(ev / runs.RESULTS)
    assert res["n"] == 6 and 0.0 <= res["accuracy"] <= 1.0
    assert {r["id"] for r in runs.read_jsonl(ev / runs.SAMPLES)} == set(cfg["eval_ids"])


@pytest.fixture(scope="module")
def organism_refcoco(tmp_path_factory):
    """A RefCOCO-layout parquet of the organism's own 112x112 world scenes (expression as answer[0], the
    target's box as [x, y, w, h]), from the demo's world seed, which the organism never trained on."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vrh.organism.world import grounding_sample, render

    root = tmp_path_factory.mktemp("OrganismRefCOCO")
    rows = []
    for k in range(24):
        s = grounding_sample(20_000, k)
        buf = io.BytesIO()
        render(s["scene"]).save(buf, format="PNG")
        x1, y1, x2, y2 = s["box"]
        rows.append({"question_id": str(5000 + k), "image": {"bytes": buf.getvalue(), "path": None},
                     "question": "Please carefully observe the area circled in the image and come up with a caption.",
                     "answer": [s["expression"]], "bbox": [x1, y1, x2 - x1, y2 - y1],
                     "file_name": f"COCO_val2014_{k:012d}.jpg"})
    (root / "data").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), root / "data" / "val-00000-of-00001.parquet")
    return root


def test_a_converted_refcoco_set_runs_through_detect_and_evaluate_on_the_organism(organism_refcoco, tmp_path):
    data = tmp_path / "rc" / "data.jsonl"
    assert main(["data", "convert", "refcoco", str(organism_refcoco), "--out", str(data.parent)]) == 0
    ids = tmp_path / "detect_ids.txt"  # the user-given detection set replaces the seeded draw of --n
    ids.write_text("".join(f"refcoco-val-{5000 + k}\n" for k in range(8)))
    det = tmp_path / "det"
    assert main(["detect", "--model", "organism", "--data", str(data), "--detect-ids", str(ids), "--out", str(det),
                 "--batch-size", "8"]) == 0
    cfg = runs.read_json(det / runs.CONFIG)
    assert cfg["detect_ids"] == [f"refcoco-val-{5000 + k}" for k in range(8)] and len(cfg["eval_ids"]) == 16
    results = {}
    for k in ("0", "4"):
        ev = tmp_path / f"ev{k}"
        assert main(["evaluate", "--model", "organism", "--data", str(data), "--mask-heads", str(det), "--k", k,
                     "--out", str(ev)]) == 0
        results[k] = runs.read_json(ev / runs.RESULTS)
        assert runs.read_json(ev / runs.CONFIG)["task"] == {"name": "grounding", "tau": 0.5, "clip": False}
    # the organism grounds its own scenes through the RefCOCO layout (measured: 0.94 on these 16 held-out
    # samples), and masking its top-4 detected heads knocks that down (measured: 0.19)
    assert results["0"]["n"] == 16 and results["0"]["accuracy"] >= 0.75
    assert results["4"]["accuracy"] <= results["0"]["accuracy"] - 0.25
