"""kvbook.tables: the HTML table and its plain-text fallback, and how nbval sees them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvmath.formatting import GROUP_SEP, fmt_number, group_digits
from kvbook.tables import CHECK_COLUMNS, Table, check_table

ROOT = Path(__file__).resolve().parents[2]


def sample():
    return Table(["chip", ("HBM", "GB"), ("bandwidth", "TB/s"), ("ridge", "FLOPs/byte")],
                 [["H100 SXM", 80, 3.35, 295.2], ["A100 80GB", 80, 2.039, 153.0],
                  ["B200", 192, 8.0, None]],
                 formats={"bandwidth (TB/s)": ".2f", 3: ".1f"}, caption="Three chips")


def test_numbers_right_aligned_and_units_in_headers():
    t = sample()
    assert t.align == "lrrr"
    lines = t.to_text().splitlines()
    assert lines[0] == "Three chips"
    assert lines[1].split() [:1] == ["chip"] and lines[1].endswith("ridge (FLOPs/byte)")
    assert "HBM (GB)  bandwidth (TB/s)" in lines[1]
    assert lines[3].endswith("295.2") and lines[4].endswith("153.0") and lines[5].endswith("\u2013")
    assert all(not line.endswith(" ") for line in lines)
    # every row the same width in the text form: columns line up
    assert len({len(line) for line in lines[2:5]}) == 1


def test_html_is_a_real_table_and_deterministic():
    html = sample().to_html()
    assert html.startswith('<table class="kvmath-table">') and html.endswith("</table>")
    assert "<caption>Three chips</caption>" in html
    assert html.count("<tr>") == 4 and html.count('<th scope="col"') == 4
    assert '<td class="kvmath-num">2.04</td>' in html
    assert "style=" not in html and "id=" not in html
    assert sample().to_html() == html
    assert sample()._repr_html_() == html and repr(sample()) == str(sample()) == sample().to_text()


def test_text_columns_leave_a_column_out_of_the_text_only():
    t = Table(["row", "configuration", ("step", "ms")], [["a", "Llama 3 8B on 1x H100", 6.5], ["bb", "x", 12.25]],
              formats={2: ".2f"}, text_columns=["row", 2])
    assert t.to_text().splitlines() == ["row  step (ms)", "---  ---------", "a         6.50", "bb       12.25"]
    assert "<td>Llama 3 8B on 1x H100</td>" in t.to_html()  # the HTML keeps every column


def test_html_escapes_cells():
    t = Table(["a"], [["<b>&"]])
    assert "<td>&lt;b&gt;&amp;</td>" in t.to_html()


def test_one_digit_grouping_everywhere():
    from kvbook import plots
    from kvbook.interactive import Slider

    assert GROUP_SEP == "\u2009"
    assert fmt_number(1048576) == f"1{GROUP_SEP}048{GROUP_SEP}576"
    assert Table(["n"], [[1048576]]).cell_text(0, 0) == fmt_number(1048576)
    assert plots._plain_number(1024) == fmt_number(1024)  # tick labels
    assert Slider([1024, 65536]).options[1][0] == fmt_number(65536)  # slider labels
    assert group_digits("123") == "123" and group_digits("-4096 tokens") == f"-4{GROUP_SEP}096 tokens"


def test_check_table_has_the_four_columns():
    t = check_table([("step at B = 1", "14 ms", "14.05 ms", "the source rounds"),
                     ("ridge", None, "295.2")])
    assert tuple(t.headers) == CHECK_COLUMNS
    assert t.align == "lrrl"
    assert t.cell_text(1, 1) == "\u2013" and t.cell_text(1, 3) == "\u2013"


@pytest.mark.parametrize("make, match", [
    (lambda: Table([], []), "at least one header"),
    (lambda: Table(["a", "b"], [[1]]), r"rows\[0\] has 1 cells, expected 2"),
    (lambda: Table(["a"], [[1]], align="x"), "align must be"),
    (lambda: Table(["a"], [[1]], formats={"b": ".2f"}), "formats key 'b'"),
    (lambda: Table(["a"], [[1]], text_columns=[1]), "text_columns key 1"),
    (lambda: Table([("a", "b", "c")], []), r"\(name, unit\) pair"),
    (lambda: check_table([("a", "b")]), r"rows\[0\] must be \(quantity, source, exact"),
])
def test_bad_input_raises_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def sanitize(text: str) -> str:
    """Apply tests/nbval_sanitize.cfg as nbval does (regex, replace pairs, in order)."""
    cfg = (ROOT / "tests" / "nbval_sanitize.cfg").read_text()
    for regex, replace in re.findall(r"^regex: (.*)$\n^replace: (.*)$", cfg, flags=re.MULTILINE):
        text = re.sub(regex, replace, text)
    return text


def test_nbval_compares_the_text_not_the_styling():
    """A checked cell displaying a table: nbval sees the text/plain; the HTML becomes a placeholder."""
    a = sample().to_html()
    restyled = a.replace("<thead>", "<thead class=\"fancy\">").replace("kvmath-num", "num right")
    assert sanitize(a) == sanitize(restyled) == "KVMATH_TABLE_HTML"
    assert sanitize("<p>before</p>" + a + "<p>after</p>") == "<p>before</p>KVMATH_TABLE_HTML<p>after</p>"
    assert sanitize(sample().to_text()) == sample().to_text()  # the numbers are still checked


def test_dropdown_holds_every_note_escaped_and_closed():
    from kvbook.tables import Dropdown

    d = Dropdown("What each row leaves unknown", [("a", "x < y"), ("b", "two & three")])
    h = d.to_html()
    assert h.startswith('<details class="kvmath-dropdown">') and " open" not in h  # closed until opened
    assert "<dt>a</dt><dd>x &lt; y</dd>" in h and "<dt>b</dt><dd>two &amp; three</dd>" in h
    assert d._repr_html_() == h and repr(d) == "What each row leaves unknown: 2 notes (a dropdown in HTML)"


@pytest.mark.parametrize("summary, notes, match", [("", [("a", "x")], "summary"), ("s", [], "notes"),
                                                    ("s", [("a", "x"), ("a", "y")], "more than once")])
def test_dropdown_refuses_bad_input_by_name(summary, notes, match):
    from kvbook.tables import Dropdown

    with pytest.raises(ValueError, match=match):
        Dropdown(summary, notes)
