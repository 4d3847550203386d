"""Every worked example in a vrh docstring is a test."""

import doctest
import importlib
import pkgutil

import pytest

import vrh

MODULES = sorted(m.name for m in pkgutil.walk_packages(vrh.__path__, "vrh.") if not m.ispkg)


def _has_examples(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin is not None and ">>>" in open(spec.origin).read()


@pytest.mark.parametrize("name", [m for m in MODULES if _has_examples(m)])
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS,
                             extraglobs={"torch": importlib.import_module("torch")})
    assert result.attempted > 0
    assert result.failed == 0
