"""Packages that export lazily (hicache.lazy) export what they list, and load it late."""

import importlib
import subprocess
import sys

import pytest

LAZY = ["hicache.scenario", "hicache.schema"]


@pytest.mark.parametrize("name", LAZY)
def test_every_listed_name_resolves_to_its_module_attribute(name: str) -> None:
    pkg = importlib.import_module(name)
    assert sorted(pkg.__all__) == sorted(pkg._EXPORTS)
    for attr in pkg.__all__:
        value = getattr(pkg, attr)
        assert value is getattr(importlib.import_module(pkg._EXPORTS[attr]), attr)
        assert attr in dir(pkg)


@pytest.mark.parametrize("name", LAZY)
def test_an_unknown_name_is_an_attribute_error(name: str) -> None:
    pkg = importlib.import_module(name)
    with pytest.raises(AttributeError, match="no_such_name"):
        pkg.no_such_name  # noqa: B018


def test_a_submodule_loads_without_the_package_exports() -> None:
    code = ("import sys, hicache.scenario.command, hicache.schema.types\n"
            "print(sorted(m for m in ('hicache.scenario.model', 'hicache.schema.yamlio', "
            "'yaml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
