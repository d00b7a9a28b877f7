"""Base class shared by every interp_widgets anywidget (binary array traits are in ``_traits.py``).

Every widget is a thin Python class over one esbuild bundle in ``interp_widgets/static``: synced traits in,
a static HTML fallback for places that run no JavaScript, and a self-contained offline HTML export.

Example:
    >>> from interp_widgets.widgets import TokenHighlightWidget
    >>> issubclass(TokenHighlightWidget, InterpWidget)
    True
"""

from __future__ import annotations

import base64
import difflib
import html
import inspect
from pathlib import Path
from typing import Any, ClassVar

import anywidget
import traitlets

from interp_widgets.widgets.view_data import VIEW_DATA, ViewData
from interp_widgets.widgets._mime import MIME_TYPE, mime_payload
from interp_widgets.widgets._static import BUNDLE_MISSING, STATIC_DIR
from interp_widgets.widgets._svg import SVG_NS, SvgFigure
from interp_widgets.widgets._traits import data_traits
from interp_widgets.validation import check_int

WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
#: A static picture larger than this (UTF-8 bytes of the SVG) is saved as a PNG instead.
MAX_STATIC_SVG_BYTES = 60 * 1024


def static_picture(svg: str) -> tuple[str, str]:
    """The MIME type and data of the static picture for ``svg``: the SVG itself up to
    :data:`MAX_STATIC_SVG_BYTES`, above that a PNG (base64) rasterised offline by vl-convert (a 64-colour palette PNG on white when Pillow is installed).

    Example:
        >>> static_picture('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>')[0]
        'image/svg+xml'
        >>> big = ('<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40">'
        ...        + '<rect width="1" height="1"/>' * 3000 + "</svg>")
        >>> mime, data = static_picture(big)
        >>> mime, base64.b64decode(data)[:8] == b"\\x89PNG\\r\\n\\x1a\\n", len(data) < len(big)
        ('image/png', True, True)
    """
    if len(svg.encode("utf-8")) <= MAX_STATIC_SVG_BYTES:
        return "image/svg+xml", svg
    import vl_convert

    png = vl_convert.svg_to_png(svg, scale=1.0)
    try:  # Pillow (optional) makes a palette PNG on white: flat token colours compress about ten times better
        import io

        from PIL import Image
    except ImportError:
        return "image/png", base64.b64encode(png).decode("ascii")
    image = Image.open(io.BytesIO(png)).convert("RGBA")
    flat = Image.alpha_composite(Image.new("RGBA", image.size, "#ffffff"), image).convert("RGB")
    out = io.BytesIO()
    flat.quantize(colors=64, method=Image.Quantize.FASTOCTREE).save(out, "PNG", optimize=True)
    return "image/png", base64.b64encode(out.getvalue()).decode("ascii")


