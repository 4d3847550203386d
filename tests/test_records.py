"""SampleRecord (vrh.runs.records) declares every key a real run writes to samples.jsonl, with its type."""

import types
import typing

import pytest

from vrh import runs


def conforms(value, tp) -> bool:
    """Whether a JSON value read back from samples.jsonl is of the declared type ``tp`` (an ``int`` is a
    ``float``, PEP 484's numeric tower; a ``bool`` is neither)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(conforms(v, args[0]) for v in value)
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    raise AssertionError(f"the checker does not know the declared type {tp!r}: teach it")


def off_contract(records: list[dict]) -> list[str]:
    """``id: key=value`` of every key SampleRecord does not declare or whose value is not its declared type."""
    hints = typing.get_type_hints(runs.SampleRecord)
    return [f"{r.get('id')}: {k}={v!r}" for r in records for k, v in r.items()
            if k not in hints or not conforms(v, hints[k])]


def test_the_checker_catches_an_undeclared_key_and_a_wrong_type():
    good = {"id": "a", "task": "grounding", "pred_box": None, "gt_box": [1, 2.5, 3, 4], "k": 0, "seed": None}
    assert off_contract([good]) == []
    assert off_contract([{**good, "extra": 1}]) == ["a: extra=1"]
    assert off_contract([{**good, "k": True}, {**good, "iou": "0.5"}]) == ["a: k=True", "a: iou='0.5'"]


@pytest.mark.parametrize("task", ["grounding", "vqa"])
def test_a_real_runs_records_hold_only_declared_keys_of_declared_types(tmp_path, task):
    from vrh.cli import main
    from vrh.organism.world import write_split

    data = write_split(tmp_path / "data", 4, 0, task=task)
    out = tmp_path / "run"
    # random heads, so the tags carry a k and a seed
    assert main(["evaluate", "--model", "organism", "--data", str(data), "--task", task, "--out", str(out),
                 "--mask-heads", "0:0,1:1", "--random", "--seed", "3"]) == 0
    records = runs.read_samples(out)
    assert records and off_contract(records) == []
    assert all({"id", "task", "image", "pred_text", "outcome", "condition", "kind", "k", "mask_mode"} <= set(r)
               for r in records)
    assert {(r["kind"], r["seed"]) for r in records} == {("random", 3)}
