"""The versioned view-data schema: what each view draws, as one dataclass per view, and its binary wire format.

Each dataclass (:class:`TokenHighlightData`, :class:`GenerationData`, :class:`ComparisonData`,
:class:`ExampleListData`, :class:`ConceptBrowserData`, :class:`MonitorData`, :class:`AttentionData`,
:class:`LensData`) has a ``VIEW`` name (the bundle) and a format ``VERSION``; its data fields are exactly the view's
synced data traits. Views compose shared parts (dataclass fields such as :class:`TokenLayoutPart`, the one
declaration of a token view's tokens, or :class:`ScoringPart`) whose fields travel flat, under their own names, and
read flat too (``data.tokens`` is ``data.layout.tokens``); :meth:`ViewData.from_flat` builds a view's data from the
flat names. The widget constructor sets its traits from
:meth:`ViewData.to_traits`, the offline export page embeds :meth:`ViewData.to_state` (the same payloads the traits
send), and :meth:`ViewData.to_json` / :meth:`ViewData.from_json` give a JSON form for saved payloads, so the three
cannot drift apart. Arrays travel as ``{"dtype", "shape", "data"}`` (:func:`array_to_buffer`), which
``js/src/lib/codec.js`` decodes; the dataclasses coerce them to the wire dtypes on construction.

It belongs to the views (``widgets``), the only package that uses it; it imports numpy and nothing else of the package.

Example:
    >>> data = TokenHighlightData.from_flat(tokens=["Hi", "!"], spaces_before=["", ""], special_mask=[False, False],
    ...                                     word_ids=[0, 1], sentence_ids=[0, 0], scores=[[0.5, -0.1]],
    ...                                     target_labels=["pos"])
    >>> data.scoring.scores.dtype, data.layout.word_ids.dtype
    (dtype('float32'), dtype('int8'))
    >>> TokenHighlightData.from_json(data.to_json()).target_labels
    ['pos']
"""

from __future__ import annotations

import base64
import dataclasses
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np

__all__ = [
    "CircuitData", "CircuitEdgesPart", "CircuitNodesPart",
    "AttentionData", "ComparisonData", "ConceptBrowserData", "ExampleListData", "GenerationData", "LensData", "MonitorData",
    "TokenHighlightData",
    "ConceptTextsPart", "ExamplesLayoutPart", "LabelScoresPart", "FoilsPart", "GenerationLayoutPart", "GenerationStepsPart", "LensTargetsPart",
    "LensTopPart", "PinnedHeadsPart", "ScoringPart", "TargetsPart", "TokenLayoutPart",
    "ARRAY_DTYPES", "TEXT_TOP", "VIEW_DATA", "DataField", "ViewData", "array_to_buffer", "buffer_to_array", "coerce_array",
    "data_field", "data_fields", "narrowest_ints",
]  # fmt: skip

# dtype sent to JS for each numpy dtype kind we accept; anything wider is narrowed (float64 -> float32 etc.).
_WIRE_DTYPES = {
    "float16": "float32",
    "float32": "float32",
    "float64": "float32",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int32",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint32",
    "bool": "bool",
}


def _to_numpy(array: Any) -> np.ndarray:
    if hasattr(array, "detach") and hasattr(array, "cpu"):  # a torch.Tensor, without importing torch
        tensor = array.detach().cpu()
        if tensor.is_floating_point():
            tensor = tensor.float()  # also covers bfloat16, which numpy cannot hold
        return tensor.numpy()
    return np.asarray(array)


def array_to_buffer(array: Any) -> dict[str, Any]:
    """Serialise a numpy array or torch tensor for a synced trait: ``{"dtype", "shape", "data": memoryview}``.

    Floats become little-endian float32, 64-bit integers int32 (values must fit), bools one byte each, all
    C-contiguous. The bytes are a copy, so later changes to ``array`` do not leak into the widget.

    Example:
        >>> array_to_buffer(np.array([True, False]))["dtype"]
        'bool'
    """
    arr = _to_numpy(array)
    wire = _WIRE_DTYPES.get(arr.dtype.name)
    if wire is None:
        raise TypeError(
            f"cannot send an array of dtype {arr.dtype} to the browser; convert it to a float, int or bool array"
        )
    if wire == "int32" and arr.dtype.itemsize == 8 and arr.size:
        low, high = int(arr.min()), int(arr.max())
        if low < np.iinfo(np.int32).min or high > np.iinfo(np.int32).max:
            raise ValueError(f"integer values {low}..{high} do not fit in int32, the widgets' integer format")
    if wire == "uint32" and arr.size and int(arr.max()) > np.iinfo(np.uint32).max:
        raise ValueError(f"integer values up to {int(arr.max())} do not fit in uint32")
    numpy_wire = np.dtype("uint8" if wire == "bool" else wire).newbyteorder("<")
    out = np.ascontiguousarray(arr, dtype=numpy_wire)
    return {"dtype": wire, "shape": list(out.shape), "data": memoryview(out.tobytes())}


