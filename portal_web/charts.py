"""Line charts as inline SVG drawn on the server: no JavaScript, nothing to vendor, and the
page's CSP (no inline script or style) holds. Labels are escaped like any other output."""
from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup, escape

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 640, 170, 56, 22, 10
COLOURS = ("#2f6fde", "#d9822b", "#1e7b34", "#b0281a")


def line_chart(series: dict[str, list[tuple[int, float]]], unit: str, chart_id: str) -> Markup:
    """``series``: label -> [(time in ms, value)]. Fewer than two points: a note instead."""
    points = [p for values in series.values() for p in values]
    if len({t for t, _ in points}) < 2:
        return Markup('<p class="chart-empty" id="{}">Not enough samples yet.</p>').format(
            chart_id)
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    top = max(v for _, v in points) or 1.0
    width, height = WIDTH - LEFT - 8, HEIGHT - BOTTOM - TOP

    def xy(t: int, v: float) -> str:
        return f"{LEFT + (t - t0) / (t1 - t0) * width:.1f},{TOP + height - v / top * height:.1f}"

    parts = [f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'width="{WIDTH}" height="{HEIGHT}" role="img">',
             f'<line x1="{LEFT}" y1="{TOP + height}" x2="{WIDTH - 8}" y2="{TOP + height}" '
             'stroke="#9aa3b2"/>',
             f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + height}" stroke="#9aa3b2"/>',
             f'<text x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end" font-size="10">'
             f'{escape(_number(top))}</text>',
             f'<text x="{LEFT - 4}" y="{TOP + height}" text-anchor="end" font-size="10">0</text>',
             f'<text x="{LEFT}" y="{HEIGHT - 6}" font-size="10">{escape(_clock(t0))}</text>',
             f'<text x="{WIDTH - 8}" y="{HEIGHT - 6}" text-anchor="end" font-size="10">'
             f'{escape(_clock(t1))} UTC</text>']
    for i, (label, values) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(xy(t, v) for t, v in values)
        parts.append(f'<polyline class="series" data-label="{escape(label)}" fill="none" '
                     f'stroke="{colour}" stroke-width="1.6" points="{path}"/>')
        parts.append(f'<text x="{LEFT + 8 + 150 * i}" y="{TOP + 10}" font-size="11" '
                     f'fill="{colour}">{escape(label)} ({escape(unit)})</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _number(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= limit:
            return f"{value / limit:.1f}{suffix}"
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S")
