"""JSON a user wrote: too deep, not UTF-8 or malformed is an error naming where, never a RecursionError."""

import json

import pytest

from vrh.data.json_text import MAX_DEPTH, loads, read_json


def test_nesting_beyond_the_limit_is_a_decode_error_at_the_bracket_that_goes_past_it():
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(json.JSONDecodeError, match=r"nested more than 100 levels deep: line 1 column 106"):
        loads(' {"a":' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}")
    with pytest.raises(json.JSONDecodeError, match=r"nested more than 100 levels deep"):
        loads("[" * 100_000)  # was a RecursionError, which no `except ValueError` catches
    # brackets inside strings are text, not nesting; escaped quotes do not end a string
    assert loads(json.dumps({"a": "[" * 500 + '\\"{' * 200})) == {"a": "[" * 500 + '\\"{' * 200}


def test_without_a_limit_only_what_the_parser_cannot_read_is_refused():
    assert loads("[" * 500 + "]" * 500, max_depth=None) is not None
    with pytest.raises(json.JSONDecodeError, match=r"nested too deeply to read, past 100 levels: line 2 column 101"):
        loads("\n" + "[" * 100_000, max_depth=None)


def test_read_json_names_the_file_and_line(tmp_path):
    path = tmp_path / "refs.json"
    path.write_text('[{"a": 1},\n {"a": }]')
    with pytest.raises(ValueError, match=r"refs.json is not valid JSON \(Expecting value at line 2, column 8\)"):
        read_json(path)
    path.write_bytes(b'[\n"caf\xe9"]')
    with pytest.raises(ValueError, match=r"refs.json is not UTF-8 \(byte 0xe9 on line 2\)"):
        read_json(path)
    path.write_text("[" * 100_000)
    with pytest.raises(ValueError, match=r"refs.json is not valid JSON \(nested too deeply to read, past 100 levels "
                                         r"at line 1, column 101\)"):
        read_json(path)
    path.write_text('[{"a": 1},\n {"a": [1')  # a cut-off file: the end, and what it leaves open
    with pytest.raises(ValueError, match=r"refs.json is not valid JSON \(the file ends before its JSON is complete: "
                                         r"a closing '\]}\]' missing\? \(Expecting ',' delimiter\) at line 2, column 10\)"):
        read_json(path)
    path.write_text(json.dumps([{"a": [1, 2]}]))
    assert read_json(path) == [{"a": [1, 2]}]
