"""Colour scale and number formatting for static (no-JS) HTML, mirroring ``js/src/lib/colour.js`` and
``js/src/lib/format.js`` (light palette), so the fallback looks like the live widget.

Example:
    >>> score_colours(1.0, 1.0)
    ('#e66101', '#000000')
    >>> format_score(-0.5)
    '−0.5'
"""

from __future__ import annotations

import math

MID = (247, 247, 247)
NEGATIVE = ((146, 197, 222), (33, 102, 172))
POSITIVE = ((253, 184, 99), (230, 97, 1))
DARK_TEXT = (0, 0, 0)
LIGHT_TEXT = (255, 255, 255)
MINUS = "\u2212"


def _mix(a, b, t):
    # Math.round in JS rounds halves up; int(x + 0.5) does the same for non-negative x.
    return tuple(int(v + (w - v) * t + 0.5) for v, w in zip(a, b))


def _luminance(rgb) -> float:
    channels = []
    for v in rgb:
        c = v / 255
        channels.append(c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4)
    return 0.2126 * channels[0] + 0.7152 * channels[1] + 0.0722 * channels[2]


def contrast(a, b) -> float:
    """WCAG contrast ratio of two RGB colours.

    Example:
        >>> round(contrast((0, 0, 0), (255, 255, 255)))
        21
    """
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def score_rgb(score: float, max_abs: float, signed: bool = True) -> tuple[int, int, int]:
    """Background colour of ``score`` on a symmetric blue (−) / orange (+) scale of half-width ``max_abs``, or
    (``signed=False``, for magnitudes such as a gradient norm) on the sequential pale → orange scale from 0 to
    ``max_abs``.

    Example:
        >>> score_rgb(0.0, 1.0)
        (247, 247, 247)
        >>> score_rgb(1.0, 1.0, signed=False)
        (230, 97, 1)
    """
    if not signed:
        score = max(score, 0.0)
    t = min(abs(score) / max_abs, 1.0) if max_abs > 0 else 0.0
    half, full = NEGATIVE if score < 0 else POSITIVE
    return _mix(MID, half, t * 2) if t <= 0.5 else _mix(half, full, (t - 0.5) * 2)


def hex_colour(rgb) -> str:
    """``#rrggbb`` for an RGB triple.

    Example:
        >>> hex_colour((230, 97, 1))
        '#e66101'
    """
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def score_colours(score: float, max_abs: float, signed: bool = True) -> tuple[str, str]:
    """(background, text) hex colours for one score; the text colour has the higher contrast.

    Example:
        >>> score_colours(-1.0, 1.0)
        ('#2166ac', '#ffffff')
    """
    background = score_rgb(score, max_abs, signed)
    text = DARK_TEXT if contrast(background, DARK_TEXT) >= contrast(background, LIGHT_TEXT) else LIGHT_TEXT
    return hex_colour(background), hex_colour(text)


def legend_stops() -> list[str]:
    """Hex colours from −max to +max (five stops), for legends.

    Example:
        >>> legend_stops()[2]
        '#f7f7f7'
    """
    return [hex_colour(c) for c in (NEGATIVE[1], NEGATIVE[0], MID, POSITIVE[0], POSITIVE[1])]


def format_score(value: float, digits: int = 3, sign: bool = False) -> str:
    """A score with ``digits`` significant digits and a real minus sign (as the JS widget prints it).

    Example:
        >>> format_score(0.123456, digits=6, sign=True)
        '+0.123456'
    """
    if not math.isfinite(value):
        return "n/a"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e5:
        body = str(float(f"{magnitude:.{digits}g}")).removesuffix(".0")
    else:
        mantissa, exponent = f"{magnitude:.{digits - 1}e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
        body = f"{mantissa}e{int(exponent):+d}"
    if value < 0:
        return MINUS + body
    return f"+{body}" if sign else body