class InterpWidget(anywidget.AnyWidget):
    """Base of every interp_widgets widget.

    A view declares its data once, as a view-data class (:mod:`interp_widgets.widgets.view_data`), and names it in
    its class statement: ``class MyWidget(InterpWidget, data=MyData)`` makes one synced data trait per field and sets
    ``_bundle`` to ``MyData.VIEW``, the name of its esbuild entry (``js/src/<name>.js``); the class declares only its
    view state. A class without data sets ``_bundle`` itself. The built ``static/<name>.js`` and
    ``static/<name>.css`` become ``_esm`` and ``_css``. Subclasses implement
    :meth:`static_html` (inline styles, escaped text, no script) and ``__repr__``. Setting :attr:`error`
    replaces the view with that message, in the live widget and in the fallback.

    Example:
        >>> class MyWidget(InterpWidget):
        ...     _bundle = "my_widget"
        ...     def static_html(self): return "<div>…</div>"
        >>> MyWidget()  # js/src/my_widget.js is not built yet
        Traceback (most recent call last):
        FileNotFoundError: JS bundle not built; run `npm --prefix js ci && npm --prefix js run build` or reinstall (.../my_widget.js does not exist)
    """

    _bundle: ClassVar[str] = ""
    #: The view-data class whose fields are this view's synced data traits (set by ``data=`` in the class statement).
    _data_class: ClassVar[type[ViewData] | None] = None
    error = traitlets.Unicode("", help="When non-empty, shown instead of the widget.").tag(sync=True)

    def __init_subclass__(cls, data: type[ViewData] | None = None, **kwargs: Any) -> None:
        if data is not None:
            cls._install_data_traits(data)
        bundle = cls.__dict__.get("_bundle")
        if bundle:
            for key, suffix in (("_esm", ".js"), ("_css", ".css")):
                path = STATIC_DIR / f"{bundle}{suffix}"
                if path.is_file():
                    setattr(cls, key, path)  # anywidget turns the Path into watched file contents
        super().__init_subclass__(**kwargs)

    @classmethod
    def _install_data_traits(cls, data: type[ViewData]) -> None:
        """Declare the view's data once, in its view-data class: ``class MyWidget(InterpWidget, data=MyData)`` sets
        ``_bundle`` to ``MyData.VIEW`` and adds one synced data trait per field (:func:`~interp_widgets.widgets.
        _traits.data_traits`). Runs before traitlets sets the class up, which then sees them as declared traits."""
        bundle = cls.__dict__.get("_bundle", data.VIEW)
        if bundle != data.VIEW:
            raise TypeError(
                f"{cls.__name__}._bundle is {bundle!r} but its data {data.__name__} is the {data.VIEW!r} view"
            )
        cls._bundle, cls._data_class = data.VIEW, data
        for name, trait in data_traits(data).items():
            if name in cls.__dict__:
                raise TypeError(f"{cls.__name__} declares {name!r}, a field of its data {data.__name__}; its trait is "
                                "made from that field, so remove the declaration from the class")  # fmt: skip
            setattr(cls, name, trait)
            trait.class_init(cls, name)

    def __init__(self, **kwargs: Any) -> None:
        if getattr(type(self), "_esm", None) is None:
            raise FileNotFoundError(f"{BUNDLE_MISSING} ({STATIC_DIR / (self._bundle + '.js')} does not exist)")
        unknown = [name for name in kwargs if name.startswith("_") or not self.has_trait(name)]
        if unknown:  # traitlets would only warn (hidden by default), so a misspelt option would be silently ignored
            raise TypeError(self._unknown_options_message(unknown))
        super().__init__(**kwargs)

    @classmethod
    def valid_options(cls) -> list[str]:
        """The keyword arguments the constructor accepts: its own parameters and the view's public traits.

        Example:
            >>> from interp_widgets.widgets import TokenHighlightWidget
            >>> "shared_scale" in TokenHighlightWidget.valid_options()
            True
        """
        own = [
            p.name for klass in cls.__mro__ if issubclass(klass, InterpWidget) and "__init__" in vars(klass)
            for p in inspect.signature(vars(klass)["__init__"]).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
        ]  # fmt: skip
        base = set(anywidget.AnyWidget.class_trait_names())
        traits = [name for name in cls.class_trait_names() if not name.startswith("_") and name not in base]
        return sorted(set(own) | set(traits))

    def _unknown_options_message(self, unknown: list[str]) -> str:
        valid = self.valid_options()
        hints = [f"{name!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(name, valid, n=1))
                 else repr(name) for name in unknown]  # fmt: skip
        noun = "argument" if len(unknown) == 1 else "arguments"
        return f"{type(self).__name__} got unexpected keyword {noun} {', '.join(hints)}; valid ones are: {', '.join(valid)}"

    def view_data(self) -> ViewData:
        """The data this view draws, in the versioned view-data schema (:mod:`interp_widgets.widgets.view_data`): one field
        per synced data trait. The export page embeds it, so it always matches what the live widget shows.

        Example:
            >>> data = result.widget().view_data()
            >>> data.VIEW, data.VERSION, data.tokens[:3]
            ('token_highlight', 2, ['[CLS]', 'Not', 'bad'])
        """
        schema = self._data_class
        if schema is None:
            raise TypeError(f"{type(self).__name__} has no view data; declare it with `class {type(self).__name__}"
                            "(InterpWidget, data=MyData)`")  # fmt: skip
        return schema.from_traits({name: getattr(self, name) for name in schema.field_names()})

    def static_svg(self) -> str:
        """A standalone SVG picture of the current view (the ``image/svg+xml`` fallback): colours, legend, labels.

        Example:
            >>> result.widget().static_svg()[:4]
            '<svg'
        """
        raise NotImplementedError(f"{type(self).__name__} must implement static_svg()")

    def static_html(self) -> str:
        """HTML for places that run no JavaScript (an export page's ``<noscript>``): inline, escaped, no script.

        The default inlines :meth:`static_svg`; subclasses may return richer HTML.

        Example:
            >>> from interp_widgets.widgets import GenerationWidget  # uses this default
            >>> from interp_widgets.attribution import Saliency
            >>> generation = Saliency().attribute(lm, lm_tokenizer, "The hotel was", max_new_tokens=3)
            >>> GenerationWidget(generation).static_html()[:66]
            '<div class="iw-static" style="max-width:100%;overflow-x:auto"><svg'
        """
        svg = self.static_svg().replace(f' xmlns="{SVG_NS}"', "", 1)
        return f'<div class="iw-static" style="max-width:100%;overflow-x:auto">{svg}</div>'

    def _error_html(self, message: str) -> str:
        return (
            '<div class="iw-static iw-error" role="alert" style="border-left:3px solid #b42318;'
            'padding:4px 10px;color:#b42318;font-family:system-ui,sans-serif">'
            f"<strong>{html.escape(type(self).__name__)} could not be displayed</strong>"
            f'<div style="white-space:pre-wrap">{html.escape(message)}</div></div>'
        )

    def _error_svg(self, message: str) -> str:
        figure = SvgFigure(label=f"{type(self).__name__} could not be displayed")
        figure.text(f"{type(self).__name__} could not be displayed", bold=True, colour="#b42318")
        for line in message.splitlines() or [""]:
            figure.text(line, colour="#b42318")
        return figure.render()

    def _fallback(self, render, error) -> str:
        if self.error:
            return error(self.error)
        try:
            return render()
        except Exception as exc:  # a broken fallback must not stop the live widget from displaying
            return error(f"static view failed: {type(exc).__name__}: {exc}")

    def _fallback_html(self) -> str:
        return self._fallback(self.static_html, self._error_html)

    def _fallback_svg(self) -> str:
        return self._fallback(self.static_svg, self._error_svg)

    def _payload_state(self, names: list[str]) -> dict[str, Any]:
        """The view-state traits ``names`` as the payload of :meth:`mime_payload` carries them (serialised as the
        traits sync them). Views whose front end asks the kernel for more (the concept browser) add it here."""
        return self.get_state(key=names)

    def mime_payload(self, cap: int | None = None) -> dict[str, Any]:
        """The ``application/vnd.interp-widgets.v1+json`` output of this view: its versioned view data and view
        state, from which the ``interp-widgets`` JupyterLab / Notebook 7 extension rebuilds the interactive view when
        no kernel (or no saved widget state) is there. Over ``cap`` bytes (default
        :func:`~interp_widgets.widgets.output_cap`, 1 MiB) it only records what was left out. See
        :mod:`interp_widgets.widgets._mime`.

        Example:
            >>> payload = result.widget().mime_payload()
            >>> payload["view"], payload["data"]["target_labels"], payload["state"]["selected_target"]
            ('token_highlight', ['positive'], 0)
        """
        return mime_payload(self, cap)

    def _payload_or_error(self) -> dict[str, Any]:
        try:
            return self.mime_payload()
        except Exception as exc:  # a broken payload must not stop the live widget from displaying
            return {"format": 1, "view": self._bundle, "version": VIEW_DATA[self._bundle].VERSION,
                    "widget": type(self).__name__, "failed": f"{type(exc).__name__}: {exc}"}  # fmt: skip

    def _repr_mimebundle_(self, **kwargs: Any):
        """Widget view first, then the static picture (an SVG, or a PNG when the SVG exceeds
        :data:`MAX_STATIC_SVG_BYTES`; see :func:`static_picture`), the view's data as
        ``application/vnd.interp-widgets.v1+json`` (:meth:`mime_payload`, rendered by the ``interp-widgets``
        JupyterLab extension when the live widget is gone) and a text summary.

        No ``text/html``: nbconvert prefers it over images, and ``--sanitize-html`` (nbviewer-style rendering) and
        GitHub strip its inline styles, which would leave uncoloured tokens. The SVG is embedded as an image by
        nbconvert (sanitised or not), GitHub and nbviewer. :meth:`static_html` remains available for pages.

        Example:
            >>> data, metadata = result.widget()._repr_mimebundle_()
            >>> list(data)
            ['application/vnd.jupyter.widget-view+json', 'image/svg+xml', 'application/vnd.interp-widgets.v1+json', 'text/plain']
        """
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle
        mime, picture = static_picture(self._fallback_svg())
        ordered = {WIDGET_VIEW_MIME: data[WIDGET_VIEW_MIME], mime: picture, MIME_TYPE: self._payload_or_error()}
        ordered.update((key, value) for key, value in data.items() if key not in ordered)
        return ordered, metadata

    def to_html(self, title: str | None = None) -> str:
        """One self-contained offline HTML page rendering this widget (no kernel, no CDN, no network).

        Example:
            >>> page = result.widget().to_html(title="Why positive?")
            >>> page.startswith("<!DOCTYPE html>"), "<title>Why positive?</title>" in page
            (True, True)
        """
        from interp_widgets.widgets.export import html_page

        return html_page([self], title=title or type(self).__name__)

    def export_html(self, path: str | Path, title: str | None = None) -> Path:
        """Write :meth:`to_html` to ``path`` (UTF-8) and return the path.

        Example:
            >>> path = result.widget().export_html(getfixture("tmp_path") / "explanation.html")
            >>> path.name, path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
            ('explanation.html', True)
        """
        path = Path(path)
        path.write_text(self.to_html(title=title), encoding="utf-8")
        return path


class PagedList(traitlets.HasTraits):
    """Traits of list views shown page by page (mixed into a widget class): ``page`` (0-based) and ``page_size``,
    both synced both ways and checked here. A class may cap the page size with ``max_page_size``.

    Example:
        >>> from interp_widgets.widgets import ExampleListWidget
        >>> issubclass(ExampleListWidget, PagedList)
        True
    """

    max_page_size: ClassVar[int | None] = None

    page = traitlets.Int(0, help="Page of the list shown (0-based).").tag(sync=True)
    page_size = traitlets.Int(10, help="Items per page.").tag(sync=True)

    @traitlets.validate("page_size")
    def _check_page_size(self, proposal):
        value, top = proposal["value"], self.max_page_size
        if value < 1 or (top is not None and value > top):
            limit = "at least 1" if top is None else f"in 1..{top}"
            raise ValueError(f"page_size must be {limit}, got {value}")
        return value

    @traitlets.validate("page")
    def _check_page(self, proposal):
        return check_int("page", proposal["value"], minimum=0)
