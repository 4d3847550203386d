import argparse
from dataclasses import dataclass

import pytest

from vrh.infra.options import (DataOptions, ModelOptions, RunOptions, add_options, config_record, ints, option,
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
    p, cfg = _parse(["--data", "d.jsonl", "--out", "o", "--ks", "1,2", "--no-disjoint", "--resume"])
    assert cfg == _Config(data="d.jsonl", out="o", ks=(1, 2), disjoint=False, resume=True)
    help_text = p.format_help()
    assert "(default: 0,3)" in help_text and "--no-disjoint" in help_text and "organism)" in help_text
    assert help_text.index("--model") < help_text.index("--data") < help_text.index("--out") < help_text.index("--ks")


def test_required_options_and_unknown_keys():
    with pytest.raises(SystemExit):
        _parse(["--out", "o"])  # --data missing
    with pytest.raises(TypeError):
        _Config(data="d", out="o", bogus=1)


def test_config_record_leaves_out_how_the_run_is_invoked():
    rec = config_record(_Config(data="d", out="o", resume=True, threads=2))
    assert "resume" not in rec and "threads" not in rec and rec["ks"] == (0, 3)
