"""The base LM of organism D from the package index (vrh.models.gemma_base): without the gemma extra, a one-line
error that says how to install it (an OSError, which every command reports in one line)."""

import pytest

from vrh.models import gemma_base


def test_without_the_gemma_extra_the_error_says_how_to_install_it(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_package(name, *a, **k):
        if name == gemma_base.PACKAGE:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_package)
    assert not gemma_base.available()
    with pytest.raises(OSError, match=r"pip install -e '\.\[gemma\]'"):
        gemma_base.base_folder()
