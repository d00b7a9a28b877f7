"""Capture for the monitor: the hooks that keep the rows of ``H`` and ``G`` of one step.

During the user's own forward pass, a forward hook on each chosen layer keeps detached, subsampled, non-padding rows
of its output (``H``) and registers a tensor hook on that output which, during the user's ``loss.backward()``, keeps
the true gradient rows ``dL/dh`` of the same tokens (``G``). Row masks come from the ``attention_mask`` /
``input_ids`` the model is called with, or from :meth:`~interp_widgets.geometry.monitor.anisotropy_monitor.AnisotropyMonitor.track`.

Example (a capture for one layer, before any step):
    >>> from interp_widgets.geometry.monitor.binding import bind_layers
    >>> from interp_widgets.geometry.monitor.config import MonitorConfig
    >>> layers = bind_layers(nn.Sequential(nn.Linear(4, 4)), ["0"], "hidden")
    >>> Capture(MonitorConfig(rank=2), layers, torch.Generator(), live=lambda: False, current_step=lambda: 0).H
    {'0': {}}
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from interp_widgets.geometry.alignment.proxy import check_rank
from interp_widgets.geometry.monitor.binding import BoundLayers
from interp_widgets.geometry.monitor.config import MonitorConfig
from interp_widgets.layers import is_encoder_decoder

__all__ = ["Capture"]


def _weight_rows(module: nn.Module, grad: torch.Tensor) -> torch.Tensor:
    """Rows of a weight gradient in the space of the module's inputs (transformers' Conv1D stores (in, out))."""
    return grad if isinstance(module, nn.Linear) else grad.T


def _concat(blocks: list[torch.Tensor]) -> torch.Tensor:
    """Rows of all blocks (the block itself when there is one: the monitor's copies are never modified)."""
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks)


