"""What :func:`~interp_widgets.interventions.intervene` can do to an activation: the edit objects and their checks.

Every edit maps the selected slice ``x`` of an activation, shape (batch, positions, width), to a new slice of the
same shape. ``d̂`` is the unit vector of ``direction``:

- :class:`Ablate`: without a direction, replace ``x`` by zero, by the mean of reference activations, or by a
  reference activation drawn at random; with one, replace only its component: x − (x·d̂ − μ)·d̂, where μ is 0, the
  mean of the references' projections, or one drawn reference's projection.
- :class:`Clamp`: set the component along ``d̂`` to ``value``: x − (x·d̂ − value)·d̂.
- :class:`Add`: x + scale · direction (the direction as given, not normalised: a steering vector keeps its norm).
- a tensor: set ``x`` to it (it must broadcast to the slice's shape);
- :class:`SAEFeature` in place of a direction: feature ``i`` of a fitted SAE (or any concept model with
  ``encode_torch`` and ``components_``). The edit then works in the feature's own coordinate and changes ``x`` by a
  delta, x + (f′ − f)·W_dec[i], as circuit-tracer's feature interventions do, where f is the feature's value on
  ``x`` and W_dec[i] its decoder row in activation space: ``Ablate`` sets f′ = 0 (or the references' mean, or a drawn
  reference's value), ``Clamp`` sets f′ = ``value``, ``Add`` adds ``scale`` to f. An edit that sets a feature to its
  own value (or ablates a feature that is zero) adds exact zeros, so the logits are bit-identical to the unedited
  run; decoding the edited features and adding back the SAE's error, x̂(f′) + (x − x̂(f)), is not, in float32.
- a callable: ``x = fn(x)``.

Reference activations are rows of a point's activations over texts, from :func:`reference_activations`; an
:class:`Ablate` given texts and a ``tokenizer`` computes them itself when the ``with`` block starts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from interp_widgets.adapter import ModelAdapter
from interp_widgets.interventions.points import EditPoint, resolve_point
from interp_widgets.layers import evaluation, register
from interp_widgets.validation import check_choice, check_number

ABLATION_MODES = ("zero", "mean", "resample")


def as_direction(direction, name: str = "direction") -> torch.Tensor:
    """A direction as a 1-D floating-point tensor (from a tensor, a numpy array or a list), refusing other shapes,
    non-finite values and zero. Its dtype is kept (lists become float64); edits cast it to the activation's dtype.

    Example:
        >>> as_direction([[3.0, 4.0]]).tolist()
        [3.0, 4.0]
    """
    try:
        vector = direction.detach() if isinstance(direction, torch.Tensor) else torch.as_tensor(np.asarray(direction))
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"{name} must be a 1-D tensor, numpy array or list of numbers, got {type(direction).__name__}"
        ) from err
    if vector.dim() == 2 and 1 in vector.shape:
        vector = vector.reshape(-1)
    if vector.dim() != 1 or vector.dtype == torch.bool or vector.is_complex():
        raise ValueError(f"{name} must be one real vector (1-D, the layer's width), got shape {tuple(vector.shape)}")
    vector = vector if vector.is_floating_point() else vector.double()
    if not bool(torch.isfinite(vector).all()) or not bool((vector != 0).any()):
        raise ValueError(f"{name} must be finite and non-zero; a zero vector has no direction")
    return vector


@dataclass(frozen=True, eq=False)
class SAEFeature:
    """Feature ``index`` of a fitted SAE (or concept model), to use as the ``direction`` of :class:`Ablate`,
    :class:`Clamp` or :class:`Add`: the edit then changes the activation by a delta along the feature's decoder row,
    x + (f′ − f)·W_dec[i] (see the module docstring).

    Args:
        sae: a fitted concept model with ``encode_torch(X)`` (rows × features -> rows × concepts) and
            ``components_`` (concepts × features, the decoder rows in activation space), e.g. a
            :class:`~interp_widgets.concepts.SparseAutoencoder` or a SAELens SAE loaded through the concepts package.
            An SAE that normalises each row (``rowwise``) scales the delta by that row's statistics.
        index: the feature.

    Example:
        >>> from interp_widgets.concepts import SparseAutoencoder
        >>> sae = SparseAutoencoder(16, k=4, max_epochs=2, progress=False).fit(store)
        >>> feature = SAEFeature(sae, 3)
        >>> x = torch.as_tensor(store[:2]).reshape(1, 2, 32)
        >>> bool(torch.equal(Clamp(feature, 0.0).edit("layer:1")(x), Ablate(feature).edit("layer:1")(x)))
        True
        >>> SAEFeature(sae, 16)
        Traceback (most recent call last):
        ...
        ValueError: feature 16 does not exist: this SparseAutoencoder has 16 features (0..15); pass an index in range
    """

    sae: object
    index: int

    def __post_init__(self):
        components = getattr(self.sae, "components_", None)
        if components is None or not callable(getattr(self.sae, "encode_torch", None)):
            raise TypeError(
                f"SAEFeature needs a fitted SAE or concept model with encode_torch and components_, got "
                f"{type(self.sae).__name__}; fit it first, or pass its decoder row as a plain direction"
            )
        n = int(np.shape(components)[0])
        if isinstance(self.index, bool) or not isinstance(self.index, (int, np.integer)) or not 0 <= self.index < n:
            raise ValueError(
                f"feature {self.index!r} does not exist: this {type(self.sae).__name__} has {n} features "
                f"(0..{n - 1}); pass an index in range"
            )
        object.__setattr__(self, "index", int(self.index))

    @property
    def width(self) -> int:
        """The width of the activations the SAE reads.

        Example:
            >>> from interp_widgets.concepts import SparseAutoencoder
            >>> SAEFeature(SparseAutoencoder(16, k=4, max_epochs=1, progress=False).fit(store), 0).width
            32
        """
        return int(np.shape(self.sae.components_)[1])

    def value(self, x: torch.Tensor, point: str = "the point") -> torch.Tensor:
        """The feature's value f at every row of ``x`` (..., width): shape ``x.shape[:-1]``.

        Example:
            >>> from interp_widgets.concepts import SparseAutoencoder
            >>> sae = SparseAutoencoder(16, k=4, max_epochs=2, progress=False).fit(store)
            >>> f = SAEFeature(sae, 3).value(torch.as_tensor(store[:5]))
            >>> bool(np.allclose(f.numpy(), sae.transform(store[:5])[:, 3], atol=1e-5))
            True
        """
        if x.shape[-1] != self.width:
            raise ValueError(
                f"the SAE reads activations of width {self.width} but {point} has width {x.shape[-1]}; edit the "
                f"point the SAE was trained on{f' ({self.sae.layer_})' if getattr(self.sae, 'layer_', None) else ''}"
            )
        rows = x.reshape(-1, x.shape[-1])
        return self.sae.encode_torch(rows)[:, self.index].reshape(x.shape[:-1])

    def delta(self, x: torch.Tensor, change: torch.Tensor) -> torch.Tensor:
        """What changing the feature by ``change`` (shape ``x.shape[:-1]``) adds to ``x``: change · W_dec[i] (scaled
        by each row's normalisation for a ``rowwise`` SAE). Zero change adds exact zeros.

        Example:
            >>> from interp_widgets.concepts import SparseAutoencoder
            >>> sae = SparseAutoencoder(16, k=4, max_epochs=1, progress=False).fit(store)
            >>> x = torch.as_tensor(store[:2])
            >>> bool(torch.equal(SAEFeature(sae, 0).delta(x, torch.tensor([1.0, 0.0]))[0], torch.as_tensor(sae.components_[0])))
            True
        """  # fmt: skip
        row = torch.as_tensor(np.asarray(self.sae.components_[self.index])).to(device=x.device, dtype=x.dtype)
        step = change.to(x.dtype)[..., None] * row
        if getattr(self.sae, "rowwise", False):  # the row's own scale: decode a unit code with and without it
            flat = x.reshape(-1, x.shape[-1])
            unit = torch.zeros(len(flat), int(np.shape(self.sae.components_)[0]), dtype=x.dtype, device=x.device)
            unit[:, self.index] = 1.0
            scaled = self.sae.decode_torch(unit, X=flat) - self.sae.decode_torch(torch.zeros_like(unit), X=flat)
            step = change.to(x.dtype)[..., None] * scaled.reshape(x.shape)
        return step


def _fit(vector: torch.Tensor, x: torch.Tensor, point: str, what: str) -> torch.Tensor:
    if vector.shape[-1] != x.shape[-1]:
        raise ValueError(
            f"the {what} has width {vector.shape[-1]} but {point} has width {x.shape[-1]}; use a {what} of the "
            f"point's width (one fitted or computed at {point}), or edit the point it was made for"
        )
    return vector.to(device=x.device, dtype=x.dtype)


def _unit(direction: torch.Tensor, x: torch.Tensor, point: str) -> torch.Tensor:
    d = _fit(direction, x, point, "direction")
    return d / torch.linalg.vector_norm(d)


@dataclass(frozen=True, eq=False)
class Ablate:
    """Ablate the activation, or only its component along ``direction``: x − (x·d̂ − μ)·d̂.

    Args:
        direction: a vector of the point's width, None to ablate the whole activation, or an :class:`SAEFeature`
            (the feature is set to μ by a delta along its decoder row: x + (μ − f)·W_dec[i], so ablating a feature
            that is zero changes nothing, bit for bit).
        mode: ``"zero"`` (μ = 0, or x = 0), ``"mean"`` (μ = the mean over ``reference``) or ``"resample"`` (μ, or x,
            taken from a reference activation drawn at random for each row and position).
        reference: for ``"mean"`` and ``"resample"``: activations at the point, a tensor (rows, width) or
            (texts, tokens, width), e.g. from :func:`reference_activations`; or texts, with ``tokenizer``.
        tokenizer: the model's tokenizer, needed only when ``reference`` holds texts.
        seed: the seed of the draws of ``"resample"`` (each ``with`` block starts from it).

    Example:
        >>> from interp_widgets.interventions import intervene
        >>> ids = torch.tensor([[101, 2204, 102]])
        >>> with intervene(model, {"layer:1": Ablate()}), torch.no_grad():
        ...     zeroed = model(input_ids=ids).logits
        >>> torch.allclose(zeroed, model.classifier(model.bert.pooler(torch.zeros(1, 3, 32))))
        True
        >>> Ablate([1.0, 0.0], mode="mean")
        Traceback (most recent call last):
        ...
        ValueError: Ablate(mode='mean') needs reference activations: pass reference= a tensor (rows, width) from reference_activations(model, tokenizer, texts, point), or texts with tokenizer=
    """

    direction: object = None
    mode: str = "zero"
    reference: object = None
    tokenizer: object = None
    seed: int = 0

    def __post_init__(self):
        check_choice("mode", self.mode, ABLATION_MODES)
        if self.direction is not None:
            object.__setattr__(self, "direction", _direction_or_feature(self.direction))
        if self.mode == "zero":
            if self.reference is not None:
                raise ValueError("Ablate(mode='zero') takes no reference; use mode='mean' or 'resample' to use one")
            return
        if self.reference is None:
            raise ValueError(
                f"Ablate(mode={self.mode!r}) needs reference activations: pass reference= a tensor (rows, width) "
                "from reference_activations(model, tokenizer, texts, point), or texts with tokenizer="
            )
        if _is_texts(self.reference):
            if self.tokenizer is None:
                raise ValueError(
                    "Ablate was given reference texts but no tokenizer; pass tokenizer= (the model's), or reference "
                    "activations from reference_activations(model, tokenizer, texts, point)"
                )
            return
        rows = torch.as_tensor(self.reference).detach()
        if rows.dim() not in (2, 3) or rows.numel() == 0:
            raise ValueError(
                f"reference activations must be a non-empty tensor (rows, width) or (texts, tokens, width), got "
                f"shape {tuple(rows.shape)}"
            )
        object.__setattr__(self, "reference", rows.reshape(-1, rows.shape[-1]))

    def prepared(self, model: nn.Module, point: EditPoint) -> "Ablate":
        """This ablation with reference texts replaced by their activations at ``point`` (itself otherwise).

        Example:
            >>> from interp_widgets.interventions import resolve_point
            >>> ablate = Ablate(mode="mean", reference=["Good.", "Bad."], tokenizer=tokenizer)
            >>> ablate.prepared(model, resolve_point(model, "layer:0")).reference.shape
            torch.Size([8, 32])
        """
        if not _is_texts(self.reference):
            return self
        return replace(self, reference=reference_activations(model, self.tokenizer, self.reference, point.name))

    def edit(self, point: str) -> Callable[[torch.Tensor], torch.Tensor]:
        """The function ``x -> x'`` that this ablation applies at ``point`` (draws restart from ``seed``).

        Example:
            >>> Ablate([0.0, 1.0]).edit("layer:0")(torch.tensor([[[3.0, 4.0]]]))
            tensor([[[3., 0.]]])
        """
        generator = torch.Generator().manual_seed(int(self.seed)) if self.mode == "resample" else None

        def apply(x: torch.Tensor) -> torch.Tensor:
            if isinstance(self.direction, SAEFeature):
                return _ablate_feature(self, x, point, generator)
            d = None if self.direction is None else _unit(self.direction, x, point)
            if self.mode == "zero":
                return torch.zeros_like(x) if d is None else x - (x @ d)[..., None] * d
            rows = _fit(self.reference, x, point, "reference")
            if self.mode == "mean":
                target = rows.mean(0) if d is None else (rows @ d).mean()
                return target.expand_as(x).clone() if d is None else x - ((x @ d) - target)[..., None] * d
            drawn = rows[torch.randint(len(rows), x.shape[:-1], generator=generator).to(rows.device)]
            return drawn if d is None else x - ((x @ d) - (drawn @ d))[..., None] * d

        return apply


@dataclass(frozen=True, eq=False)
class Clamp:
    """Set the component along ``direction`` to ``value``: x − (x·d̂ − value)·d̂; for an :class:`SAEFeature`, set
    the feature to ``value`` by a delta, x + (value − f)·W_dec[i].

    Example:
        >>> from interp_widgets.interventions import intervene
        >>> from interp_widgets.layers import capture
        >>> d = torch.zeros(32); d[0] = 2.0
        >>> with intervene(model, {"layer:0": Clamp(d, 5.0)}), capture(model, ["layer:0"]) as acts, torch.no_grad():
        ...     _ = model(input_ids=torch.tensor([[101, 2204, 102]]))
        >>> acts["layer:0"][0][0, :, 0]
        tensor([5., 5., 5.])
    """

    direction: object
    value: float

    def __post_init__(self):
        object.__setattr__(self, "direction", _direction_or_feature(self.direction))
        object.__setattr__(self, "value", check_number("value", self.value))

    def edit(self, point: str) -> Callable[[torch.Tensor], torch.Tensor]:
        """The function ``x -> x'`` that this clamp applies at ``point``.

        Example:
            >>> Clamp([0.0, 2.0], -1.0).edit("layer:0")(torch.tensor([[[3.0, 4.0]]]))
            tensor([[[ 3., -1.]]])
        """

        def apply(x: torch.Tensor) -> torch.Tensor:
            if isinstance(self.direction, SAEFeature):
                return x + self.direction.delta(x, self.value - self.direction.value(x, point))
            d = _unit(self.direction, x, point)
            return x - ((x @ d) - self.value)[..., None] * d

        return apply


@dataclass(frozen=True, eq=False)
class Add:
    """Add ``scale`` times ``direction`` (as given, not normalised): x + scale · direction; for an
    :class:`SAEFeature`, add ``scale`` to the feature: x + scale·W_dec[i].

    Example:
        >>> from interp_widgets.interventions import intervene
        >>> ids = torch.tensor([[101, 2204, 102]])
        >>> with torch.no_grad():
        ...     plain = model(input_ids=ids).logits
        ...     with intervene(model, {"layer:0": Add(torch.ones(32), 0.0)}):
        ...         same = model(input_ids=ids).logits
        >>> torch.equal(plain, same)
        True
    """

    direction: object
    scale: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "direction", _direction_or_feature(self.direction))
        object.__setattr__(self, "scale", check_number("scale", self.scale))

    def edit(self, point: str) -> Callable[[torch.Tensor], torch.Tensor]:
        """The function ``x -> x'`` that this addition applies at ``point``.

        Example:
            >>> Add([0.0, 2.0], 0.5).edit("layer:0")(torch.tensor([[[3.0, 4.0]]]))
            tensor([[[3., 5.]]])
        """

        def apply(x: torch.Tensor) -> torch.Tensor:
            if isinstance(self.direction, SAEFeature):
                self.direction.value(x, point)  # checks the width
                return x + self.direction.delta(x, torch.full(x.shape[:-1], self.scale, dtype=x.dtype))
            return x + self.scale * _fit(self.direction, x, point, "direction")

        return apply


def _direction_or_feature(direction):
    if isinstance(direction, SAEFeature):
        return direction
    if isinstance(direction, tuple) and len(direction) == 2 and hasattr(direction[0], "encode_torch"):
        raise TypeError(
            "an (SAE, index) pair is ambiguous here; pass SAEFeature(sae, index) to edit the feature by a delta, or "
            "the decoder row sae.components_[index] to use it as a plain direction"
        )
    return as_direction(direction)


def _ablate_feature(ablate: Ablate, x: torch.Tensor, point: str, generator) -> torch.Tensor:
    feature = ablate.direction
    f = feature.value(x, point)
    if ablate.mode == "zero":
        target = torch.zeros_like(f)
    else:
        rows = _fit(ablate.reference, x, point, "reference")
        if ablate.mode == "mean":
            target = feature.value(rows, point).mean().expand_as(f)
        else:
            drawn = rows[torch.randint(len(rows), x.shape[:-1], generator=generator).to(rows.device)]
            target = feature.value(drawn, point)
    return x + feature.delta(x, target - f)


def _is_texts(value) -> bool:
    return isinstance(value, str) or (
        isinstance(value, Sequence) and len(value) > 0 and all(isinstance(v, (str, list)) for v in value)
    )


def reference_activations(model: nn.Module, tokenizer, texts, point) -> torch.Tensor:
    """The activations at ``point`` (any point :func:`intervene` takes) of every token of ``texts``: (rows, width).

    The model runs in eval mode without gradients, texts of equal token length share a pass (no padding), and
    every token counts, the special tokens the tokenizer adds included; the rows follow the texts' order. Use them as an :class:`Ablate` reference.

    Example:
        >>> rows = reference_activations(model, tokenizer, ["Good.", "Very bad film."], "layer:1.head:0")
        >>> rows.shape  # 4 + 6 tokens, the head's 16 dims
        torch.Size([10, 16])
    """
    resolved = resolve_point(model, point)
    adapter = ModelAdapter(model, tokenizer)
    encodings = adapter.encode_many(texts)
    per_text: list[torch.Tensor | None] = [None] * len(encodings)
    found: list[torch.Tensor] = []
    handle = register(resolved.point, lambda module, inputs, value: found.append(resolved.select(value).detach()))
    try:
        with evaluation(model), torch.no_grad():
            for batch in adapter.length_buckets([len(e) for e in encodings], max_padding=0.0):
                ids = torch.as_tensor(np.stack([encodings[i].input_ids for i in batch]))
                found.clear()
                adapter.forward_ids(ids, positions=torch.zeros((len(batch), 1), dtype=torch.long))
                for row, i in enumerate(batch):
                    per_text[i] = found[0][row]
    finally:
        handle.remove()
    return torch.cat(per_text)
