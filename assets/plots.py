"""Small line charts as SVG, embedded in markdown metadata so the Dagster UI shows a picture.

Hand-written SVG (a polyline per series, the axis ranges as labels) rather than matplotlib: a
loss curve needs no plotting library, the picture is a few hundred bytes, and it renders in the
UI's markdown as an ``<img>`` with a ``data:image/svg+xml;base64,...`` source.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 480, 200
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 12, 22, 30


def _label(value: float) -> str:
    return f"{value:.4g}"


def line_chart_svg(
    points: Sequence[tuple[float, float]], *, title: str, x_label: str, color: str = "#4f43dd"
) -> str:
    """An SVG line chart of ``(x, y)`` points (non-finite ys are left out); with one point a
    dot, with none a chart that says so."""
    finite = [(float(x), float(y)) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    inner_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    inner_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{MARGIN_LEFT}" y="14" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{inner_w}" height="{inner_h}" '
        'fill="none" stroke="#bbb"/>',
    ]
    if not finite:
        parts.append(f'<text x="{MARGIN_LEFT + 8}" y="{MARGIN_TOP + 20}">no data yet</text>')
    else:
        xs, ys = [p[0] for p in finite], [p[1] for p in finite]
        x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
        x_span, y_span = (x1 - x0) or 1.0, (y1 - y0) or 1.0

        def at(x: float, y: float) -> tuple[float, float]:
            return (
                MARGIN_LEFT + (x - x0) / x_span * inner_w,
                MARGIN_TOP + inner_h - (y - y0) / y_span * inner_h,
            )

        screen = [at(x, y) for x, y in finite]
        if len(screen) == 1:
            cx, cy = screen[0]
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{color}"/>')
        else:
            path = " ".join(f"{sx:.1f},{sy:.1f}" for sx, sy in screen)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>'
            )
        bottom = MARGIN_TOP + inner_h
        parts += [
            f'<text x="{MARGIN_LEFT - 4}" y="{MARGIN_TOP + 9}" text-anchor="end">{_label(y1)}</text>',
            f'<text x="{MARGIN_LEFT - 4}" y="{bottom}" text-anchor="end">{_label(y0)}</text>',
            f'<text x="{MARGIN_LEFT}" y="{bottom + 14}">{_label(x0)}</text>',
            f'<text x="{WIDTH - MARGIN_RIGHT}" y="{bottom + 14}" text-anchor="end">'
            f"{_label(x1)}</text>",
        ]
    parts.append(
        f'<text x="{MARGIN_LEFT + inner_w / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


def svg_markdown(svg: str, alt: str) -> str:
    """Markdown that shows ``svg`` as an image (a base64 data URI)."""
    encoded = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f"![{alt}](data:image/svg+xml;base64,{encoded})"


class LossCurve:
    """The training loss averaged over windows of steps, at most ``max_points`` of them
    (when full, neighbouring windows merge and the window doubles): bounded memory for any
    number of steps, a curve fine enough to see the trend."""

    def __init__(self, window: int = 1, max_points: int = 400) -> None:
        self.window, self.max_points = window, max_points
        self.points: list[tuple[int, float]] = []  # (last step of the window, mean loss)
        self._sum, self._count = 0.0, 0

    def __call__(self, step: int, loss: float) -> None:
        self._sum += loss
        self._count += 1
        if self._count >= self.window:
            self.points.append((step, self._sum / self._count))
            self._sum, self._count = 0.0, 0
            if len(self.points) > self.max_points:
                odd = self.points[-1:] if len(self.points) % 2 else []
                pairs = zip(self.points[0::2], self.points[1::2], strict=False)
                self.points = [(b[0], (a[1] + b[1]) / 2) for a, b in pairs] + odd
                self.window *= 2
