"""Price sources are found, not listed: a module of the sources package that defines a named
`PriceSource` is selectable by `LDTM_PRICE_SOURCE` with no other edit."""

from __future__ import annotations

import sys

import pytest

from ldtm_core.data import sources
from ldtm_core.data.sources.files import FilesSource
from ldtm_core.data.sources.synthetic import SyntheticSource
from ldtm_core.errors import InputError

A_NEW_SOURCE = """
from ldtm_core.data.sources.base import PriceSource, SourceAnswer


class StooqSource(PriceSource):
    name = "stooq"

    def fetch(self, tickers, start, end):
        return SourceAnswer()
"""


def test_the_shipped_sources_are_found_and_named_in_the_help():
    assert list(sources.SOURCES)[:2] == ["synthetic", "files"]  # the default first, then those taking an arg
    assert {"ib", "yfinance"} <= set(sources.SOURCES)
    assert sources.SPEC_HELP.startswith("synthetic | files:<dir> | ")
    assert all(name in sources.SPEC_HELP.split(" | ") for name in ("ib", "yfinance"))


def test_a_spec_makes_its_source():
    assert isinstance(sources.make_source("synthetic", seed=4), SyntheticSource)
    assert sources.make_source("synthetic", seed=4).seed == 4
    made = sources.make_source("files:/data/drop")
    assert isinstance(made, FilesSource) and str(made.directory) == "/data/drop"


@pytest.mark.parametrize("spec", ["nosuch", "synthetic:x", "yfinance:1"])
def test_an_unknown_spec_is_refused_with_the_choices(spec):
    with pytest.raises(InputError, match=r"unknown price source .*synthetic \| files:<dir>"):
        sources.make_source(spec)


def test_files_without_a_folder_is_refused():
    with pytest.raises(InputError, match="give the folder"):
        sources.make_source("files:")


def test_a_new_module_is_a_new_source(tmp_path, monkeypatch):
    package = tmp_path / "more_sources"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "stooq.py").write_text(A_NEW_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        found = sources.discover([str(package)], "more_sources")
    finally:
        sys.modules.pop("more_sources.stooq", None)
        sys.modules.pop("more_sources", None)
    assert list(found) == ["stooq"]
    assert found["stooq"].from_spec("", seed=0).name == "stooq"
