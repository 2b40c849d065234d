"""The typed boundary between Python and the C extensions: one source of the column codes on
each side, agreeing, and a stub (.pyi) for each extension that names what it exports."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import hatch_build
from traceanalyzer.ingest import column_codes
from traceanalyzer.ingest.column_codes import ColumnKind, LayoutLetter
from traceanalyzer.ingest.formats import INGEST_DIR

HEADER = INGEST_DIR / "_native" / "_columncodes.h"
EXTENSIONS = [source.stem for source in hatch_build.SOURCES]


def test_column_kinds_agree_with_the_header():
    text = HEADER.read_text()
    enum = re.search(r"enum \{([^}]*)\}", text)
    assert enum is not None
    in_c = {name: int(value) for name, value in re.findall(r"K_(\w+) = (\d+)", enum.group(1))}
    assert in_c == {kind.name: kind.value for kind in ColumnKind}


def test_layout_letters_agree_with_the_header():
    text = HEADER.read_text()
    in_c = dict(re.findall(r"#define LAYOUT_(\w+) '(.)'", text))
    assert in_c == {letter.name: letter.value for letter in LayoutLetter}
    letters = re.search(r'#define LAYOUT_LETTERS "(\w+)"', text)
    assert letters is not None and letters.group(1) == "".join(x.value for x in LayoutLetter)
    assert set(column_codes.LETTER_OF.values()) == set(letters.group(1))


def test_no_other_c_source_spells_the_kinds():
    for source in INGEST_DIR.rglob("*.[ch]"):
        if source != HEADER:
            assert not re.search(r"K_TEXT\s*=", source.read_text()), source


def _stub_names(stub: Path) -> set[str]:
    tree = ast.parse(stub.read_text())
    return {node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")}


@pytest.mark.parametrize("name", EXTENSIONS)
def test_each_extension_has_a_stub_naming_what_it_exports(name: str):
    source = next(s for s in hatch_build.SOURCES if s.stem == name)
    stub = Path(hatch_build.__file__).parent / source.with_suffix(".pyi")
    assert stub.is_file(), f"no stub for {name}"
    names = _stub_names(stub)
    package = ".".join(source.parent.parts)
    try:
        module = importlib.import_module(f"{package}.{name}")
    except ImportError:
        pytest.skip(f"{name} is not built")
    exported = {n for n in dir(module) if not n.startswith("_")}
    assert names == exported


def test_the_package_is_marked_typed():
    assert (INGEST_DIR.parent / "py.typed").is_file()