def buffer_to_array(payload: dict[str, Any] | np.ndarray) -> np.ndarray:
    """Inverse of :func:`array_to_buffer` (a read-only numpy view of the payload's bytes).

    An array is returned as it is: the value of a :class:`BinaryArray` trait (``widget.scores``) already is one.

    Example:
        >>> buffer_to_array(array_to_buffer(np.eye(2))).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    if isinstance(payload, np.ndarray):
        return payload
    dtype = np.dtype("uint8" if payload["dtype"] == "bool" else payload["dtype"]).newbyteorder("<")
    values = np.frombuffer(payload["data"], dtype=dtype).reshape(payload["shape"])
    return values.astype(bool) if payload["dtype"] == "bool" else values


def narrowest_ints(values: Any) -> np.ndarray:
    """``values`` as the narrowest of int8, int16 and int32 that holds them (ids travel in fewer bytes).

    Example:
        >>> narrowest_ints(np.array([-1, 0, 300])).dtype
        dtype('int16')
    """
    values = np.asarray(values, dtype=np.int64)
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if values.size == 0 or (values.min() >= info.min and values.max() <= info.max):
            return values.astype(dtype)
    raise ValueError(f"integer values {values.min()}..{values.max()} do not fit in int32, the widgets' integer format")


ARRAY_DTYPES = ("float32", "int32", "bool", "int")


def coerce_array(value: Any, dtype: str, ndim: int, *, finite: bool = False, name: str = "array") -> np.ndarray:
    """``value`` as a read-only C-contiguous copy in the wire ``dtype`` (``"float32"``, ``"int32"``, ``"bool"``, or
    ``"int"``: the narrowest of int8/int16/int32), with ``ndim`` dimensions; ``finite`` rejects infinity (NaN stays:
    "not seen"). Raises ValueError naming ``name``.

    Example:
        >>> coerce_array([1, 300], "int", 1).dtype
        dtype('int16')
        >>> coerce_array([1.0, float("inf")], "float32", 1, finite=True, name="scores")
        Traceback (most recent call last):
        ...
        ValueError: scores contain infinity; check the attribution (NaN is allowed and means 'not seen')
    """
    if dtype not in ARRAY_DTYPES:
        raise ValueError(f"dtype must be one of {ARRAY_DTYPES}, got {dtype!r}")
    try:
        array = _to_numpy(value)
    except Exception as exc:
        raise ValueError(f"{name} must be array-like, got {type(value).__name__} ({exc})") from None
    if array.dtype == object:
        raise ValueError(f"{name} must hold numbers, got {type(value).__name__} of objects")
    if array.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {array.shape}")
    try:
        if dtype == "int":
            array = narrowest_ints(array)
        elif dtype == "int32":
            array = narrowest_ints(array).astype(np.int32)
        else:
            array = array.astype(dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: {exc}") from None
    if finite and np.isinf(array).any():
        raise ValueError(f"{name} contain infinity; check the attribution (NaN is allowed and means 'not seen')")
    array = np.ascontiguousarray(array)  # astype above copied, so the caller's array is never shared
    array.setflags(write=False)
    return array


def data_field(
    help: str = "",
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    trait_default: Any = MISSING,
    trait_allow_none: bool | None = None,
) -> Any:
    """A view-data field that also says what its synced trait needs beyond the annotation (a ``dataclasses.field``).

    Args:
        help: the trait's help text.
        default, default_factory: the field's default, as for ``dataclasses.field``.
        trait_default: the trait's default where the field is required (a widget built with no data shows it);
            without it a required field's trait defaults to its type's empty value (``""``, ``0``, ``[]``, an
            empty array).
        trait_allow_none: whether the trait takes ``None``, where that differs from the annotation (an array
            field that is ``None`` only in payloads older than its version, while every widget sends an array).

    Example:
        >>> @dataclass
        ... class Tiny(ViewData):
        ...     kind: str = data_field("What is drawn.", trait_default="self")
        >>> dataclasses.fields(Tiny)[0].metadata["trait_default"]
        'self'
    """
    metadata: dict[str, Any] = {"help": help}
    if trait_default is not MISSING:
        metadata["trait_default"] = trait_default
    if trait_allow_none is not None:
        metadata["trait_allow_none"] = trait_allow_none
    return field(default=default, default_factory=default_factory, metadata=metadata)


class DataField(NamedTuple):
    """One synced data field of a view: its (flat) name, resolved annotation, ``dataclasses.Field``, the
    ``(dtype, ndim, finite)`` spec of an array field (else None) and the path of dataclass fields that holds it
    (``("name",)`` for a field of the view-data class itself)."""

    name: str
    annotation: Any
    field: dataclasses.Field
    array: tuple[str, int, bool] | None
    path: tuple[str, ...]


def data_fields(cls: type) -> list[DataField]:
    """The synced data fields of a view-data class, in order. A field whose annotation is itself a dataclass (a part
    several views share) is flattened into its own fields, under their own names, so the wire format stays flat; an
    array spec comes from the part's ``ARRAYS`` or else the view's.

    Example:
        >>> [(f.name, f.array) for f in data_fields(MonitorData)]
        [('checkpoint', None), ('checkpoint_schema', None)]
    """

    def walk(klass: type, arrays: dict[str, Any], prefix: tuple[str, ...]) -> list[DataField]:
        hints = typing.get_type_hints(klass)
        found = []
        for f in dataclasses.fields(klass):
            annotation = hints[f.name]
            if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
                found.extend(walk(annotation, {**arrays, **getattr(annotation, "ARRAYS", {})}, (*prefix, f.name)))
            else:
                found.append(DataField(f.name, annotation, f, arrays.get(f.name), (*prefix, f.name)))
        return found

    if cls not in _DATA_FIELDS:
        fields = walk(cls, dict(getattr(cls, "ARRAYS", {})), ())
        names = [f.name for f in fields]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise TypeError(
                f"{cls.__name__} has the data fields {twice} twice (a flattened part repeats them); rename one"
            )
        _DATA_FIELDS[cls] = tuple(fields)
    return list(_DATA_FIELDS[cls])


_DATA_FIELDS: dict[type, tuple[DataField, ...]] = {}


def _part_paths(cls: type) -> dict[str, tuple[str, ...]]:
    """``{name: path}`` of the data fields of ``cls`` that live in a part (a path longer than the name)."""
    if cls not in _PART_PATHS:
        _PART_PATHS[cls] = {f.name: f.path for f in data_fields(cls) if len(f.path) > 1}
    return _PART_PATHS[cls]


_PART_PATHS: dict[type, dict[str, tuple[str, ...]]] = {}


def _encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        payload = array_to_buffer(value)
        return {**payload, "data": base64.b64encode(bytes(payload["data"])).decode("ascii")}
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    return value


@dataclass
class ViewData:
    """Base of the view-data dataclasses: the fields are the view's synced data traits.

    ``ARRAYS`` maps each array field to ``(dtype, ndim, finite)``, the spec of its ``BinaryArray`` trait (a part
    carries the specs of its own arrays; :meth:`array_specs` gathers them all); array fields, the parts' included, are
    coerced on construction, so the data holds what the browser receives.

    Example:
        >>> sorted(VIEW_DATA)
        ['attention', 'circuit', 'comparison', 'concept_browser', 'example_list', 'generation', 'lens', 'monitor', 'patching', 'steering', 'token_highlight']
    """

    VIEW: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {}

    def __post_init__(self) -> None:
        for f in data_fields(type(self)):
            if f.array is None:
                continue
            owner: Any = self
            for step in f.path[:-1]:
                owner = getattr(owner, step)
            value = getattr(owner, f.name)
            if value is not None:
                dtype, ndim, finite = f.array
                setattr(owner, f.name, coerce_array(value, dtype, ndim, finite=finite, name=f.name))

    @classmethod
    def field_names(cls) -> list[str]:
        """The names of the data fields (= the view's synced data traits).

        Example:
            >>> GenerationData.field_names()[:3]
            ['tokens', 'spaces_before', 'special_mask']
        """
        return [f.name for f in data_fields(cls)]

    @classmethod
    def array_specs(cls) -> dict[str, tuple[str, int, bool]]:
        """``{name: (dtype, ndim, finite)}`` of every array data field, the parts' included (the specs of the view's
        ``BinaryArray`` traits).

        Example:
            >>> TokenHighlightData.array_specs()["scores"], ExampleListData.array_specs()["scores"]
            (('float32', 2, True), ('float32', 1, True))
        """
        return {f.name: f.array for f in data_fields(cls) if f.array is not None}

    @classmethod
    def from_traits(cls, values: dict[str, Any]) -> "ViewData":
        """The view data from its flat trait values (by trait name), the inverse of :meth:`to_traits`: the fields of
        a part (a dataclass field) are gathered back into it. A name that is no data field is refused.

        Example:
            >>> MonitorData.from_traits({"checkpoint": b"", "checkpoint_schema": {"series": [], "rows": 0}}).VIEW
            'monitor'
        """
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ValueError(f"unknown {cls.VIEW} fields {unknown}; expected {cls.field_names()}")
        parts = {f.path[:i] for f in data_fields(cls) for i in range(1, len(f.path))}  # paths of the part fields

        def build(klass: type, prefix: tuple[str, ...]) -> Any:
            kwargs = {}
            for f in dataclasses.fields(klass):
                path = (*prefix, f.name)
                if path in parts:
                    kwargs[f.name] = build(typing.get_type_hints(klass)[f.name], path)
                elif f.name in values:
                    kwargs[f.name] = values[f.name]
            return klass(**kwargs)

        return build(cls, ())

    @classmethod
    def from_flat(cls, **values: Any) -> "ViewData":
        """The view data from flat values by field (trait) name, its parts gathered from their fields: the keyword
        form of :meth:`from_traits`.

        Example:
            >>> data = ComparisonData.from_flat(tokens=["a"], spaces_before=[""], special_mask=[False], word_ids=[0],
            ...                                 sentence_ids=[0], scores=[[1.0]], methods=["m"], signed=[True])
            >>> type(data.layout).__name__, data.tokens
            ('TokenLayoutPart', ['a'])
        """
        return cls.from_traits(values)

    def __getattr__(self, name: str) -> Any:
        # Only reached when ordinary lookup fails: a part's field reads flat (``data.tokens`` is
        # ``data.layout.tokens``), read-only.
        path = _part_paths(type(self)).get(name)
        if path is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value: Any = self
        for step in path:
            value = getattr(value, step)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        path = _part_paths(type(self)).get(name)
        if path is not None:
            raise AttributeError(f"{name} is a field of the part {path[0]!r} and reads flat only; set "
                                 f"data.{'.'.join(path)} instead")  # fmt: skip
        super().__setattr__(name, value)

    def to_traits(self) -> dict[str, Any]:
        """The trait values, by trait name (arrays as numpy arrays; the traits serialise them).

        Example:
            >>> data = TokenHighlightData.from_flat(tokens=["Hi", "!"], spaces_before=["", ""], special_mask=[0, 0],
            ...                                     word_ids=[0, 1], sentence_ids=[0, 0], scores=[[0.5, -0.1]])
            >>> traits = data.to_traits()  # a widget's constructor passes these to its traits
            >>> list(traits)[:4], traits["scores"]
            (['tokens', 'spaces_before', 'special_mask', 'word_ids'], array([[ 0.5, -0.1]], dtype=float32))
        """
        values = {}
        for f in data_fields(type(self)):
            value: Any = self
            for step in f.path:
                value = getattr(value, step)
            values[f.name] = value
        return values

    def to_state(self) -> dict[str, Any]:
        """The synced state as the traits send it: arrays as ``{"dtype", "shape", "data": memoryview}`` payloads.

        Example:
            >>> TokenHighlightData.from_flat(tokens=["a"], spaces_before=[""], special_mask=[False], word_ids=[0],
            ...                              sentence_ids=[0], scores=[[1.0]]).to_state()["scores"]["shape"]
            [1, 1]
        """
        arrays = {f.name for f in data_fields(type(self)) if f.array is not None}
        return {name: array_to_buffer(value) if isinstance(value, np.ndarray) else {} if name in arrays else value
                for name, value in self.to_traits().items()}  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """A JSON-able payload ``{"view", "version", "data"}``; arrays and bytes carry their bytes as base64.

        Example:
            >>> MonitorData(checkpoint=b"\\x00", checkpoint_schema={"series": [], "rows": 0}).to_json()["view"]
            'monitor'
        """
        return {"view": self.VIEW, "version": self.VERSION,
                "data": {name: _encode(value) for name, value in self.to_traits().items()}}  # fmt: skip

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> "ViewData":
        """Inverse of :meth:`to_json`; a payload of another view or of a newer format version is refused.

        Example:
            >>> GenerationData.from_json({"view": "monitor", "version": 1, "data": {}})
            Traceback (most recent call last):
            ...
            ValueError: this payload holds 'monitor' view data, not 'generation'
        """
        if payload.get("view") != cls.VIEW:
            raise ValueError(f"this payload holds {payload.get('view')!r} view data, not {cls.VIEW!r}")
        if not isinstance(payload.get("version"), int) or payload["version"] > cls.VERSION:
            raise ValueError(
                f"{cls.VIEW} view data has format version {payload.get('version')!r}; this version of "
                f"interp_widgets reads up to {cls.VERSION} (upgrade interp_widgets)"
            )
        data = dict(payload["data"])
        for name, value in data.items():
            if isinstance(value, dict) and set(value) == {"dtype", "shape", "data"}:
                data[name] = buffer_to_array({**value, "data": base64.b64decode(value["data"])})
            elif isinstance(value, dict) and set(value) == {"base64"}:
                data[name] = base64.b64decode(value["base64"])
        return cls.from_traits(data)


#: Concepts listed per token of an input text in the concept browser.
TEXT_TOP = 5

# The help of the fields that two parts share (a generation's word and sentence ids are optional: see
# GenerationLayoutPart).
_WORD_IDS_HELP = "Word id per token (-1: none), int8/int16/int32 (narrowest)."
_SENTENCE_IDS_HELP = "Sentence id per token (-1: none), int8/int16/int32 (narrowest)."
_LAYOUT_ARRAYS = {"special_mask": ("bool", 1, False), "word_ids": ("int", 1, False), "sentence_ids": ("int", 1, False),
                  "turn_ids": ("int", 1, False)}  # fmt: skip


@dataclass
class TokenLayoutPart:
    """The tokens of one text as a token view draws them, a part of :class:`TokenHighlightData` and
    :class:`ComparisonData` (:class:`GenerationLayoutPart` in :class:`GenerationData`): the text of each token, the
    original text before it, the special tokens, the word, sentence and turn of every token, and the role of each turn
    of a chat conversation (a plain text is one turn without a role: no turn ids, no roles).

    Example:
        >>> data = TokenHighlightData.from_flat(tokens=["Hi", "!"], spaces_before=["", ""], special_mask=[0, 0],
        ...                                     word_ids=[0, 1], sentence_ids=[0, 0], scores=[[0.5, -0.1]])
        >>> data.layout.special_mask.dtype, data.layout.turn_ids, data.tokens  # its fields read flat too
        (dtype('bool'), None, ['Hi', '!'])
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = _LAYOUT_ARRAYS

    tokens: list[str] = data_field("Text of each token (special tokens by name).")
    spaces_before: list[str] = data_field("Original text between a token and the previous one.")
    special_mask: np.ndarray = data_field("True for each special token.")
    word_ids: np.ndarray = data_field(_WORD_IDS_HELP)
    sentence_ids: np.ndarray = data_field(_SENTENCE_IDS_HELP)
    turn_ids: np.ndarray | None = data_field(
        "Turn (chat message) of each token (-1: none), narrowest int; None for a plain text (one turn, no role).",
        default=None,
    )
    turn_roles: list[str] = data_field(
        "Role of each turn ('system', 'user', ...); empty for a plain text.", default_factory=list
    )


