"""A checkpoint folder without its tokenizer files or processor config: one vrh line naming what is missing and
how to save it (issue 46 item 10), before transformers advises installing sentencepiece or names
``preprocessor_config.json`` alone, or (a folder with no tokenizer at all) fails at generation."""

import shutil

import pytest

from vrh.cli import main
from vrh.models.adapters import get_adapter
from vrh.models.checkpoint_files import (PROCESSOR_CONFIG_FILES, TOKENIZER_FILES, check_processor_files,
                                         missing_processor_files)
from vrh.models.loading import load_model

TOKENIZER_DEFINITIONS = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def _without(src, dest, *patterns):
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(*patterns))
    return str(dest)


def test_a_folder_without_tokenizer_files_is_one_line_naming_them_and_the_save(tmp_path, tiny_checkpoint, capsys,
                                                                                tiny_dataset):
    folder = _without(tiny_checkpoint, tmp_path / "no_tok", *TOKENIZER_FILES, *TOKENIZER_DEFINITIONS)
    with pytest.raises(FileNotFoundError) as err:
        load_model(folder)
    line = str(err.value)
    assert line.startswith(f"{folder} has no tokenizer files (any of tokenizer.json")
    assert f"processor.save_pretrained({folder!r})" in line and "\n" not in line and "processor config" not in line
    assert main(["evaluate", "--model", folder, "--data", tiny_dataset, "--n", "1", "--out", str(tmp_path / "e")]) == 2
    err_text = capsys.readouterr().err
    assert err_text.count("\n") == 1 and "has no tokenizer files" in err_text and "sentencepiece" not in err_text


def test_a_folder_without_its_processor_config_is_one_line_naming_both_names(tmp_path, tiny_checkpoint):
    folder = _without(tiny_checkpoint, tmp_path / "no_proc", *PROCESSOR_CONFIG_FILES)
    with pytest.raises(FileNotFoundError, match=r"has no processor config \(processor_config.json or "
                                                r"preprocessor_config.json\), which vrh builds the processor from: "
                                                r"save them beside the weights with processor.save_pretrained"):
        load_model(folder)


def test_both_missing_in_one_line_and_nothing_missing_passes(tmp_path, tiny_checkpoint):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(f"{tiny_checkpoint}/config.json", bare)
    assert missing_processor_files(bare) == [
        "tokenizer files (any of tokenizer.json, tokenizer.model, vocab.json, vocab.txt)",
        "processor config (processor_config.json or preprocessor_config.json)"]
    with pytest.raises(FileNotFoundError, match=r"has no tokenizer files .* and no processor config"):
        check_processor_files(str(bare))
    check_processor_files(tiny_checkpoint, get_adapter("qwen2_5_vl"))  # a whole save
    check_processor_files("Qwen/Qwen2.5-VL-7B-Instruct")  # a hub id: its files come from the hub


def test_a_composed_family_needs_only_its_tokenizer_here():
    """Magma, DeepSeek-VL2 and Phi-4 read their own processor files (and name them when missing)."""
    from vrh.models.adapters.base import registered_adapters
    from vrh.models.checkpoint_files import needs_processor_config

    get_adapter("magma")  # the composed families registered too (imported on first lookup)
    adapters = {name: cls() for name, cls in registered_adapters().items()}
    ported = [n for n, a in adapters.items() if a.ported_remote_code]
    assert {"magma", "deepseek_vl2"} <= set(ported)
    assert not any(needs_processor_config(adapters[n]) for n in ported)
    assert needs_processor_config(adapters["qwen2_5_vl"])