class Capture:
    """The rows a monitor keeps during one step, and the hooks that capture them.

    ``H[layer]`` and ``G[layer]`` map a forward pass (its id) to the kept rows of that layer's activations and of their
    gradients; ``losses`` holds the ``.loss`` outputs of the step's forward passes. Settings come from ``config``, and the model, modules and dimensions from ``layers``, which the monitor
    shares with its measurement.

    Args:
        config: the monitor's :class:`~interp_widgets.geometry.monitor.config.MonitorConfig`.
        layers: the monitor's :class:`~interp_widgets.geometry.monitor.binding.BoundLayers` (a layer's unknown
            dimension is filled in by its first forward pass).
        generator: the monitor's generator for subsampling rows.
        live: whether the hooks should capture now (the monitor is active and the current step is measured).
        current_step: the step the captured passes belong to.

    Example:
        >>> from interp_widgets.geometry.monitor.binding import bind_layers
        >>> from interp_widgets.geometry.monitor.config import MonitorConfig
        >>> layers = bind_layers(nn.Sequential(nn.Linear(4, 4)), ["0"], "hidden")
        >>> capture = Capture(MonitorConfig(rank=2), layers, torch.Generator(), lambda: False, lambda: 0)
        >>> capture.has_pending_gradients()
        False
    """

    def __init__(
        self,
        config: MonitorConfig,
        layers: BoundLayers,
        generator: torch.Generator,
        live: Callable[[], bool],
        current_step: Callable[[], int],
    ) -> None:
        self.config, self.layers, self.generator = config, layers, generator
        self.live, self.current_step = live, current_step
        ids = config.special_token_ids
        self.special_token_ids = None if ids is None else torch.as_tensor(ids, dtype=torch.long)
        self.handles: list = []
        self.tensor_handles: list = []
        self.explicit: dict = {}
        self.auto: dict = {}
        self.forward_id = 0
        self.reset()

    def install(self, optimizer=None, optimizer_step: Callable[[], None] | None = None) -> None:
        """Hook the model (pass numbering, masks, losses) and layers (rows), and, with ``optimizer`` and
        ``optimizer_step``, the optimizer (``optimizer_step`` is called before each ``optimizer.step()``); a failure
        removes what was installed.

        Example:
            >>> from interp_widgets.geometry.monitor.binding import bind_layers
            >>> from interp_widgets.geometry.monitor.config import MonitorConfig
            >>> net = nn.Sequential(nn.Linear(4, 4)); layers = bind_layers(net, ["0"], "hidden")
            >>> capture = Capture(MonitorConfig(rank=2), layers, torch.Generator(), lambda: False, lambda: 0)
            >>> capture.install()
            >>> len(net._forward_hooks), capture.remove_hooks(), len(net._forward_hooks)
            (1, None, 0)
        """
        try:
            model = self.layers.model
            self.handles.append(model.register_forward_pre_hook(self.root_pre_hook, with_kwargs=True))
            self.handles.append(model.register_forward_hook(self.root_hook))
            for spec, module in self.layers.modules.items():
                self.handles.append(module.register_forward_hook(self.layer_hook(spec)))
            if optimizer is not None and optimizer_step is not None:
                self.handles.append(optimizer.register_step_pre_hook(lambda *args: optimizer_step()))
        except BaseException:
            self.remove_hooks()
            raise

    def remove_hooks(self) -> None:
        """Remove every hook :meth:`install` and the layer hooks registered (safe to call twice).

        Example:
            >>> from interp_widgets.geometry.monitor.binding import bind_layers
            >>> from interp_widgets.geometry.monitor.config import MonitorConfig
            >>> layers = bind_layers(nn.Sequential(nn.Linear(4, 4)), ["0"], "hidden")
            >>> Capture(MonitorConfig(rank=2), layers, torch.Generator(), lambda: False, lambda: 0).remove_hooks()
        """
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.remove_tensor_hooks()

    def remove_tensor_hooks(self) -> None:
        """Remove the gradient hooks registered on this step's layer outputs.

        Example:
            >>> from interp_widgets.geometry.monitor.binding import bind_layers
            >>> from interp_widgets.geometry.monitor.config import MonitorConfig
            >>> layers = bind_layers(nn.Sequential(nn.Linear(4, 4)), ["0"], "hidden")
            >>> capture = Capture(MonitorConfig(rank=2), layers, torch.Generator(), lambda: False, lambda: 0)
            >>> x = torch.ones(2, requires_grad=True)
            >>> capture.tensor_handles = [x.register_hook(lambda grad: grad * 0)]
            >>> capture.remove_tensor_hooks(); x.sum().backward(); capture.tensor_handles, x.grad.tolist()
            ([], [1.0, 1.0])
        """
        for handle in self.tensor_handles:
            handle.remove()
        self.tensor_handles = []

    def reset(self) -> None:
        """Drop the step's rows, losses and gradient hooks (start of a step, or after a failed one)."""
        self.remove_tensor_hooks()
        self.H: dict[str, dict[int, torch.Tensor]] = {spec: {} for spec in self.layers.names}
        self.G: dict[str, dict[int, torch.Tensor]] = {spec: {} for spec in self.layers.names}
        self.frozen: set[str] = set()
        self.losses: list[torch.Tensor] = []
        self.selection, self.used = {}, {}

    def has_pending_gradients(self) -> bool:
        """Whether the step has complete gradients to record (hidden: some G rows; weight: every weight.grad)."""
        if self.config.gradient == "weight":
            return any(self.H[spec] for spec in self.layers.names) and all(
                self.layers.modules[spec].weight.grad is not None for spec in self.layers.names
            )
        return any(self.G[spec] for spec in self.layers.names)

    def capturing(self) -> bool:
        """Whether a forward pass now belongs to a measured step (not a checkpointing re-run during backward)."""
        if not (self.live() and torch.is_grad_enabled()):
            return False
        # gradient checkpointing re-runs forwards during backward: those are not new rows
        task = getattr(torch._C, "_current_graph_task_id", None)
        return task is None or task() == -1

    def root_pre_hook(self, module, args, kwargs):
        """Forward pre-hook of the model: numbers the forward pass and picks up its attention mask and input ids."""
        self.forward_id += 1
        if not self.capturing():
            return None
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        input_ids = kwargs.get("input_ids", first if first is not None and not first.is_floating_point() else None)
        self.auto = {"attention_mask": kwargs.get("attention_mask"), "input_ids": input_ids}
        if is_encoder_decoder(module):
            # an encoder–decoder's decoder layers see the decoder's tokens: its ids (built from labels when the
            # model shifts them itself) and its mask, if any
            decoder_ids = kwargs.get("decoder_input_ids")
            labels = kwargs.get("labels")
            if decoder_ids is None and labels is not None and hasattr(module, "prepare_decoder_input_ids_from_labels"):
                decoder_ids = module.prepare_decoder_input_ids_from_labels(labels=labels)
            self.auto["decoder"] = {"attention_mask": kwargs.get("decoder_attention_mask"), "input_ids": decoder_ids}
        return None

    def root_hook(self, module, args, output):
        """Forward hook of the model: keeps the pass's scalar ``.loss``."""
        if not self.capturing():
            return None
        loss = getattr(output, "loss", None) if not isinstance(output, torch.Tensor) else None
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self.losses.append(loss.detach())
        return None

    def _in_decoder(self, spec: str) -> bool:
        """Whether layer ``spec`` belongs to the decoder of an encoder–decoder model (cached per layer)."""
        cache = self.__dict__.setdefault("_decoder_layers", {})
        if spec not in cache:
            model = self.layers.model
            decoder = model.get_decoder() if is_encoder_decoder(model) and hasattr(model, "get_decoder") else None
            module = self.layers.modules[spec]
            cache[spec] = decoder is not None and any(module is m for m in decoder.modules())
        return cache[spec]

    def row_mask(self, shape: torch.Size, decoder: bool = False) -> torch.Tensor | None:
        """Boolean (B, T) mask of rows to keep, or None to keep all rows (``decoder``: a decoder layer of an
        encoder–decoder, masked by the decoder's ids and mask)."""
        if len(shape) != 3:
            return None
        mask = None
        auto = self.auto.get("decoder", {}) if decoder else self.auto

        def pick(name):
            value = None if decoder else self.explicit.get(name)
            return auto.get(name) if value is None else value

        for name in ("attention_mask", "token_mask", "input_ids"):
            value = pick(name)
            if value is None or (name == "input_ids" and self.special_token_ids is None):
                continue
            value = torch.as_tensor(value).detach()
            if tuple(value.shape) != tuple(shape[:2]):
                raise ValueError(
                    f"{name} has shape {tuple(value.shape)} but the layer output is "
                    f"{tuple(shape)}; pass the (batch, sequence) {name} of this forward pass"
                )
            value = value.to("cpu")
            keep = ~torch.isin(value, self.special_token_ids) if name == "input_ids" else value != 0
            mask = keep if mask is None else mask & keep
        if self.special_token_ids is not None and pick("input_ids") is None:
            raise ValueError(
                "special_token_ids needs input_ids: call the model with input_ids= or pass "
                "monitor.track(step, input_ids=batch['input_ids'])"
            )
        return mask

    def select_rows(self, spec: str, shape: torch.Size, device: torch.device) -> torch.Tensor:
        """Indices of the kept rows (flattened batch × sequence) of this forward pass for one layer.

        Valid rows (mask) and one seeded random order are shared by all layers of a forward pass; a layer takes
        the first rows of that order that fit its remaining ``max_tokens`` budget for the step, so layers with
        equal budgets keep the same tokens.
        """
        decoder = self._in_decoder(spec)
        key = (self.forward_id, tuple(shape[:-1])) + (("decoder",) if decoder else ())
        cached = self.selection.get(key)
        if cached is None:
            mask = self.row_mask(shape, decoder)
            n = math.prod(shape[:-1])
            valid = torch.arange(n) if mask is None else mask.reshape(-1).nonzero().squeeze(1)
            cached = self.selection[key] = {"valid": valid, "order": None}
        valid = cached["valid"]
        remaining = max(0, self.config.max_tokens - self.used.get(spec, 0))
        if valid.shape[0] > remaining:
            if cached["order"] is None:
                cached["order"] = torch.randperm(valid.shape[0], generator=self.generator)
            valid = valid[cached["order"][:remaining].sort().values]
        self.used[spec] = self.used.get(spec, 0) + valid.shape[0]
        # one copy to the device per forward pass and budget, shared by the layers: on a GPU each copy of a host
        # tensor waits for the kernels queued before it
        copies = cached.setdefault("on_device", {})
        key = (valid.shape[0], device)
        if key not in copies:
            copies[key] = valid.to(device)
        return copies[key]

    def layer_hook(self, spec: str):
        """The forward hook of one layer: keeps its rows of ``H`` and hooks its output for the rows of ``G``."""

        def hook(module, args, output):
            if not self.capturing():
                return None
            if self.config.gradient == "weight":
                tensor = args[0] if args else None
            else:
                tensor = output[0] if isinstance(output, (tuple, list)) else output
                tensor = getattr(tensor, "last_hidden_state", tensor)
            if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
                raise TypeError(
                    f"layer {spec!r} produced {type(tensor).__name__}, not a float tensor of hidden "
                    f"states; choose a module whose output (or first output) is (batch, seq, d)"
                )
            if self.config.gradient == "hidden" and not tensor.requires_grad:
                self.frozen.add(spec)
                return None
            d = tensor.shape[-1]
            if self.layers.dims[spec] is None:
                check_rank(self.config.rank, d, layer=spec)
                self.layers.dims[spec] = d
            rows = self.select_rows(spec, tensor.shape, tensor.device)
            if rows.numel() == 0:
                return None
            forward = self.forward_id
            flat = tensor.detach().reshape(-1, d)
            self.H[spec][forward] = flat.index_select(0, rows).float()
            if self.config.gradient == "hidden":
                step = self.current_step()

                def grad_hook(grad):
                    if self.current_step() == step and self.live():
                        self.G[spec][forward] = grad.detach().reshape(-1, d).index_select(0, rows).float()
                    return None

                self.tensor_handles.append(tensor.register_hook(grad_hook))
            return None

        return hook

    def take(self, step: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per layer ``(H, G)`` of the step, validated (clear errors for a missing backward or a frozen layer)."""
        if not any(self.H[spec] for spec in self.layers.names) and not self.frozen:
            raise RuntimeError(
                f"no forward pass was captured for step {step}: run the model (with gradients enabled) inside "
                f"`with monitor:` before recording, and call monitor.track(step) for explicit step numbers"
            )
        data = {}
        for spec in self.layers.names:
            module = self.layers.modules[spec]
            if self.config.gradient == "weight":
                grad = module.weight.grad
                if grad is None:
                    if not module.weight.requires_grad:
                        raise ValueError(
                            f"layer {spec!r} is frozen (weight.requires_grad is False): it has no weight "
                            f"gradient; monitor a trainable layer"
                        )
                    raise RuntimeError(
                        f"no weight gradient at layer {spec!r} for step {step}: call loss.backward() "
                        f"before monitor.step() (and record before optimizer.zero_grad())"
                    )
                if not self.H[spec]:
                    raise RuntimeError(f"no activations reached layer {spec!r} at step {step}")
                G = _weight_rows(module, grad.detach()).float()
                H = _concat(list(self.H[spec].values()))
            else:
                forwards = [f for f in self.H[spec] if f in self.G[spec]]
                if not forwards:
                    if spec in self.frozen and not self.H[spec]:
                        raise ValueError(
                            f"layer {spec!r} receives no gradient: the model is frozen at that layer (its output does "
                            f"not require grad); unfreeze it or monitor a later, trainable layer"
                        )
                    raise RuntimeError(
                        f"no gradient was captured at layer {spec!r} for step {step}: call loss.backward() before "
                        f"monitor.step() / optimizer.step() (the monitor reads dL/dh during your backward pass)"
                    )
                H = _concat([self.H[spec][f] for f in forwards])
                G = _concat([self.G[spec][f] for f in forwards])
            data[spec] = (H, G)
        return data
