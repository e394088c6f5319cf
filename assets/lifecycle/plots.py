"""Small line charts as SVG, embedded in markdown metadata so the Dagster UI shows a picture.

Hand-written SVG (a polyline per series, the axis ranges as labels) rather than matplotlib: a
loss curve needs no plotting library, the picture is a few hundred bytes, and it renders in the
UI's markdown as an ``<img>`` with a ``data:image/svg+xml;base64,...`` source. Each picture is
its own metadata value under 1,000 characters, the most the UI shows without a click.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 320, 130
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 36, 8, 16, 16
#: Dagster's UI shows a markdown value inline only when it is shorter than this; longer ones
#: hide behind a "Show Markdown" click
INLINE_MARKDOWN_CHARS = 1000


def _label(value: float) -> str:
    if value == int(value) and abs(value) >= 1e4:
        return f"{value:,.0f}"  # a step count: 19,951 rather than 1.995e+04
    return f"{value:.4g}"


def line_chart_svg(
    points: Sequence[tuple[float, float]],
    *,
    title: str,
    x_label: str,
    color: str = "#4f43dd",
    x_range: tuple[float, float] | None = None,
) -> str:
    """A compact SVG line chart of ``(x, y)`` points (non-finite ys are left out): the title on
    top, the y range on the left, the x range below (the last label names the x axis); with one
    point a dot, with none a chart that says so. Integer coordinates keep it a few hundred
    bytes. ``x_range`` fixes the x axis (default: the points' range)."""
    finite = [(float(x), float(y)) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    inner_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    inner_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    bottom, right = MARGIN_TOP + inner_h, MARGIN_LEFT + inner_w
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="10">',
        '<rect width="100%" height="100%" fill="#fff"/>',
        f'<text x="{MARGIN_LEFT}" y="11">{escape(title)}</text>',
        f'<path d="M{MARGIN_LEFT} {MARGIN_TOP}V{bottom}H{right}" fill="none" stroke="#999"/>',
    ]
    if not finite:
        parts.append(f'<text x="{MARGIN_LEFT + 8}" y="{MARGIN_TOP + 20}">no data yet</text>')
        parts.append(
            f'<text x="{right}" y="{HEIGHT - 4}" text-anchor="end">{escape(x_label)}</text>'
        )
    else:
        xs, ys = [p[0] for p in finite], [p[1] for p in finite]
        x0, x1 = x_range or (min(xs), max(xs))
        y0, y1 = min(ys), max(ys)
        x_span, y_span = (x1 - x0) or 1.0, (y1 - y0) or 1.0
        screen = [
            (
                round(MARGIN_LEFT + (x - x0) / x_span * inner_w),
                round(bottom - (y - y0) / y_span * inner_h),
            )
            for x, y in finite
        ]
        if len(screen) == 1:
            cx, cy = screen[0]
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>')
        else:
            path = " ".join(f"{sx},{sy}" for sx, sy in screen)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}"/>')
        parts += [
            f'<text x="{MARGIN_LEFT - 3}" y="{MARGIN_TOP + 8}" text-anchor="end">{_label(y1)}</text>',
            f'<text x="{MARGIN_LEFT - 3}" y="{bottom}" text-anchor="end">{_label(y0)}</text>',
            f'<text x="{MARGIN_LEFT}" y="{HEIGHT - 4}">{_label(x0)}</text>',
            f'<text x="{right}" y="{HEIGHT - 4}" text-anchor="end">'
            f"{escape(x_label)} {_label(x1)}</text>",
        ]
    parts.append("</svg>")
    return "".join(parts)


def svg_markdown(svg: str, alt: str) -> str:
    """Markdown that shows ``svg`` as an image (a base64 data URI)."""
    encoded = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f"![{alt}](data:image/svg+xml;base64,{encoded})"


def thin(points: Sequence[tuple[float, float]], n: int) -> list[tuple[float, float]]:
    """At most ``n`` points: each the mean of a run of consecutive points (x and y)."""
    points = list(points)
    if len(points) <= n:
        return points
    bounds = [round(i * len(points) / n) for i in range(n + 1)]
    runs = [points[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    return [(sum(x for x, _ in run) / len(run), sum(y for _, y in run) / len(run)) for run in runs]


def chart_markdown(
    points: Sequence[tuple[float, float]],
    *,
    title: str,
    x_label: str,
    alt: str,
    color: str = "#4f43dd",
    limit: int = INLINE_MARKDOWN_CHARS,
    x_start: float | None = None,
) -> str:
    """A line chart as markdown short enough for the UI to show inline: the points are thinned
    (averaged in runs) until the picture fits in ``limit`` characters; the x axis keeps the
    range of all the points, from ``x_start`` when given (step 1 of a loss curve whose first
    point is the end of its first window)."""
    xs = [float(x) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    x_range = (min(xs) if x_start is None else min(x_start, *xs), max(xs)) if xs else None
    for n in (120, 80, 60, 45, 32, 24, 16, 12, 8):
        markdown = svg_markdown(
            line_chart_svg(
                thin(points, n), title=title, x_label=x_label, color=color, x_range=x_range
            ),
            alt,
        )
        if len(markdown) < limit:
            return markdown
    return markdown


class LossCurve:
    """The training loss averaged over windows of steps, at most ``max_points`` of them
    (when full, neighbouring windows merge and the window doubles): bounded memory for any
    number of steps, a curve fine enough to see the trend."""

    def __init__(self, window: int = 1, max_points: int = 400) -> None:
        self.window, self.max_points = window, max_points
        self.points: list[tuple[int, float]] = []  # (last step of the window, mean loss)
        self._sum, self._count = 0.0, 0
        self._last_step = 0

    def curve(self) -> list[tuple[int, float]]:
        """The points, with the last window even if it is not full yet (the run's last steps)."""
        if self._count:
            return [*self.points, (self._last_step, self._sum / self._count)]
        return list(self.points)

    def __call__(self, step: int, loss: float) -> None:
        self._sum += loss
        self._count += 1
        self._last_step = step
        if self._count >= self.window:
            self.points.append((step, self._sum / self._count))
            self._sum, self._count = 0.0, 0
            if len(self.points) > self.max_points:
                odd = self.points[-1:] if len(self.points) % 2 else []
                pairs = zip(self.points[0::2], self.points[1::2], strict=False)
                self.points = [(b[0], (a[1] + b[1]) / 2) for a, b in pairs] + odd
                self.window *= 2