@dataclass
class GenerationLayoutPart(TokenLayoutPart):
    """The token layout of a generation (:class:`GenerationData`): word and sentence ids came with its version 4, so
    older payloads load with them None (token granularity), while every widget sends them.

    Example:
        >>> GenerationLayoutPart(tokens=["a"], spaces_before=[""], special_mask=[False]).word_ids is None
        True
    """

    word_ids: np.ndarray | None = data_field(_WORD_IDS_HELP, default=None, trait_allow_none=False)
    sentence_ids: np.ndarray | None = data_field(_SENTENCE_IDS_HELP, default=None, trait_allow_none=False)


@dataclass
class ExamplesLayoutPart:
    """The token layouts of many examples (:class:`ExampleListData`): the texts per example (``tokens[i]`` gives
    example ``i``'s length), the per-token arrays of all examples concatenated, and the roles of each example's chat
    turns (empty for a plain text).

    Example:
        >>> sorted(ExamplesLayoutPart.ARRAYS) == sorted(TokenLayoutPart.ARRAYS)  # the same arrays, concatenated
        True
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = _LAYOUT_ARRAYS

    tokens: list[list[str]] = data_field("Tokens of each example.")
    spaces_before: list[list[str]] = data_field("Original text before each token, per example.")
    special_mask: np.ndarray = data_field("True per special token of all examples concatenated.")
    word_ids: np.ndarray = data_field("Word id per token of all examples concatenated (-1: none).")
    sentence_ids: np.ndarray = data_field("Sentence id per token of all examples concatenated (-1: none).")
    turn_ids: np.ndarray | None = data_field(
        "Chat turn per token of all examples concatenated (-1: none).", default=None, trait_allow_none=False
    )
    turn_roles: list[list[str]] = data_field(
        "Roles of each example's turns (empty for a plain text).", default_factory=list
    )


@dataclass
class ScoringPart:
    """The score matrix of a token view and what its numbers are: one row per target (or generated step) and token,
    the method that made them, what a score means and whether it is signed.

    Example:
        >>> ScoringPart.ARRAYS["scores"]
        ('float32', 2, True)
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {"scores": ("float32", 2, True)}

    scores: np.ndarray = data_field("(rows, n_tokens) scores; NaN = not seen.")
    method: str = data_field("The attribution method.", default="")
    score_meaning: str = data_field("What a score is, e.g. 'sum over embedding dimension (signed)'.", default="")
    signed: bool = data_field(
        "Signed scores use the diverging scale; unsigned (e.g. a norm) the 0..max one.", default=True
    )


