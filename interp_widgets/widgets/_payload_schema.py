"""The schema of the ``application/vnd.interp-widgets.v1+json`` payloads (:mod:`interp_widgets.widgets._mime`), generated
from the view classes: the committed ``js/src/lib/view_schema.json`` that ``js/src/lib/payload.js`` checks saved outputs
against is :func:`schema_json`, and ``js/src/lib/view_traits.js``, each view's data typedef and ``DATA_TRAITS`` list
for the front ends, is :func:`traits_js` (``python scripts/view_schema.py`` writes both; a test checks they are
current).

Example:
    >>> payload_schema()["views"]["monitor"]["data"]["checkpoint"]
    'bytes'
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import traitlets

from interp_widgets.widgets.view_data import VIEW_DATA, data_fields
from interp_widgets.widgets._base import InterpWidget
from interp_widgets.widgets._mime import FORMAT, MIME_TYPE, WIRE_DTYPES, json_value, state_trait_names
from interp_widgets.widgets._traits import BinaryArray

__all__ = ["payload_schema", "schema_json", "trait_schema", "traits_js", "view_schema"]


def trait_schema(trait: traitlets.TraitType, where: str = "trait") -> Any:
    """The payload type of one synced trait: ``"str"``, ``"int"``, ``"num"`` (``null`` reads as NaN), ``"bool"``,
    ``"bytes"``, ``{"list": T}``, ``{"nullable": T}``, or ``{"array": [dtypes], "ndim": n}`` (``"absent": true``
    when ``{}`` means none). Dict traits have no generic type; their class declares one in ``_payload_schema``, where
    ``{"oneOf": [T, ...]}`` (the first alternative that matches) is also allowed.

    Example:
        >>> trait_schema(traitlets.List(traitlets.Float(allow_none=True)))
        {'list': {'nullable': 'num'}}
        >>> trait_schema(BinaryArray("int", ndim=1))
        {'array': ['int8', 'int16', 'int32'], 'ndim': 1}
    """
    if isinstance(trait, BinaryArray):
        schema: Any = {"array": WIRE_DTYPES[trait.dtype], "ndim": trait.ndim}
        return schema | {"absent": True} if trait.allow_none else schema
    if isinstance(trait, traitlets.Enum):
        schema = {"enum": list(trait.values)}
    elif isinstance(trait, traitlets.Bytes):
        schema = "bytes"
    elif isinstance(trait, traitlets.Bool):
        schema = "bool"
    elif isinstance(trait, traitlets.Int):
        schema = "int"
    elif isinstance(trait, traitlets.Float):
        schema = "num"
    elif isinstance(trait, traitlets.Unicode):
        schema = "str"
    elif isinstance(trait, traitlets.List) and trait._trait is not None:
        schema = {"list": trait_schema(trait._trait, where)}
    else:
        raise TypeError(f"{where} ({type(trait).__name__}) has no payload type; declare it in the class's "
                        "_payload_schema")  # fmt: skip
    return {"nullable": schema} if trait.allow_none else schema


def view_schema(cls: type) -> dict[str, Any]:
    """The payload schema of one view class: ``{"version", "widget", "data": {field: type}, "state": {trait: type},
    "defaults": {"data": ..., "state": ...}}``. ``defaults`` holds the value of every data field that has a default
    in the view-data class and of every state trait, so a payload of an older data version (fields added since) or
    of an older interp-widgets (state traits added since) still reads, as ``ViewData.from_json`` reads it.

    Example:
        >>> from interp_widgets.widgets import GenerationWidget
        >>> spec = view_schema(GenerationWidget)
        >>> spec["state"]["view"], spec["defaults"]["data"]["foil_tokens"], "tokens" in spec["defaults"]["data"]
        ({'enum': ['text', 'heatmap']}, [], False)
    """
    overrides: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        overrides.update(vars(klass).get("_payload_schema", {}))
    traits = cls.class_traits(sync=True)
    schema_class = VIEW_DATA[cls._bundle]

    def typed(name: str) -> Any:
        return overrides[name] if name in overrides else trait_schema(traits[name], f"{cls.__name__}.{name}")

    data_defaults = {}
    for f in data_fields(schema_class):
        if f.field.default is not dataclasses.MISSING:
            data_defaults[f.name] = json_value(f.field.default)
        elif f.field.default_factory is not dataclasses.MISSING:
            data_defaults[f.name] = json_value(f.field.default_factory())

    def data_typed(name: str) -> Any:
        # A field added in a later data version that older payloads lack reads as its default; ``None`` (an array
        # the view treats as absent, such as ``turn_ids`` before version 2) must then pass the check as null.
        schema = typed(name)
        if name in data_defaults and data_defaults[name] is None and not (
                isinstance(schema, dict) and ("nullable" in schema or schema.get("absent"))):  # fmt: skip
            return {"nullable": schema}
        return schema

    state = state_trait_names(cls)
    return {
        "version": schema_class.VERSION,
        "widget": cls.__name__,
        "data": {name: data_typed(name) for name in schema_class.field_names()},
        "state": {name: typed(name) for name in state},
        "defaults": {"data": data_defaults, "state": {name: json_value(traits[name].default()) for name in state}},
    }


def _view_classes() -> list[type]:
    found, stack = [], [InterpWidget]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub.__dict__.get("_bundle") in VIEW_DATA and sub.__module__.startswith("interp_widgets."):
                found.append(sub)
    return sorted(found, key=lambda cls: cls._bundle)


def payload_schema() -> dict[str, Any]:
    """The schema of every view's payload, by view name: what ``js/src/lib/view_schema.json`` holds.

    Example:
        >>> schema = payload_schema()
        >>> schema["format"], sorted(schema["views"])[:2], schema["views"]["token_highlight"]["data"]["tokens"]
        (1, ['attention', 'circuit'], {'list': 'str'})
    """
    return {"format": FORMAT, "mime_type": MIME_TYPE,
            "views": {cls._bundle: view_schema(cls) for cls in _view_classes()}}  # fmt: skip


def schema_json() -> str:
    """:func:`payload_schema` as the text of ``js/src/lib/view_schema.json`` (``python scripts/view_schema.py``
    writes it; a test checks that the committed file is current).

    Example:
        >>> json.loads(schema_json())["mime_type"]
        'application/vnd.interp-widgets.v1+json'
    """
    return json.dumps(payload_schema(), indent=1, sort_keys=True) + "\n"


def _js_type(schema: Any) -> str:
    """The JSDoc type of a payload type (:func:`trait_schema`)."""
    if isinstance(schema, str):
        return {"str": "string", "int": "number", "num": "number", "bool": "boolean",
                "bytes": "DataView | ArrayBuffer | null"}[schema]  # fmt: skip
    if "array" in schema:
        return "BinaryArray"
    if "enum" in schema:
        return " | ".join(json.dumps(value) for value in schema["enum"])
    if "nullable" in schema:
        return f"{_js_type(schema['nullable'])} | null"
    if "oneOf" in schema:
        return " | ".join(_js_type(option) for option in schema["oneOf"])
    if "list" in schema:
        item = _js_type(schema["list"])
        return f"({item})[]" if " | " in item else f"{item}[]"
    if "map" in schema:
        return f"Object<string, {_js_type(schema['map'])}>"
    if "object" in schema:
        required = schema.get("required", list(schema["object"]))
        fields = [
            f"{name}{'' if name in required else '?'}: {_js_type(value)}" for name, value in schema["object"].items()
        ]
        return "{" + ", ".join(fields) + "}"
    raise TypeError(f"no JSDoc type for the payload type {schema!r}")


def _js_description(schema: Any, help_text: str) -> str:
    if isinstance(schema, dict) and "array" in schema:
        absent = "; {} when absent" if schema.get("absent") else ""
        help_text = f"{' | '.join(schema['array'])}, {schema['ndim']}-D{absent}. {help_text}".strip()
    return help_text.replace("*/", "*\\/")


def traits_js() -> str:
    """The text of ``js/src/lib/view_traits.js``: for each view, the JSDoc ``@typedef`` of its data (``<Stem>Data``,
    one ``@property`` per data trait, typed from :func:`payload_schema`, described by the field's help) and its
    ``DATA_TRAITS`` list (``<VIEW>_DATA_TRAITS``), which the view imports instead of declaring them again.

    Example:
        >>> text = traits_js()
        >>> 'export const MONITOR_DATA_TRAITS = ["checkpoint", "checkpoint_schema"];' in text
        True
        >>> "@typedef {object} MonitorData" in text
        True
    """
    lines = [
        "// Generated by `python scripts/view_schema.py` from the view-data classes (interp_widgets/widgets/view_data.py)",
        "// through their payload schema (view_schema.json): do not edit. tests/test_view_traits.py fails when it is stale.",
        "",
        '/** @typedef {import("./codec.js").BinaryArray} BinaryArray */',
    ]
    for view, spec in payload_schema()["views"].items():
        data_class = VIEW_DATA[view]
        helps = {f.name: f.field.metadata.get("help", "") for f in data_fields(data_class)}
        lines += ["", "/**", f" * Data of the {view} view ({data_class.__name__}, version {spec['version']}): the synced data "
                  f"traits of {spec['widget']}.", f" * @typedef {{object}} {data_class.__name__}"]  # fmt: skip
        for name, schema in spec["data"].items():
            description = _js_description(schema, helps[name])
            lines.append(f" * @property {{{_js_type(schema)}}} {name}" + (f"  {description}" if description else ""))
        names = ", ".join(json.dumps(name) for name in spec["data"])
        lines += [" */", f"/** Data traits of the {view} view. @type {{(keyof {data_class.__name__})[]}} */",
                  f"export const {view.upper()}_DATA_TRAITS = [{names}];"]  # fmt: skip
    return "\n".join(lines) + "\n"
