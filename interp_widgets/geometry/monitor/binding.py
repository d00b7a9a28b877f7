"""Layer binding for the monitor: which module each monitored layer is, by what canonical name, and its dimension.

``layer:i`` shortcuts and sub-points of Hugging Face models resolve through :mod:`interp_widgets.layers`; module paths
work on any ``nn.Module``. :func:`bind_layers` does it for a whole layer list (construction, and replay's next
checkpoint).

Example:
    >>> net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    >>> type(resolve_module(net, "1")).__name__
    'ReLU'
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from interp_widgets.geometry.alignment.proxy import check_rank
from interp_widgets.layers import blocks as transformer_blocks, resolve_layer

__all__ = ["BoundLayers", "resolve_point", "resolve_module", "is_linear", "known_dim", "bind_layers"]


def resolve_point(model: nn.Module, layer: str | int) -> tuple[str, nn.Module]:
    """``(canonical layer name, module)`` of a monitored layer: ``"layer:i"`` shortcuts, sub-points and module paths
    of Hugging Face models (:func:`interp_widgets.layers.resolve_layer`), module paths of any ``nn.Module``.

    The monitor reads a module's output during the forward pass, so points that are a module's *input*
    (``layer:i.resid_pre``, and ``layer:i.resid_mid`` of pre-norm models) are refused with the output to use instead.

    Example:
        >>> net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        >>> resolve_point(net, "1")[0]
        '1'
    """
    if hasattr(model, "config"):
        point = resolve_layer(model, layer)
        if point.site != "output":
            earlier = f"layer:{point.block - 1}" if point.block else "an earlier module's output"
            raise ValueError(
                f"the monitor reads module outputs, and {point.name} is the input of {point.path}; "
                f"monitor {earlier} or {point.name.split('.')[0]}.attn_out instead"
            )
        return point.name, point.module
    modules = dict(model.named_modules())
    if isinstance(layer, str) and layer in modules and layer:
        return layer, modules[layer]
    names = [name for name in modules if name]
    raise ValueError(
        f"unknown layer {layer!r}; this model's module paths are {names[:30]}" + (" …" if len(names) > 30 else "")
    )


def resolve_module(model: nn.Module, layer: str | int) -> nn.Module:
    """The module named by ``"layer:i"``, an index or a module path (``"bert.encoder.layer.1"``).

    Hugging Face models accept the canonical names of :mod:`interp_widgets.layers`; any ``nn.Module`` accepts
    module paths. Unknown names raise a ValueError listing valid ones.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        >>> type(resolve_module(net, "0")).__name__
        'Linear'
    """
    return resolve_point(model, layer)[1]


def is_linear(module: nn.Module) -> bool:
    """Whether ``module`` is an ``nn.Linear`` or a transformers ``Conv1D`` (a linear layer stored as (in, out)).

    Example:
        >>> is_linear(nn.Linear(2, 3)), is_linear(nn.ReLU())
        (True, False)
    """
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def known_dim(model: nn.Module, module: nn.Module, gradient: str) -> int | None:
    """The dimension d of a layer's rows if it is known before a forward pass (linear layers, HF blocks), else None.

    Example:
        >>> known_dim(nn.Sequential(nn.Linear(4, 6)), nn.Linear(4, 6), "hidden")
        6
    """
    if gradient == "weight":
        return module.in_features if isinstance(module, nn.Linear) else module.weight.shape[0]
    if isinstance(module, nn.Linear):
        return module.out_features
    config = getattr(model, "config", None)
    if config is not None:
        try:
            _, found = transformer_blocks(model)
        except Exception:
            return None
        if any(module is block for block in found):
            return getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    return None


@dataclass(eq=False)
class BoundLayers:
    """The monitored layers bound to one model: the inner model (a DDP wrapper unwrapped), ``{canonical name:
    module}`` and ``{canonical name: d or None}`` (a None is filled in by the first forward pass). The monitor, its
    capture and its measurement share one instance; :meth:`rebind` points it at the next checkpoint of a replay.

    Example:
        >>> bound = bind_layers(nn.Sequential(nn.Linear(4, 6), nn.ReLU()), ["0", "1"], "hidden", rank=2)
        >>> bound.names, bound.dims
        (['0', '1'], {'0': 6, '1': None})
    """

    model: nn.Module
    modules: dict
    dims: dict
    gradient: str

    @property
    def names(self) -> list[str]:
        """The canonical layer names, in the order given."""
        return list(self.modules)

    def rebind(self, model: nn.Module) -> None:
        """Bind the same layers of another model of the same architecture (a layer whose d changed is refused).

        Example:
            >>> bound = bind_layers(nn.Sequential(nn.Linear(4, 6)), ["0"], "hidden")
            >>> other = nn.Sequential(nn.Linear(4, 6)); bound.rebind(other); bound.model is other
            True
        """
        fresh = bind_layers(model, self.names, self.gradient, expected=self.dims)
        self.model, self.modules = fresh.model, fresh.modules


def bind_layers(
    model: nn.Module, layers, gradient: str, rank: int | None = None, expected: dict | None = None
) -> BoundLayers:
    """The :class:`BoundLayers` of the monitored layers of ``model``.

    A DDP wrapper is unwrapped; duplicates (2, ``"layer:2"`` and its module path are one layer) are refused; with
    ``gradient="weight"`` every layer must be linear; a ``rank`` is checked against every dimension known up front,
    and so are the ``expected`` dimensions of an earlier model (replay: one architecture for every checkpoint).

    Example:
        >>> net = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
        >>> bound = bind_layers(net, ["0", "1"], "hidden", rank=2)
        >>> list(bound.modules), bound.dims
        (['0', '1'], {'0': 6, '1': None})
    """
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    points = [resolve_point(inner, layer) for layer in layers]
    specs = [name for name, _ in points]  # canonical names: 2, "layer:2" and its module path are one layer
    if len(set(specs)) != len(specs):
        raise ValueError(f"layers contains duplicates: {specs}")
    modules = dict(points)
    if gradient == "weight":
        bad = [spec for spec, module in modules.items() if not is_linear(module)]
        if bad:
            raise ValueError(
                f"gradient='weight' needs nn.Linear layers; {bad} are "
                f"{[type(modules[b]).__name__ for b in bad]} — pass their linear sub-modules, "
                f"e.g. 'bert.encoder.layer.1.attention.self.query'"
            )
    dims = {spec: known_dim(inner, module, gradient) for spec, module in modules.items()}
    for spec, d in dims.items():
        if d is not None and rank is not None:
            check_rank(rank, d, layer=spec)
        if d is not None and (expected or {}).get(spec) not in (None, d):
            raise ValueError(
                f"layer {spec!r} has d = {d} in this model but d = {expected[spec]} before; "
                f"replay checkpoints of one architecture"
            )
    return BoundLayers(inner, modules, dims, gradient)
