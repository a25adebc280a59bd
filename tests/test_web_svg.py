"""The web page's server-drawn pictures: labels stay inside the picture, and Training Units
read the same in the usage chart and the usage table. Pure: the pictures are built from
plain rows, no server."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from yoloq.api import web_svg
from yoloq.api.web_data import Bar, TeamUsage

NS = "{http://www.w3.org/2000/svg}"


def text_extents(svg: str) -> list[tuple[str, float, float, float]]:
    """(text, left, right, viewBox width) of every label, from its x, anchor and the drawn
    width the module assumes for its font (`web_svg.text_width`)."""
    root = ET.fromstring(svg)
    width = float(root.get("viewBox").split()[2])
    found = []
    for node in root.iter(f"{NS}text"):
        text, x = node.text or "", float(node.get("x"))
        drawn = web_svg.text_width(text)
        anchor = node.get("text-anchor", "start")
        left = {"start": x, "middle": x - drawn / 2, "end": x - drawn}[anchor]
        found.append((text, left, left + drawn, width))
    return found


def preempted_bars(reason: str) -> list[Bar]:
    """A low job's two segments: the first preempted near the right end of the picture."""
    return [Bar("seg-1", "node-a GPU 0", 0.0, 950.0, "Preempted", "epochs 0\u21925",
                preempted_by="nightly-retrain-urgent-7f3a9c", preempt_reason=reason),
            Bar("seg-2", "node-a GPU 0", 990.0, 1000.0, "Running", "epochs 5\u21926", open=True)]


@pytest.mark.parametrize("reason", [
    "urgent job needs the GPU", "tier urgent over low; least work lost among 3 candidates on 2 nodes"],
    ids=["short", "long"])
def test_timeline_labels_stay_inside_the_picture(reason):
    svg = web_svg.timeline_svg(preempted_bars(reason))
    for text, left, right, width in text_extents(svg):
        assert 0 <= left and right <= width, (text, left, right, width)
    marker = next(t for t in text_extents(svg) if t[0].startswith("\u26a1"))
    assert "nightly-retrain-urgent" in marker[0]  # the preempting job stays readable


def test_a_long_preemption_reason_is_shortened_and_kept_whole_in_the_tooltip():
    reason = "x" * 300
    svg = web_svg.timeline_svg(preempted_bars(reason))
    label = next(t for t in text_extents(svg) if t[0].startswith("\u26a1"))[0]
    assert label.endswith("\u2026") and reason not in label
    assert reason in svg  # the <title> tooltip keeps all of it


def test_usage_labels_stay_inside_the_picture():
    rows = [TeamUsage("vision", 1.234567, 2.5, "week", 3.0),
            TeamUsage("a-team-with-a-very-long-name-indeed", 0.5, None, "day", 0.5)]
    for text, left, right, width in text_extents(web_svg.usage_svg(rows)):
        assert 0 <= left and right <= width, (text, left, right, width)


@pytest.mark.parametrize("value, text", [
    (0.0, "0"), (2.42e-06, "0.00000242"), (0.0153, "0.0153"), (0.5, "0.5"), (1.5, "1.5"),
    (12.345, "12.3"), (99.96, "100"), (1234.5, "1,234"), (None, "none"), (-0.25, "-0.25")],
    ids=lambda v: str(v))
def test_training_units_have_three_significant_digits_and_no_exponent(value, text):
    assert web_svg.format_tu(value) == text


def test_the_usage_chart_and_table_show_the_same_number():
    from yoloq.api.web import templates

    rows = [TeamUsage("vision", 2.42e-06, None, "day", 2.42e-06)]
    chart = web_svg.usage_svg(rows)
    table = templates.env.get_template("usage.html").render(rows=rows, chart=chart, caller=None,
                                                            title="Usage", page="usage")
    cells = re.findall(r"<td>([^<]*)</td>", table)
    assert cells == ["vision", "0.00000242", "none", "day", "0.00000242"]
    assert "0.00000242 TU" in chart and "e-0" not in chart
