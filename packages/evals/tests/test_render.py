"""The one report renderer (``dsv4_evals.render``) that every subcommand's report uses."""

from __future__ import annotations

import io
import json
import pkgutil
from pathlib import Path

import dsv4_evals
import pytest
from dsv4_evals.render import fmt, markdown_table, print_rich_table, to_json, write_atomic
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

SRC = Path(dsv4_evals.__file__).parent


def test_markdown_table_aligns_and_escapes():
    text = markdown_table(["a", "b", "c"], [["x|y", 2, "two\nlines"]], "lrc")
    assert text.splitlines() == [
        "| a | b | c |",
        "|:---|---:|:---:|",
        "| x\\|y | 2 | two lines |",
    ]
    assert markdown_table(["h"], [[1]]).splitlines()[1] == "|:---|"  # left by default


@pytest.mark.parametrize(
    ("headers", "rows", "align", "message"),
    [(["a", "b"], [[1, 2]], "l", "has 1 marks for 2 columns"),
     (["a", "b"], [[1]], "ll", "has 1 cells for 2 columns")],
)
def test_markdown_table_refuses_mismatched_shapes(headers, rows, align, message):
    with pytest.raises(ValueError, match=message):
        markdown_table(headers, rows, align)


def test_terminal_table_shows_brackets_as_text():
    sink = io.StringIO()
    print_rich_table(Console(file=sink, width=80), "title [x]", ["k", "v"],
                     [["Marlin<[1]>", "1.0"]], "lr")
    out = sink.getvalue()
    assert out.startswith("title [x]\n") and "Marlin<[1]>" in out


@given(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=5))
def test_json_is_stable_and_round_trips(doc):
    text = to_json(doc)
    assert text.endswith("\n") and json.loads(text) == doc
    assert to_json(dict(reversed(list(doc.items())))) == text


def test_fmt_marks_what_was_not_measured():
    assert fmt(None) == "-" and fmt(1234.5, 1) == "1,234.5" and fmt(0.12345) == "0.123"


def test_write_atomic_leaves_only_the_file(tmp_path):
    target = tmp_path / "deep" / "report.md"
    write_atomic(target, "one")
    write_atomic(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["report.md"]


def test_every_report_module_renders_through_the_one_renderer():
    """No subcommand draws its own tables or JSON: the old renderers are gone and each
    report module imports this one."""
    names = {m.name for m in pkgutil.iter_modules([str(SRC)])}
    assert "render" in names and not names & {"_report", "_ladder_render"}
    for module in ("ab/render.py", "stress/report.py", "ladder/report.py", "logs/report.py",
                   "buckets/report.py", "matrix/report.py"):
        text = (SRC / module).read_text()
        assert "render import" in text, module
        assert "json.dumps(" not in text and '"|:---' not in text, module
