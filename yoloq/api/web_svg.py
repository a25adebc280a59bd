"""Server-drawn SVG pictures for the web page (no chart library, no script needed):
a job's timeline (segments as bars over time on their GPUs, preemptions marked),
metric curves, and Training Units per team against quota."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from yoloq.api.web_data import Bar, TeamUsage, iso

_W, _LEFT, _RIGHT, _LANE = 900, 150, 20, 46
CHAR_W = 7.4  # width of one character of 12 px system-ui text, bold, with margin (no font metrics here)
_COLORS = {"Completed": "#3a7d44", "Preempted": "#d08c00", "Running": "#2f6db5",
           "Crashed": "#b23b3b", "Failed": "#b23b3b", "Cancelled": "#888"}


def timeline_svg(bars: list[Bar]) -> str:
    """Segments as bars per lane (node and GPU) over wall time; a preempted segment ends in a
    red marker labelled with the preempting job and the reason."""
    if not bars:
        return '<p class="empty">No segment has started yet.</p>'
    lanes = sorted({b.lane for b in bars})
    t0, t1 = min(b.start for b in bars), max(b.end for b in bars)
    span = max(t1 - t0, 1.0)
    x = lambda t: _LEFT + (t - t0) / span * (_W - _LEFT - _RIGHT)
    height = 40 + _LANE * len(lanes) + 30
    parts = [(f'<svg class="timeline" role="img" aria-label="job timeline" viewBox="0 0 {_W} {height}" '
             f'width="100%" xmlns="http://www.w3.org/2000/svg">')]
    for i, lane in enumerate(lanes):
        y = 30 + i * _LANE
        parts.append(f'<text x="6" y="{y + 22}" class="lane">{escape(shorten(lane, _LEFT - 10))}</text>'
                     f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y + 36}" y2="{y + 36}" class="grid"/>')
    for bar in bars:
        parts.append(_bar(bar, x, 30 + lanes.index(bar.lane) * _LANE))
    parts.append(f'<text x="{_LEFT}" y="{height - 8}" class="axis">{escape(iso(t0))}</text>'
                 f'<text x="{_W - _RIGHT}" y="{height - 8}" class="axis" text-anchor="end">'
                 f'{escape(iso(t1))}</text></svg>')
    return "".join(parts)


def _bar(bar: Bar, x: Any, y: float) -> str:
    left, right = x(bar.start), x(bar.end)
    width = max(right - left, 3.0)
    color = _COLORS.get(bar.state, "#2f6db5")
    tip = f"{bar.name}: {bar.state}, {bar.epochs}, {iso(bar.start)} to {iso(bar.end)}"
    label = shorten(bar.epochs, _W - 4 - (left + 4))
    label_x = min(left + 4, _W - 4 - text_width(label))
    out = [(f'<g class="segment" data-state="{escape(bar.state)}"><title>{escape(tip)}</title>'
           f'<rect x="{left:.1f}" y="{y + 6}" width="{width:.1f}" height="28" rx="3" fill="{color}"/>'
           f'<text x="{label_x:.1f}" y="{y + 25}" class="barlabel">{escape(label)}</text></g>')]
    if bar.preempted_by:
        why = f"preempted by {bar.preempted_by}: {bar.preempt_reason}".strip().rstrip(":")
        x_text, anchor, shown = fit_label(f"\u26a1 {why}", right, _LEFT, _W - 4)
        out.append(f'<g class="preemption"><title>{escape(why)}</title>'
                   f'<line x1="{right:.1f}" x2="{right:.1f}" y1="{y}" y2="{y + 40}" stroke="#c00" '
                   f'stroke-width="3"/><text x="{x_text:.1f}" y="{y + 8}" text-anchor="{anchor}" '
                   f'class="preemptlabel">{escape(shown)}</text></g>')
    return "".join(out)


def text_width(text: str) -> float:
    """An upper estimate of the drawn width of `text` in the SVGs' 12 px font."""
    return len(text) * CHAR_W


