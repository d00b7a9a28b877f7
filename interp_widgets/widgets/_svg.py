"""Static SVG pictures of widgets: the fallback that survives every notebook renderer.

``nbconvert --sanitize-html`` (nbviewer-style rendering) and GitHub strip ``style`` attributes from ``text/html``,
and nbconvert always prefers ``text/html`` over images when both are present. ``image/svg+xml`` is embedded by
nbconvert as an ``<img src="data:image/svg+xml;base64,…">`` without sanitising (an SVG in an ``<img>`` runs no
script and loads nothing), so the widgets' static fallback is an SVG: coloured tokens, legend and labels drawn
with rects and text. Token text is XML-escaped; control characters become their visible Unicode pictures.

Layout is deterministic without measuring fonts: tokens use a monospace font on a character grid and every
text element carries ``textLength`` so it fills exactly the box computed here, whatever font the viewer has.

Example:
    >>> figure = SvgFigure()
    >>> figure.text("class positive (70.0%)")
    >>> figure.tokens([TokenPiece("", "Great", "#e66101", "#000000", "score +0.8")])
    >>> figure.legend(0.8, signed=True, title="attribution")
    >>> figure.render().startswith("<svg")
    True
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from interp_widgets.widgets._colour import format_score, hex_colour, score_colours

FONT_SIZE = 14
CHAR_WIDTH = 0.6 * FONT_SIZE  # advance of one monospace column
LINE_HEIGHT = 24
PAD = 10
COLUMNS = 96
MONO = "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, 'Liberation Mono', monospace"
SANS = "system-ui, -apple-system, 'Segoe UI', 'DejaVu Sans', sans-serif"
#: Text in MONO carries this class (one <style> rule per picture) instead of repeating the font list on every token:
#: the font lists were a quarter of a large picture's bytes. Other text inherits SANS from the root element.
MONO_CLASS = "iw-mono"
#: Token text: MONO at FONT_SIZE, black unless the token sets its own fill.
TOKEN_CLASS = "iw-tok"
# An SVG namespace is data, not a request; the static SVG never makes one.
SVG_NS = "http://www.w3.org/2000/svg"
MAX_STATIC_TOKENS = 3000  # beyond this the picture says how many tokens it leaves out


def visible_text(text: str) -> str:
    """``text`` with control characters replaced by their Unicode control pictures (XML cannot hold most of them).

    Example:
        >>> visible_text("a\\x1eb")
        'a␞b'
    """
    return "".join(
        chr(0x2400 + ord(ch)) if ord(ch) < 0x20 and ch != "\n" else ("\u2421" if ch == "\x7f" else ch) for ch in text
    )


def columns(text: str) -> int:
    """Monospace columns ``text`` occupies (wide East Asian characters take two; combining marks none).

    Example:
        >>> columns("ab"), columns("日本")
        (2, 4)
    """
    width = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in "WF" else 1
    return width


@dataclass
class TokenPiece:
    """One token to draw: the original text before it (``gap``), its display text, colours and a tooltip.

    ``underline`` (0..1) adds a non-colour magnitude bar under the token, ``marker`` a sign character above it,
    ``note`` a small label under the token (e.g. a probability), ``outline`` a frame (e.g. the selected token).

    Example:
        >>> TokenPiece(" ", "bad", "#2166ac", "#ffffff", "score −0.4").text
        'bad'
    """

    gap: str
    text: str
    background: str
    colour: str
    title: str
    note: str = ""
    outline: bool = False


class SvgFigure:
    """Accumulates rows (text lines, token runs, legends, heatmaps) top to bottom and renders one SVG.

    Example:
        >>> SvgFigure(columns=40).render().count("<rect") >= 1
        True
    """

    def __init__(self, columns: int = COLUMNS, label: str = "interp_widgets static view"):
        self.columns = columns
        self.width = int(2 * PAD + columns * CHAR_WIDTH)
        self.y = PAD
        self.parts: list[str] = []
        self.label = label

    # ------------------------------------------------------------------ rows
    def text(self, line: str, *, size: int = 12, bold: bool = False, colour: str = "#1f2328") -> None:
        """A line of sans-serif text (escaped), e.g. a header or caption.

        Example:
            >>> SvgFigure().text("method: saliency")
        """
        weight = ' font-weight="bold"' if bold else ""
        self.y += size + 4
        self.parts.append(
            f'<text x="{PAD}" y="{self.y}" font-size="{size}" fill="{colour}"{weight}>'
            f"{escape(visible_text(line))}</text>"
        )
        self.y += 4

    def mono_lines(self, lines: list[str], *, size: int = 12) -> None:
        """Lines of monospace text (tables), escaped, each stretched to its computed width.

        Example:
            >>> SvgFigure().mono_lines(["a  b", "1  2"])
        """
        char = 0.6 * size
        for line in lines:
            self.y += size + 5
            shown = visible_text(line)
            length = columns(shown) * char
            fit = f' textLength="{length:.1f}" lengthAdjust="spacingAndGlyphs"' if length else ""
            self.parts.append(
                f'<text x="{PAD}" y="{self.y}" class="{MONO_CLASS}" font-size="{size}" fill="#1f2328"{fit} '
                f'xml:space="preserve">{escape(shown)}</text>'
            )
        self.y += 4

    def tokens(self, pieces: list[TokenPiece], *, omitted: int = 0) -> None:
        """A run of coloured tokens wrapped on the character grid; whitespace gaps and newlines are kept.

        Example:
            >>> SvgFigure().tokens([TokenPiece("", "Hi", "#f7f7f7", "#000000", "Hi")])
        """
        note_space = 12 if any(piece.note for piece in pieces) else 0
        line_height = LINE_HEIGHT + note_space
        col, line = 0, 0
        top = self.y + 4

        def newline():
            nonlocal col, line
            col, line = 0, line + 1

        for piece in pieces:
            for ch in piece.gap:
                if ch == "\n":
                    newline()
                elif col < self.columns:
                    col += 4 if ch == "\t" else 1
            segments = visible_text(piece.text).split("\n")
            for k, segment in enumerate(segments):
                if k:
                    newline()
                if not segment:
                    continue
                width = columns(segment)
                if width > self.columns:
                    segment, width = _truncate(segment, self.columns - 1) + "\u2026", self.columns
                if col + width > self.columns and col > 0:
                    newline()
                x = PAD + col * CHAR_WIDTH
                y = top + line * line_height
                self.parts.append(self._token(piece, segment, x, y, width * CHAR_WIDTH))
                # leave room for the note (9px sans) so neighbouring notes do not overlap
                col += max(width, math.ceil(len(piece.note) * 9 * 0.62 / CHAR_WIDTH) + 1 if piece.note else 0)
        self.y = top + (line + 1) * line_height
        if omitted:
            self.text(
                f"… {omitted} more tokens not drawn in this static picture (the live widget shows all)",
                size=11,
                colour="#57606a",
            )

    def _token(self, piece: TokenPiece, segment: str, x: float, y: float, width: float) -> str:
        box_y, box_h = y + 1, LINE_HEIGHT - 4
        stroke = ' stroke="#1f2328" stroke-width="2"' if piece.outline else ""
        fill = "" if piece.colour == "#000000" else f' fill="{piece.colour}"'  # black is the class default
        space = ' xml:space="preserve"' if segment != segment.strip() or "  " in segment else ""
        out = [
            f"<g><title>{escape(visible_text(piece.title))}</title>",
            f'<rect x="{x:.1f}" y="{box_y}" width="{width:.1f}" height="{box_h}" rx="3" fill="{piece.background}"{stroke}/>',
            f'<text x="{x:.1f}" y="{y + 16}" class="{TOKEN_CLASS}"{fill} textLength="{width:.1f}" '
            f'lengthAdjust="spacingAndGlyphs"{space}>{escape(segment)}</text>',
        ]
        if piece.note:
            out.append(
                f'<text x="{x:.1f}" y="{y + LINE_HEIGHT + 7}" font-size="9" fill="#57606a">{escape(piece.note)}</text>'
            )
        out.append("</g>")
        return "".join(out)

    def legend(self, max_abs: float, *, signed: bool, title: str, steps: int = 24) -> None:
        """A numeric colour legend: −max … 0 … +max (signed) or 0 … max (unsigned), as a row of swatches.

        Example:
            >>> SvgFigure().legend(0.5, signed=False, title="saliency")
        """
        self.text(
            title + (": blue = negative, orange = positive, pale = near 0" if signed else ": pale = 0, orange = large"),
            size=11,
            colour="#57606a",
        )
        bar_w, bar_h = 240, 10
        x0, y0 = PAD + 60, self.y + 2
        low = -max_abs if signed else 0.0
        for k in range(steps):
            value = low + (max_abs - low) * (k + 0.5) / steps
            background, _ = score_colours(value, max_abs, signed=signed)
            self.parts.append(
                f'<rect x="{x0 + k * bar_w / steps:.1f}" y="{y0}" width="{bar_w / steps + 0.4:.1f}" height="{bar_h}" '
                f'fill="{background}"/>'
            )
        self.parts.append(f'<rect x="{x0}" y="{y0}" width="{bar_w}" height="{bar_h}" fill="none" stroke="#c8ced6"/>')
        label_y = y0 + bar_h - 1
        low_text = format_score(-max_abs) if signed else "0"
        self.parts.append(
            f'<text x="{x0 - 6}" y="{label_y}" text-anchor="end" font-size="11" fill="#1f2328">'
            f"{escape(low_text)}</text>"
            f'<text x="{x0 + bar_w + 6}" y="{label_y}" font-size="11" fill="#1f2328">'
            f"{escape(format_score(max_abs, sign=signed))}</text>"
        )
        if signed:
            self.parts.append(
                f'<text x="{x0 + bar_w / 2}" y="{y0 + bar_h + 12}" text-anchor="middle" '
                f'font-size="11" fill="#1f2328">0</text>'
            )
        self.y = y0 + bar_h + (18 if signed else 8)

    def heatmap(self, cells: list[list[tuple[str, str]]], row_labels: list[str], *, cell: float = 12.0) -> None:
        """A grid of coloured cells (``cells[r][c] = (fill, tooltip)``) with row labels on the left.

        Example:
            >>> SvgFigure().heatmap([[("#f7f7f7", "0")]], ["step 1"])
        """
        label_w = 11 * 0.6 * max([8] + [min(columns(visible_text(label)), 18) for label in row_labels])
        n_cols = max((len(row) for row in cells), default=0)
        cell = max(2.0, min(cell, (self.width - 2 * PAD - label_w) / max(n_cols, 1)))
        top = self.y + 4
        for r, (row, label) in enumerate(zip(cells, row_labels)):
            y = top + r * cell
            shown = visible_text(label)
            shown = shown if columns(shown) <= 18 else _truncate(shown, 17) + "\u2026"
            self.parts.append(
                f'<text x="{PAD + label_w - 4:.1f}" y="{y + cell * 0.8:.1f}" text-anchor="end" class="{MONO_CLASS}" '
                f'font-size="{min(11, cell):.0f}" fill="#1f2328">{escape(shown)}</text>'
            )
            for c, (fill, tip) in enumerate(row):
                self.parts.append(
                    f'<rect x="{PAD + label_w + c * cell:.1f}" y="{y:.1f}" width="{cell:.1f}" height="{cell:.1f}" '
                    f'fill="{fill}"><title>{escape(visible_text(tip))}</title></rect>'
                )
        self.y = top + len(cells) * cell + 6

    def gap(self, height: float = 8) -> None:
        """Vertical space.

        Example:
            >>> SvgFigure().gap()
        """
        self.y += height

    # ------------------------------------------------------------------ output
    def render(self, *, standalone: bool = True) -> str:
        """The SVG (white, rounded background so it stays legible on dark notebook themes).

        ``standalone`` adds the ``xmlns`` an ``image/svg+xml`` document needs; SVG inlined in HTML omits it (the HTML
        parser knows the namespace), so exported pages contain no URL at all.

        Example:
            >>> "</svg>" in SvgFigure().render()
            True
        """
        height = int(self.y + PAD)
        xmlns = f' xmlns="{SVG_NS}"' if standalone else ""
        return (
            f'<svg{xmlns} width="{self.width}" height="{height}" viewBox="0 0 {self.width} {height}" '
            f'role="img" aria-label={quoteattr(self.label)} font-family="{SANS}">'
            f"<title>{escape(self.label)}</title><style>.{MONO_CLASS},.{TOKEN_CLASS}{{font-family:{MONO}}}"
            f".{TOKEN_CLASS}{{font-size:{FONT_SIZE}px;fill:#000000}}</style>"
            f'<rect width="{self.width}" height="{height}" rx="6" fill="#ffffff" stroke="#d0d7de"/>'
            + "".join(self.parts)
            + "</svg>"
        )


def _truncate(text: str, width: int) -> str:
    out, used = [], 0
    for ch in text:
        w = columns(ch)
        if used + w > width:
            break
        out.append(ch)
        used += w
    return "".join(out)


def unseen_colours() -> tuple[str, str]:
    """Background and text colour of a token the selected target cannot see (NaN score).

    Example:
        >>> unseen_colours()
        ('#f7f7f7', '#8c959f')
    """
    return hex_colour((247, 247, 247)), "#8c959f"
