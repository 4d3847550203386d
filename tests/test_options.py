import argparse
from dataclasses import dataclass

import pytest

from vrh.options import (DataOptions, ModelOptions, RunOptions, add_options, config_record, ints, option,
                         parse_config)


@dataclass(frozen=True, kw_only=True)
class _Config(ModelOptions, DataOptions, RunOptions):
    ks: tuple[int, ...] = option((0, 3), parse=ints, help="k values")
    disjoint: bool = option(True, negate="--no-disjoint", help="held-out only")


def _parse(argv):
    p = argparse.ArgumentParser()
    add_options(p, _Config)
    return p, parse_config(_Config, p.parse_args(argv))


def test_parser_is_generated_from_the_fields():
    p, cfg = _parse(["--model", "m", "--data", "d.jsonl", "--out", "o", "--ks", "1,2", "--no-disjoint", "--resume"])
    assert cfg == _Config(model="m", data="d.jsonl", out="o", ks=(1, 2), disjoint=False, resume=True)
    help_text = p.format_help()
    assert "(default: 0,3)" in help_text and "--no-disjoint" in help_text and "organism)" in help_text
    assert help_text.index("--model") < help_text.index("--data") < help_text.index("--out") < help_text.index("--ks")


def test_required_options_and_unknown_keys():
    with pytest.raises(SystemExit):
        _parse(["--out", "o"])  # --data missing
    with pytest.raises(TypeError):
        _Config(model="m", data="d", out="o", bogus=1)


def test_config_record_leaves_out_how_the_run_is_invoked():
    rec = config_record(_Config(model="m", data="d", out="o", resume=True, threads=2))
    assert "resume" not in rec and "threads" not in rec and rec["ks"] == (0, 3)


def test_model_is_required_except_by_the_demo():
    """A default model ran the toy organism on a user's 640x480 images and scored it (issue 26 item 10)."""
    with pytest.raises(SystemExit):
        _parse(["--data", "d", "--out", "o"])  # --model missing
    from vrh.analyses import demo

    p = argparse.ArgumentParser()
    add_options(p, demo.Config)
    assert parse_config(demo.Config, p.parse_args([])).model == "organism"


def test_default_k_scales_with_the_model():
    """10% of the heads, rounded, at least 1: a fixed 20 left no room on the 32-head organism (issue 26 item 8)."""
    from vrh.options import DEFAULT_K_RULE, default_k, default_ks

    assert [default_k(L, H) for L, H in ((4, 8), (28, 28), (1, 2), (32, 32))] == [3, 78, 1, 102]
    for L, H in ((4, 8), (28, 28), (2, 2)):
        ks = default_ks(default_k(L, H), L, H)
        assert ks[0] == 0 and all(L * H - k >= k for k in ks)  # each leaves room for k random heads
    assert "10%" in DEFAULT_K_RULE


def test_help_says_what_each_command_takes():
    """issue 46 item 18: --task lists its choices as choices, --answer-rule each rule once by its name,
    text-heads (text prompts, no box) offers no --answer-format, evaluate's description no IoU for VQA."""
    from vrh.cli import build_parser
    from vrh.data.answer_rule_registry import answer_rules
    from vrh.tasks import task_names

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    actions = {a.dest: a for a in sub["evaluate"]._actions}
    assert tuple(actions["task"].choices) == task_names()
    help_text = actions["answer_rule"].help
    assert all(help_text.count(f"{r.name} ({r.benchmark})") == 1 for r in answer_rules())
    assert "answer_format" not in {a.dest for a in sub["text-heads"]._actions}
    assert "answer_format" in {a.dest for a in sub["sweep"]._actions}
    assert "IoU >= 0.5" not in sub["evaluate"].description and "VQA" in sub["evaluate"].description