def fit_label(text: str, at: float, low: float, high: float, gap: float = 4.0) -> tuple[float, str, str]:
    """(x, text-anchor, text) for a label beside the mark at `at`, inside [low, high]: right
    of the mark where it fits, else left of it (ending at the mark), shortened with an
    ellipsis to the wider side's room when it fits on neither."""
    right_room, left_room = high - (at + gap), (at - gap) - low
    if text_width(text) <= right_room:
        return at + gap, "start", text
    if text_width(text) <= left_room:
        return at - gap, "end", text
    if right_room >= left_room:
        return at + gap, "start", shorten(text, right_room)
    return at - gap, "end", shorten(text, left_room)


def shorten(text: str, room: float) -> str:
    """`text` cut to fit `room` (an ellipsis marks the cut)."""
    if text_width(text) <= room:
        return text
    keep = max(0, int(room // CHAR_W) - 1)
    return text[:keep].rstrip() + "\u2026" if keep else ""


def format_tu(value: float | None) -> str:
    """Training Units for people: three significant digits, never scientific notation
    (`0.00000242`, `0.0153`, `1.5`, `12.3`, `1,234`); `0` for nothing."""
    if value is None:
        return "none"
    if value == 0:
        return "0"
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    decimals = 2 - math.floor(math.log10(size))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def curve_svg(name: str, points: list[tuple[int, float]]) -> str:
    """One metric over epochs as a polyline with its axis range."""
    w, h, pad = 420, 160, 30
    steps = [p[0] for p in points]
    values = [p[1] for p in points]
    s0, s1 = min(steps), max(max(steps), min(steps) + 1)
    v0, v1 = min(values), max(max(values), min(values) + 1e-9)
    coords = " ".join(f"{pad + (s - s0) / (s1 - s0) * (w - 2 * pad):.1f},"
                      f"{h - pad - (v - v0) / (v1 - v0) * (h - 2 * pad):.1f}" for s, v in points)
    return (f'<svg class="curve" role="img" aria-label="{escape(name)}" viewBox="0 0 {w} {h}" '
            f'width="{w}" xmlns="http://www.w3.org/2000/svg"><text x="{pad}" y="16">{escape(name)}</text>'
            f'<polyline fill="none" stroke="#2f6db5" stroke-width="2" points="{coords}"/>'
            f'<text x="{pad}" y="{h - 8}" class="axis">epoch {s0}</text>'
            f'<text x="{w - pad}" y="{h - 8}" class="axis" text-anchor="end">epoch {s1}</text>'
            f'<text x="{w - pad}" y="16" class="axis" text-anchor="end">{v0:.4g} .. {v1:.4g}</text></svg>')


def usage_svg(rows: list[TeamUsage]) -> str:
    """A bar per team: TU spent this period; the quota as a vertical mark."""
    if not rows:
        return '<p class="empty">No usage recorded yet.</p>'
    top = max([r.spent_tu for r in rows] + [r.quota_tu or 0.0 for r in rows]) or 1.0
    w, left, row_h = 700, 140, 34
    scale = lambda v: left + v / top * (w - left - 110)
    parts = [(f'<svg class="usage" role="img" aria-label="usage per team" viewBox="0 0 {w} '
             f'{row_h * len(rows) + 10}" width="100%" xmlns="http://www.w3.org/2000/svg">')]
    for i, r in enumerate(rows):
        y = 5 + i * row_h
        over = r.quota_tu is not None and r.spent_tu > r.quota_tu
        parts.append(f'<text x="4" y="{y + 20}">{escape(shorten(r.team, left - 8))}</text>'
                     f'<rect x="{left}" y="{y + 4}" width="{max(scale(r.spent_tu) - left, 1):.1f}" '
                     f'height="22" fill="{"#b23b3b" if over else "#2f6db5"}"/>')
        label = f"{format_tu(r.spent_tu)} TU" + (f" of {format_tu(r.quota_tu)} / {r.period}" if r.quota_tu else "")
        if r.quota_tu:
            q = scale(r.quota_tu)
            parts.append(f'<line class="quota" x1="{q:.1f}" x2="{q:.1f}" y1="{y}" y2="{y + 30}" '
                         f'stroke="#000" stroke-width="2" stroke-dasharray="4 2"/>')
        x_text, anchor, shown = fit_label(label, scale(max(r.spent_tu, r.quota_tu or 0)), left, w - 4, gap=6)
        parts.append(f'<text x="{x_text:.1f}" y="{y + 20}" text-anchor="{anchor}">{escape(shown)}</text>')
    parts.append("</svg>")
    return "".join(parts)