@dataclass
class TargetsPart:
    """The targets of the score rows (:class:`TokenHighlightData`): a label per row and, when known, the predicted
    probability and the completeness error of each.

    Example:
        >>> TargetsPart(["pos"]).target_probs
        []
    """

    target_labels: list[str] = data_field("Label of each row of scores.", default_factory=list)
    target_probs: list[float | None] = data_field("Predicted probability per target, or empty.", default_factory=list)
    completeness_error: list[float | None] = data_field("Per target, or empty.", default_factory=list)


@dataclass
class GenerationStepsPart:
    """What a generation generated (:class:`GenerationData`): its tokens, and per step (row of scores) the token
    generated and its probability.

    Example:
        >>> GenerationStepsPart.ARRAYS["generated_mask"]
        ('bool', 1, False)
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {"generated_mask": ("bool", 1, False)}

    generated_mask: np.ndarray = data_field("True for each generated token.")
    step_tokens: list[int] = data_field("Token index of the token generated at each step.")
    step_probs: list[float | None] = data_field("Probability of each generated token.", default_factory=list)


@dataclass
class FoilsPart:
    """The contrast of a contrastive generation (:class:`GenerationData`): the foil of every step, its probability
    and the foil continuation; empty without a contrast.

    Example:
        >>> FoilsPart().contrast
        ''
    """

    foil_tokens: list[str] = data_field("Foil of each step (contrastive results; else empty).", default_factory=list)
    foil_probs: list[float | None] = data_field("Probability of each step's foil.", default_factory=list)
    contrast: str = data_field("The foil continuation ('' without a contrast).", default="")


@dataclass
class TokenHighlightData(ViewData):
    """What :class:`~interp_widgets.widgets.TokenHighlightWidget` draws: one text's tokens (their layout, with word /
    sentence / turn ids for the browser's sums and the roles of a chat conversation's turns) and a (targets, tokens)
    score matrix with its targets.

    Version 2 added ``turn_ids`` and ``turn_roles``.

    Example:
        >>> TokenHighlightData.VIEW, TokenHighlightData.VERSION
        ('token_highlight', 2)
    """

    VIEW: ClassVar[str] = "token_highlight"
    VERSION: ClassVar[int] = 2

    layout: TokenLayoutPart
    scoring: ScoringPart
    targets: TargetsPart = field(default_factory=TargetsPart)


@dataclass
class GenerationData(ViewData):
    """What :class:`~interp_widgets.widgets.GenerationWidget` draws: prompt and generated tokens, one row of scores per
    generated token (``step_tokens[s]`` is the token generated at step ``s``). ``word_ids`` and ``sentence_ids``
    group the tokens for the view's granularity; an encoder–decoder result's ``source_mask`` marks its source
    tokens (the rest are the decoder's), and its units never span the two sides. A contrastive result also has the foil
    of every step (``foil_tokens[s]``, ``foil_probs[s]``) and the foil continuation (``contrast``); its scores explain
    ``score(target) − score(foil)``. Without a contrast these are empty. For a chat conversation, the turn of every
    token and the role of each turn (empty for a plain text).

    Example:
        >>> GenerationData.array_specs()["generated_mask"], GenerationData.field_names()[7:9]
        (('bool', 1, False), ['generated_mask', 'step_tokens'])
    """

    VIEW: ClassVar[str] = "generation"
    # 2: foil_tokens, foil_probs and contrast; 3: turn_ids and turn_roles (older load empty)
    # 4: word_ids, sentence_ids (granularity on each side) and source_mask (encoder–decoder results: True for the
    #    source tokens); older payloads load with them None (token granularity, one side)
    VERSION: ClassVar[int] = 4
    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {"source_mask": ("bool", 1, False)}

    layout: GenerationLayoutPart
    steps: GenerationStepsPart
    scoring: ScoringPart
    foils: FoilsPart = field(default_factory=FoilsPart)
    source_mask: np.ndarray | None = data_field(
        "True for each source token of an encoder–decoder (all False for decoders).",
        default=None,
        trait_allow_none=False,
    )


@dataclass
class ComparisonData(ViewData):
    """What :class:`~interp_widgets.widgets.ComparisonWidget` draws: one text's tokens (their layout; for a chat
    conversation also the turn of every token and the role of each turn, for the role labels), one row of scores per
    method and the pairwise agreement tables per granularity (``{granularity: [{a, b, spearman, top_k_overlap,
    k}]}``).

    Version 2 added ``turn_ids`` and ``turn_roles``.

    Example:
        >>> "agreements" in ComparisonData.field_names(), ComparisonData.VERSION
        (True, 2)
    """

    VIEW: ClassVar[str] = "comparison"
    VERSION: ClassVar[int] = 2
    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {"scores": ("float32", 2, True)}

    layout: TokenLayoutPart
    scores: np.ndarray = data_field("(rows, n_tokens) scores; NaN = not seen.")
    methods: list[str] = data_field("Name of each method (row of scores).")
    signed: list[bool] = data_field("Per method: signed (diverging) or unsigned (sequential).")
    target_label: str = ""
    agreements: dict[str, list[dict[str, Any]]] = data_field(
        "{granularity: pairwise rows {a, b, spearman, top_k_overlap, k}} for token, word and sentence units.",
        default_factory=dict,
    )
    agreement_by: str = "magnitude"


@dataclass
class ExampleListData(ViewData):
    """What :class:`~interp_widgets.widgets.ExampleListWidget` draws: many examples (their layouts, token arrays
    concatenated, with the roles of each chat example's turns) and the scores of each example's predicted class.

    Version 2 added ``turn_ids`` and ``turn_roles``.

    Example:
        >>> ExampleListData.ARRAYS["scores"], ExampleListData.VERSION
        (('float32', 1, True), 2)
    """

    VIEW: ClassVar[str] = "example_list"
    VERSION: ClassVar[int] = 2
    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {"scores": ("float32", 1, True)}

    layout: ExamplesLayoutPart
    scores: np.ndarray = data_field("Scores for each example's shown class, concatenated.")
    predicted: list[str] = data_field("Predicted (most probable) label of each example.")
    confidence: list[float | None] = data_field("Probability of the predicted label.")
    true_labels: list[str] = data_field("True label of each example ('' if unknown).")
    max_attribution: list[float] = data_field("Largest |score| of each example (special tokens excluded).")
    signed: bool = True
    method: str = ""


@dataclass
class ConceptTextsPart:
    """The input texts of the concept browser (:class:`ConceptBrowserData`): the shown tokens of each text, the text
    before each, and the most active concepts of every token (all texts concatenated) with their coefficients.

    Example:
        >>> ConceptTextsPart.ARRAYS["text_top_concepts"]
        ('int32', 2, False)
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {
        "text_top_concepts": ("int32", 2, False), "text_top_values": ("float32", 2, False)}  # fmt: skip

    text_tokens: list[list[str]] = data_field("Shown tokens of each input text.")
    text_gaps: list[list[str]] = data_field("Original text before each token.")
    text_top_concepts: np.ndarray = data_field(f"[tokens of all texts, {TEXT_TOP}] most active concepts (-1 pad).")
    text_top_values: np.ndarray = data_field(f"[tokens of all texts, {TEXT_TOP}] their coefficients.")


@dataclass
class LabelScoresPart:
    """The scores of the concept browser's labels (:class:`ConceptBrowserData`), from
    :func:`~interp_widgets.concepts.score_labels`: each label's detection and fuzzing balanced accuracy (chance 0.5)
    and the scorer that judged them, each score's chance mark (its test of balanced accuracy > 0.5) and the outcome of
    the swapped-label control, which decides whether the marks are shown. Every field has a default: payloads saved
    before these existed have none.

    Example:
        >>> LabelScoresPart.ARRAYS["label_detection"], LabelScoresPart().label_detection
        (('float32', 1, False), None)
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {
        "label_detection": ("float32", 1, False), "label_fuzzing": ("float32", 1, False),
        "label_detection_chance": ("int", 1, False), "label_fuzzing_chance": ("int", 1, False)}  # fmt: skip

    label_detection: np.ndarray | None = data_field(
        "Detection score (balanced accuracy) of each concept's label (NaN: not scored); None when no label is scored.",
        default=None,
    )
    label_fuzzing: np.ndarray | None = data_field(
        "Fuzzing score (balanced accuracy) of each concept's label (NaN: not scored); None when no label is scored.",
        default=None,
    )
    label_scorer: str = data_field("The scorer model that judged the labels (empty: none).", default="")
    label_detection_chance: np.ndarray | None = data_field(
        "Per concept, 1 when its detection score is no better than chance (one-sided test at 0.05), 0 when it is, "
        "-1 when untested; None when no label is scored.",
        default=None,
    )
    label_fuzzing_chance: np.ndarray | None = data_field(
        "Per concept, 1 when its fuzzing score is no better than chance, 0 when it is, -1 when untested; None when no "
        "label is scored.",
        default=None,
    )
    label_control_n: int = data_field("Concepts in the swapped-label control (0: no control run).", default=0)
    label_control_wins: int = data_field("Concepts whose true label outscored the swapped one.", default=0)
    label_control_ties: int = data_field("Concepts where the two labels scored the same (not wins).", default=0)
    label_control_threshold: float = data_field("Fraction of wins the control needs.", default=0.7)
    label_discriminates: bool = data_field(
        "The control passed (wins / concepts ≥ threshold): only then are chance marks shown.", default=False
    )


@dataclass
class ConceptBrowserData(ViewData):
    """What :class:`~interp_widgets.widgets.ConceptBrowser` lists (the per-concept details travel on request): the
    concepts' summaries, the input texts (:class:`ConceptTextsPart`) and the scores of the labels
    (:class:`LabelScoresPart`).

    Example:
        >>> ConceptBrowserData.ARRAYS["density"]
        ('float32', 1, False)
    """

    VIEW: ClassVar[str] = "concept_browser"
    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {
        "density": ("float32", 1, False), "max_activation": ("float32", 1, False),
        "importance": ("float32", 1, False)}  # fmt: skip

    method: str
    layer: str
    n_rows: int = data_field("Rows (tokens or sentences) the concepts were interpreted on.")
    labels: list[str] = data_field("Label of each concept.")
    top_tokens: list[list[str]] = data_field("Distinct top tokens of each concept.")
    density: np.ndarray = data_field("Fraction of rows where each concept is active.")
    max_activation: np.ndarray = data_field("Largest coefficient of each concept.")
    importance: np.ndarray | None = data_field(
        "Importance of each concept (NaN: unknown); None (sent as {}) when absent."
    )
    importance_label: str = data_field("What the importance numbers are.")
    texts: ConceptTextsPart
    label_scores: LabelScoresPart


@dataclass
class MonitorData(ViewData):
    """What :class:`~interp_widgets.widgets.MonitorWidget` draws from its checkpoint: the whole history as bytes (steps
    float64 LE, then each column float32 LE) with its schema ``{"series": names, "rows": n}``; new rows stream as
    messages on top.

    Example:
        >>> MonitorData.field_names()
        ['checkpoint', 'checkpoint_schema']
    """

    VIEW: ClassVar[str] = "monitor"

    checkpoint: bytes = data_field("Whole history: steps float64, then each column float32 (LE).", default=b"")
    checkpoint_schema: dict[str, Any] = data_field(
        "{'series': column names, 'rows': row count} of `checkpoint`.",
        default_factory=lambda: {"series": [], "rows": 0},
    )


@dataclass
class PinnedHeadsPart:
    """The pinned heads of the attention view (:class:`AttentionData`), each kept as the top-k keys of every query
    and their weights.

    Example:
        >>> PinnedHeadsPart.ARRAYS["pinned_keys"]
        ('int', 3, False)
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {
        "pinned_keys": ("int", 3, False), "pinned_weights": ("float32", 3, True)}  # fmt: skip

    pinned: list[dict[str, Any]] = data_field("Pinned heads {layer, head} (head: int or an aggregation).")
    pinned_keys: np.ndarray = data_field("(pinned, queries, k) key index of each kept weight.")
    pinned_weights: np.ndarray = data_field("(pinned, queries, k) the top-k weights.")
    pinned_top_k: int = 32


@dataclass
class AttentionData(ViewData):
    """What :class:`~interp_widgets.widgets.AttentionWidget` keeps: tokens, the model's shape, max-pooled thumbnails of
    every head (0..127) and the pinned heads as their top-k keys per query (:class:`PinnedHeadsPart`). Every other
    head is sent on request.

    Example:
        >>> AttentionData.ARRAYS["thumbnails"]
        ('int', 4, False)
    """

    VIEW: ClassVar[str] = "attention"
    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {
        "generated_mask": ("bool", 1, False), "thumbnails": ("int", 4, False)}  # fmt: skip

    tokens: list[str] = data_field("Query tokens.")
    key_tokens: list[str] = data_field("Key tokens (= tokens for self-attention).")
    generated_mask: np.ndarray = data_field("True for generated tokens.")
    n_layers: int
    n_heads: int
    n_kv_heads: int = data_field(trait_default=1)
    layer_names: list[str]
    kind: str = data_field(trait_default="self")
    model_name: str
    thumbnails: np.ndarray = data_field("(layers, heads, s, s) max-pooled heads, 0..127.")
    pins: PinnedHeadsPart


@dataclass
class LensTopPart:
    """What every cell of the lens view (lens × layer × position) predicts: its top-k tokens (indices into the view's
    ``vocab``) with their probabilities, and the cell's KL divergence from the final output.

    Example:
        >>> LensTopPart.ARRAYS["top_vocab"]
        ('int32', 4, False)
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {
        "top_vocab": ("int32", 4, False), "top_probs": ("float32", 4, True), "kl": ("float32", 3, True)}  # fmt: skip

    top_vocab: np.ndarray = data_field("(lenses, layers, positions, k) indices into vocab.")
    top_probs: np.ndarray
    kl: np.ndarray = data_field("KL(final || lens), nats.")


@dataclass
class LensTargetsPart:
    """The targets of the lens view: a label and tokens (indices into ``vocab``, -1: none) per position, and each
    cell's probability (NaN: no target) and rank (1 = top, 0: no target) of them.

    Example:
        >>> LensTargetsPart.ARRAYS["target_ranks"]
        ('int32', 4, False)
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {
        "target_vocab": ("int32", 2, False), "target_probs": ("float32", 4, True),
        "target_ranks": ("int32", 4, False)}  # fmt: skip

    target_labels: list[str]
    target_vocab: np.ndarray = data_field("(positions, targets) indices into vocab, -1: none.")
    target_probs: np.ndarray
    target_ranks: np.ndarray


@dataclass
class LensData(ViewData):
    """What :class:`~interp_widgets.widgets.LensWidget` draws: ``N`` lenses × ``L`` layers × ``T`` positions.

    ``top_vocab`` ``(N, L, T, k)`` (:class:`LensTopPart`) and ``target_vocab`` ``(T, M)`` (:class:`LensTargetsPart`)
    index ``vocab`` (the decoded text of every token the result mentions; ``-1``: no target); ``top_probs``, ``kl``,
    ``target_probs`` (NaN: no target) and ``target_ranks`` (1 = top, 0: no target) hold the numbers of each cell.

    Example:
        >>> LensData.field_names()[:4]
        ['tokens', 'layers', 'lenses', 'vocab']
    """

    VIEW: ClassVar[str] = "lens"
    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {"generated_mask": ("bool", 1, False)}

    tokens: list[str]
    layers: list[str]
    lenses: list[str]
    vocab: list[str] = data_field("Text of every token the cells mention.")
    top: LensTopPart
    targets: LensTargetsPart
    generated_mask: np.ndarray
    vocab_size: int = 0
    model_name: str = ""


#: Patched cells (all panels together) above which the patching view's data keeps no top-5 tokens: the kernel sends
#: a cell's top-5 when it is clicked (the view says so).
PATCHING_STORED_CELLS = 50_000


@dataclass
class PatchingPanelsPart:
    """The panels of the patching view (:class:`PatchingData`), one per result shown and patched point type: the
    labels of each panel's layers, units (``["stream"]``, heads, KV heads) and positions (empty: the clean tokens),
    and the numbers of every panel's ``(layers, units, positions)`` cells concatenated in C order (panel ``p`` holds
    ``cell_offsets[p]:cell_offsets[p + 1]``). The top-5 next tokens of each patched run (indices into ``vocab``)
    are concatenated the same way by ``top_offsets``; a panel without them (attribution patching, or more than
    :data:`PATCHING_STORED_CELLS` cells, when ``top_note`` says so) has equal offsets.

    Example:
        >>> PatchingPanelsPart.ARRAYS["top_vocab"]
        ('int32', 2, False)
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {
        "cell_offsets": ("int32", 1, False), "values": ("float32", 1, True), "raw": ("float32", 1, True),
        "spread": ("float32", 1, True), "top_offsets": ("int32", 1, False), "top_vocab": ("int32", 2, False),
        "top_probs": ("float32", 2, True)}  # fmt: skip

    panel_points: list[str] = data_field("Patched point type of each panel ('resid_pre', 'head', ...).")
    panel_results: list[int] = data_field("Index (into result_labels) of the result each panel belongs to.")
    panel_layers: list[list[str]] = data_field("Layer labels of each panel.")
    panel_units: list[list[str]] = data_field("Unit labels of each panel (['stream'], heads, KV heads).")
    panel_positions: list[list[str]] = data_field("Position labels of each panel; empty: the clean tokens.")
    cell_offsets: np.ndarray = data_field("(panels + 1,) start of each panel's cells in values / raw / spread.")
    values: np.ndarray = data_field("Normalised metric of every cell (0 = corrupt run, 1 = clean run).")
    raw: np.ndarray = data_field("Raw metric of every cell's patched run.")
    spread: np.ndarray = data_field("Standard deviation over pairs of every cell's normalised value.")
    top_offsets: np.ndarray = data_field("(panels + 1,) start of each panel's rows in top_vocab / top_probs.")
    top_vocab: np.ndarray = data_field("(rows, 5) top next tokens of each patched run, indices into vocab.")
    top_probs: np.ndarray = data_field("(rows, 5) their probabilities.")
    vocab: list[str] = data_field("Text of every token the top-5 lists mention.", default_factory=list)
    top_note: str = data_field("Why some top-5 lists are not stored (they are fetched from the kernel).", default="")


@dataclass
class PatchingRunsPart:
    """The results the patching view shows (one, or an exact and an attribution-patching result side by side): a
    label, method, direction and metric per result and its clean and corrupt metrics.

    Example:
        >>> PatchingRunsPart(result_labels=["exact"]).result_directions
        []
    """

    result_labels: list[str] = data_field("Label of each result shown.")
    result_methods: list[str] = data_field("'exact' or 'attribution', per result.", default_factory=list)
    result_directions: list[str] = data_field("'denoise' or 'noise' (low = important), per result.",
                                              default_factory=list)  # fmt: skip
    result_metrics: list[str] = data_field("Metric name per result ('logit_diff', ...).", default_factory=list)
    clean_metrics: list[float] = data_field("Clean run's metric per result (mean over pairs).", default_factory=list)
    corrupt_metrics: list[float] = data_field("Corrupt run's metric per result (mean over pairs).",
                                              default_factory=list)  # fmt: skip


@dataclass
class PatchingAgreementPart:
    """How far two results shown side by side agree, per patched point type: Spearman's rank correlation and the
    overlap of their top-k cells (None: not computed).

    Example:
        >>> PatchingAgreementPart().agreement_points
        []
    """

    agreement_points: list[str] = data_field("Point types compared.", default_factory=list)
    agreement_spearman: list[float | None] = data_field("Spearman's rho per point type.", default_factory=list)
    agreement_overlap: list[float | None] = data_field("Top-k overlap (0..1) per point type.", default_factory=list)
    agreement_k: int = data_field("The k of the top-k overlap.", default=0)


@dataclass
class PatchingData(ViewData):
    """What :class:`~interp_widgets.widgets.PatchingView` draws: activation (or attribution) patching of a clean /
    corrupt pair as a layers × positions (or layers × heads) heatmap per patched point type
    (:class:`PatchingPanelsPart`), the clean tokens (:class:`TokenLayoutPart`), the corrupt ones, the answer and foil,
    the results shown (:class:`PatchingRunsPart`) and their agreement (:class:`PatchingAgreementPart`).

    Example:
        >>> PatchingData.field_names()[:2], "panel_points" in PatchingData.field_names()
        (['tokens', 'spaces_before'], True)
    """

    VIEW: ClassVar[str] = "patching"

    layout: TokenLayoutPart
    corrupt_tokens: list[str] = data_field("Tokens of the corrupt prompt (same length as the clean one).")
    panels: PatchingPanelsPart = data_field("The heatmaps.")
    runs: PatchingRunsPart = data_field("The results shown.")
    agreement: PatchingAgreementPart = data_field("Agreement of two results.", default_factory=PatchingAgreementPart)
    answer: str = data_field("The answer token.", default="")
    foil: str = data_field("The foil token ('' without one).", default="")
    n_pairs: int = data_field("Clean / corrupt pairs averaged.", default=1)
    model_name: str = ""


@dataclass
class CircuitNodesPart:
    """The nodes of the circuit view (:class:`CircuitData`), in the graph's node order: each node's ``node_kind``
    (0 feature, 1 error, 2 token, 3 logit, 4 lorsa feature), ``node_layer`` (-1 for tokens, ``n_layers + 1`` for
    logits), ``node_pos`` (prompt position), ``node_index`` (the feature index; the token id of a token or logit;
    -1 for an error), its logit ``node_influence`` (what sizes it), its ``node_activation`` (NaN but for features) and
    its label (``""``: none; the view names tokens, logits and errors itself). The node ids follow from these
    (``{layer}_{index}_{pos}``, ``{layer}_-1_{pos}``, ``E_{index}_{pos}``), or are given (``node_ids``) for a file
    whose ids do not.

    Example:
        >>> CircuitNodesPart.ARRAYS["node_kind"]
        ('int', 1, False)
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {
        "node_kind": ("int", 1, False), "node_layer": ("int", 1, False), "node_pos": ("int", 1, False),
        "node_index": ("int32", 1, False), "node_influence": ("float32", 1, True),
        "node_activation": ("float32", 1, True)}  # fmt: skip

    node_kind: np.ndarray = data_field("Kind of each node: 0 feature, 1 error, 2 token, 3 logit, 4 lorsa feature.")
    node_layer: np.ndarray = data_field("Layer of each node (-1: token embeddings, n_layers + 1: logits).")
    node_pos: np.ndarray = data_field("Prompt position of each node.")
    node_index: np.ndarray = data_field("Feature index of a feature, token id of a token or logit, -1 for errors.")
    node_influence: np.ndarray = data_field("Logit influence of each node (its size in the view).")
    node_activation: np.ndarray = data_field("Activation of each feature (NaN for other nodes).")
    node_labels: list[str] = data_field("Label of each node ('' where none is known).", default_factory=list)
    node_ids: list[str] = data_field(
        "Each node's id where the arrays do not give it (a file's own ids); empty: made from the arrays.",
        default_factory=list,
    )


@dataclass
class CircuitEdgesPart:
    """The edges of the circuit view (:class:`CircuitData`), compactly: source and target node indices (the
    narrowest int type) and the weights as float16 little-endian bytes (``edge_weights``), the weights the view
    prunes and scores on.

    Example:
        >>> CircuitEdgesPart.ARRAYS["edge_src"]
        ('int', 1, False)
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {
        "edge_src": ("int", 1, False), "edge_dst": ("int", 1, False)}  # fmt: skip

    edge_src: np.ndarray = data_field("Source node of each edge.")
    edge_dst: np.ndarray = data_field("Target node of each edge.")
    edge_weights: bytes = data_field("Weight of each edge (direct effect), float16 little-endian.", default=b"")


@dataclass
class CircuitData(ViewData):
    """What :class:`~interp_widgets.widgets.CircuitView` draws: an attribution graph's nodes
    (:class:`CircuitNodesPart`) and edges (:class:`CircuitEdgesPart`), the prompt's tokens (:class:`TokenLayoutPart`),
    the logit targets with their probabilities, the feature details of the nodes that carry them (``details``: the
    pinned nodes and the most influential ones; the others ask the kernel), the full graph's scores as Python
    computed them and what the view can compute itself (``scores_note``: empty when the browser's scores are
    computable).

    Example:
        >>> CircuitData.field_names()[:3], CircuitData.VIEW
        (['tokens', 'spaces_before', 'special_mask'], 'circuit')
    """

    VIEW: ClassVar[str] = "circuit"

    layout: TokenLayoutPart
    nodes: CircuitNodesPart
    edges: CircuitEdgesPart
    n_layers: int = data_field("Transcoder layers of the model (logits sit at n_layers + 1).")
    logit_tokens: list[str] = data_field("Token of each logit node, in node order.", default_factory=list)
    logit_probs: list[float] = data_field("Probability of each logit node.", default_factory=list)
    details: dict[str, dict[str, Any]] = data_field(
        "{node id: {label, contexts [{tokens, acts}], top_logits, bottom_logits}} of the nodes whose details travel.",
        default_factory=dict,
    )
    graph_info: dict[str, Any] = data_field(
        "What the graph is: {scan, pruned, node_threshold, edge_threshold, replacement, completeness, scores_of, "
        "kernel}; the numbers are None where unknown.",
        default_factory=lambda: {
            "scan": "",
            "pruned": False,
            "node_threshold": None,
            "edge_threshold": None,
            "replacement": None,
            "completeness": None,
            "scores_of": "",
            "kernel": "",
        },
    )
    scores_note: str = data_field(
        "Why the view cannot compute scores ('' when it can, e.g. lorsa nodes make them not computable).",
        default="",
    )


#: Each view's data class by view (bundle) name.
VIEW_DATA: dict[str, type[ViewData]] = {cls.VIEW: cls for cls in (
    TokenHighlightData, GenerationData, ComparisonData, ExampleListData, ConceptBrowserData, MonitorData,
    AttentionData, LensData, PatchingData, CircuitData)}  # fmt: skip


@dataclass
class SteeringGenerationsPart:
    """The generations of a steering run: the prompt's tokens, the unsteered continuation and one continuation per
    scale (token texts), with ``changed[k][i]`` True where scale ``k``'s token differs from the unsteered run's at
    the same place.

    Example:
        >>> [f.name for f in dataclasses.fields(SteeringGenerationsPart)]
        ['prompt_tokens', 'unsteered_tokens', 'steered_tokens', 'changed']
    """

    prompt_tokens: list[str] = data_field("The prompt's tokens.", default_factory=list)
    unsteered_tokens: list[str] = data_field("The unsteered continuation's tokens.", default_factory=list)
    steered_tokens: list[list[str]] = data_field("The continuation's tokens at each scale.", default_factory=list)
    changed: list[list[bool]] = data_field(
        "Per scale and generated token: differs from the unsteered token at the same place.", default_factory=list
    )


@dataclass
class DoseResponsePart:
    """A dose-response: the ``S`` scales, a metric's mean and spread over prompts at each (NaN: no metric) and the
    damage at each.

    Example:
        >>> DoseResponsePart.ARRAYS["metric_spread"]
        ('float32', 1, False)
    """

    ARRAYS: ClassVar[dict[str, tuple[str, int, bool]]] = {
        "scales": ("float32", 1, True),
        "metric_mean": ("float32", 1, False),
        "metric_spread": ("float32", 1, False),
        "damage": ("float32", 1, False),
    }

    scales: np.ndarray = data_field("(S,) the scales.", default=None)
    metric_mean: np.ndarray = data_field("(S,) the metric's mean over the eval prompts (NaN: no metric).", default=None)
    metric_spread: np.ndarray = data_field("(S,) its standard deviation over the eval prompts.", default=None)
    damage: np.ndarray = data_field(
        "(S,) mean KL(unsteered ‖ steered) of the next token on held-out text.", default=None
    )
    metric_name: str = data_field("The metric's name ('' when there is none).", default="")


@dataclass
class SteeringData(ViewData):
    """What :class:`~interp_widgets.widgets.SteeringView` draws: a steering run's generations
    (:class:`SteeringGenerationsPart`) and its dose-response (:class:`DoseResponsePart`: the metric's mean and
    spread over the eval prompts and the damage, mean KL(unsteered ‖ steered) on held-out text, per scale).

    Example:
        >>> SteeringData.field_names()[:3], SteeringData.array_specs()["damage"]
        (['prompt', 'layer', 'scale_meaning'], ('float32', 1, False))
    """

    VIEW: ClassVar[str] = "steering"

    prompt: str
    layer: str
    scale_meaning: str = data_field("What a scale means (e.g. multiples of the mean residual norm at the layer).")
    generations: SteeringGenerationsPart = field(default_factory=SteeringGenerationsPart)
    dose: DoseResponsePart = field(default_factory=DoseResponsePart)
    damage_tokens: int = data_field("Tokens of held-out text the damage is averaged over.", default=0)
    positions: str = data_field("Where the generations were steered: 'generated' or 'all'.", default="generated")


VIEW_DATA[SteeringData.VIEW] = SteeringData
