"""The settings values (vrh.experiments.settings): one per library call, each the Config of its command, recorded
in config.json with the keys, in the order, that run folders have always had (a resumed run compares them)."""

import pytest

from vrh.analyses.compare.settings import CompareSettings
from vrh.analyses.demo.settings import DemoSettings
from vrh.analyses.stability.settings import StabilitySettings
from vrh.analyses.transfer.settings import TransferSettings
from vrh.experiments import settings as s
from vrh.options import GenerationOptions, config_record

MODEL = ("model", "adapter", "device", "dtype", "device_map")
RUN_GEN_MASK = ("out", "batch_size", "max_new_tokens", "mask_mode", "exclude_layers", "scorer")
EVAL = ("task", "n", "tau", "clip_boxes", "answer_rule", "disjoint", "data")
DETECT = ("n", "n_eval", "scorers", "answer", "min_overlap", "seed", "detect_ids", "n_overlays", "one_pass")
# config.json's "config" keys, as every earlier vrh wrote them
RECORDS = {
    s.DetectRunSettings: ("out", "batch_size", "max_new_tokens", *DETECT, "data", *MODEL),
    s.EvaluateSettings: (*RUN_GEN_MASK, *EVAL, *MODEL, "mask_heads", "k", "random", "seed"),
    s.SweepSettings: (*RUN_GEN_MASK, *EVAL, *MODEL, "heads", "ks", "seeds"),
    CompareSettings: (*RUN_GEN_MASK, *DETECT, "data", *MODEL, "methods", "default", "ks", "seeds"),
    TransferSettings: (*RUN_GEN_MASK, *EVAL, *MODEL, "heads", "heads_b", "k", "seeds"),
    StabilitySettings: (*RUN_GEN_MASK, *MODEL, "heads", "data", "k", "n_values", "bootstrap", "seed", "seeds",
                          "accuracy_draws", "n_eval"),
    s.PairsSettings: (*RUN_GEN_MASK, "heads", "data", "train", "n", "pairs", "rejected", "k", "seed", *MODEL,
                      "random_negatives"),
    DemoSettings: (*RUN_GEN_MASK, *MODEL, "n_detect", "n_eval", "n_vqa", "k", "ks", "seeds", "world_seed",
                     "sparsity_thresholds"),
}
REQUIRED = dict(model="m", data="d", heads="h", out="o")


def _value(cls):
    from dataclasses import fields

    names = {f.name for f in fields(cls)}
    extra = {"methods": ("out/sum/mean",)} if cls is CompareSettings else {}
    return cls(**{k: v for k, v in REQUIRED.items() if k in names}, **extra)


@pytest.mark.parametrize("cls", list(RECORDS), ids=lambda c: c.__name__)
def test_each_settings_value_records_the_keys_run_folders_have_always_had(cls):
    assert tuple(config_record(_value(cls))) == RECORDS[cls]


@pytest.mark.parametrize("cls", list(RECORDS), ids=lambda c: c.__name__)
def test_each_settings_type_is_its_commands_config(cls):
    from vrh.analyses.registry import get_analysis

    assert get_analysis(cls.COMMAND).settings is cls


def test_take_reads_a_values_fields_from_anything_carrying_them():
    sweep = _value(s.SweepSettings)
    assert s.take(GenerationOptions, sweep) == GenerationOptions(batch_size=16, max_new_tokens=64)
    assert s.take(GenerationOptions, sweep, batch_size=4).batch_size == 4
    detect = s.take(s.DetectSettings, _value(CompareSettings))
    assert detect.scorers == ("out/sum/mean",) and detect.capture == "generate"  # compare's derived scorer list


def test_a_keyword_naming_no_field_is_a_type_error_naming_the_fields():
    value = GenerationOptions()
    assert s.with_options(value, {}, "f") is value
    assert s.with_options(value, {"batch_size": 2}, "f").batch_size == 2
    with pytest.raises(TypeError, match=r"f\(\) got unexpected keyword argument\(s\) \['size'\]; it takes "
                                        "GenerationOptions's fields: batch_size, max_new_tokens"):
        s.with_options(value, {"size": 2}, "f")
