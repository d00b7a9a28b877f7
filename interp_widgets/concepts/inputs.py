"""Inputs to concepts: which input tokens make a concept fire, with any attribution method.

A concept's activation on a text, summed over its tokens or read at one position, is a score of the input tokens
like a class logit. :class:`InputsToConceptsForSequenceClassification` wraps a model and a fitted concept model as
such a "classifier": its forward runs the model up to the concept layer (a hook captures that layer's output and
stops the forward pass there), encodes every token with the concept model and returns one logit per concept. The
attribution engine treats it as any sequence classifier, so every registered method applies unchanged, and
:func:`concept_attribution` returns an ordinary :class:`~interp_widgets.attribution.AttributionResult` whose
targets are concepts.

Which concept models support which methods:

- **perturbation methods** (occlusion, LIME, KernelSHAP, Sobol) only re-score masked inputs: they work for every
  concept model;
- **gradient methods** (saliency, input × gradient, integrated gradients, SmoothGrad ...) need gradients from the
  concept coefficients back to the layer: concept models whose :attr:`~interp_widgets.concepts.ConceptModel.
  differentiable_encoder` is true, i.e. sparse autoencoders and the affine encoders (PCA, incremental PCA, ICA,
  SVD, probe directions). NMF, semi-NMF and dictionary learning encode by solving an optimisation problem, k-means
  by picking a cluster: no gradient, and asking for one is an error that says so;
- attention methods score no target and are refused.

Integrated gradients keeps its completeness guarantee (``Σ attributions = activation(x) − activation(baseline)``)
for encoders that are continuous along the path (ReLU SAEs, affine models). A TopK or JumpReLU SAE jumps when a
concept enters or leaves the active set, and the result's ``completeness_error`` then shows the size of the jumps.

Example:
    >>> from interp_widgets.concepts import PCAConcepts, collect_activations
    >>> pca = PCAConcepts(4).fit(store)  # the namespace's store: layer 1 of the tiny classifier
    >>> r = concept_attribution(pca, model, tokenizer, "Not bad at all.", concept=2,
    ...                         method_params={"n_steps": 64, "progress": False})
    >>> r
    AttributionResult(method='integrated_gradients', 7 tokens, targets=[concept 2])
    >>> bool(r.relative_completeness_error[0] < 1e-3), r.params["concept_score"]
    (True, 'activation of concept 2 summed over the non-special tokens')
    >>> occlusion = concept_attribution(concepts, model, tokenizer, "Not bad at all.", concept=5, method="occlusion")
    >>> occlusion.tokens[:2], occlusion.scores[0, :2].round(3)  # the NMF concepts: a perturbation method
    (['Not', 'bad'], array([-0.028,  0.286]))
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from interp_widgets import layers as _layers
from interp_widgets.adapter import ModelAdapter
from interp_widgets.concepts.decompositions import ConceptModel
from interp_widgets.validation import check_int

__all__ = [
    "InputsToConceptsForSequenceClassification",
    "ConceptInputAttributions",
    "concept_attribution",
    "gradient_support",
]

#: Tokens × concepts of float32 coefficients per forward pass of the wrapper (about 256 MB): the default token budget
#: of an attribution pass shrinks with the number of concepts so that a 16k-concept SAE fits in memory.
_CODE_BUDGET = 1 << 26


class _StopForward(Exception):
    """Raised by the capture hook: the layers after the concept layer never run."""


def gradient_support(concept_model: ConceptModel) -> str:
    """Which attribution methods apply to a concept model's concepts, in one sentence.

    Example:
        >>> gradient_support(concepts)  # the namespace's NMF concepts
        'NMFConcepts: perturbation methods only (no differentiable encoder)'
        >>> from interp_widgets.concepts import PCAConcepts
        >>> gradient_support(PCAConcepts(2))
        'PCAConcepts: gradient and perturbation methods (differentiable encoder)'
    """
    if concept_model.differentiable_encoder:
        return f"{type(concept_model).__name__}: gradient and perturbation methods (differentiable encoder)"
    return f"{type(concept_model).__name__}: perturbation methods only (no differentiable encoder)"


class InputsToConceptsForSequenceClassification(nn.Module):
    """A model and a fitted concept model seen as a classifier whose "classes" are the concepts.

    ``forward(input_ids=... or inputs_embeds=..., attention_mask=...)`` runs ``model`` up to the concept layer only
    (the layers after it are not run), encodes each token's hidden state with ``concept_model`` and returns
    ``logits[row, concept]``: the concept's activation summed over the tokens (padding excluded), or weighted by
    :attr:`position_weights` when they are set (one weight per token: ones on the non-special tokens, or a one-hot
    position; :meth:`scoring` sets them for a ``with`` block). The class name ends in ``ForSequenceClassification``
    and the config lists one label per concept (``"concept 0"``, ...), which is what the attribution adapter reads to
    treat it as a classifier. The user's model is held, never changed: hooks live for one forward pass only, and
    its config is copied, not edited.

    Gradients flow through the concept model's :meth:`~interp_widgets.concepts.ConceptModel.encode_torch` when it
    has one; otherwise the coefficients come from ``transform`` and a forward pass that needs gradients raises a
    TypeError naming the methods that work.

    Args:
        concept_model: a fitted concept model.
        model: the Hugging Face model the concept model was fitted on (classifier, causal or masked LM).
        layer: the concept layer; default the layer the concept model was fitted on.

    Example:
        >>> from interp_widgets.concepts import PCAConcepts
        >>> pca = PCAConcepts(4).fit(store)
        >>> wrapper = InputsToConceptsForSequenceClassification(pca, model)
        >>> wrapper.config.num_labels, wrapper.config.id2label[3], wrapper.layer
        (4, 'concept 3', 'layer:1')
        >>> ids = torch.tensor([tokenizer("Not bad.")["input_ids"]])
        >>> logits = wrapper(input_ids=ids).logits  # each concept summed over all 5 tokens
        >>> from interp_widgets.concepts import text_concepts
        >>> expected = text_concepts(pca, model, tokenizer, "Not bad.").coefficients.sum(0)
        >>> logits.shape, bool(np.allclose(logits[0].detach().numpy(), expected, atol=1e-4))
        (torch.Size([1, 4]), True)
    """

    def __init__(self, concept_model: ConceptModel, model: nn.Module, *, layer=None):
        super().__init__()
        if not isinstance(concept_model, ConceptModel):
            raise TypeError(f"concept_model must be a fitted ConceptModel, got {type(concept_model).__name__}")
        concept_model._check_fitted()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module (a Hugging Face model), got {type(model).__name__}")
        concept_model.check_model(model)  # fitted on another base model: an error, never a silent wrong result
        layer = layer if layer is not None else concept_model.layer_
        if layer is None:
            raise ValueError("the concept model does not record its layer (it was fitted on an array); pass layer=")
        point = _layers.resolve_layer(model, layer)
        fitted_on = concept_model.layer_ and _layers.resolve_layer(model, concept_model.layer_).name
        if fitted_on and point.name != fitted_on:
            raise ValueError(
                f"the concept model was fitted on layer {fitted_on}, not {point.name}; pass the layer it was fitted on"
            )
        width = int(getattr(model.config, "hidden_size", 0) or getattr(model.config, "n_embd", 0) or 0)
        if point.name.startswith("layer:") and width and width != concept_model.n_features_in_:
            raise ValueError(
                f"the concept model reads {concept_model.n_features_in_} features but {point.name} of "
                f"this model has {width}; use the model the concept model was fitted on"
            )
        self.model = model
        self.layer = point.name
        # a plain attribute, not a submodule: the concept model is not a torch module
        self.__dict__["concept_model"] = concept_model
        n = concept_model.n_concepts
        config = copy.deepcopy(model.config)
        config.num_labels = n
        config.id2label = {i: f"concept {i}" for i in range(n)}
        config.label2id = {f"concept {i}": i for i in range(n)}
        self.config = config
        self.position_weights: torch.Tensor | None = None

    @property
    def n_concepts(self) -> int:
        """Number of concepts (the number of "classes")."""
        return self.concept_model.n_concepts

    def get_input_embeddings(self) -> nn.Module:
        """The wrapped model's input embedding (the one gradient methods perturb)."""
        return self.model.get_input_embeddings()

    def get_output_embeddings(self) -> None:
        """None: the wrapper's outputs are concept activations, not vocabulary logits."""
        return None

    @contextlib.contextmanager
    def scoring(self, weights) -> Iterator["InputsToConceptsForSequenceClassification"]:
        """Weight each token position by ``weights`` (one per token of the text explained) within the block.

        Example:
            >>> from interp_widgets.concepts import PCAConcepts
            >>> wrapper = InputsToConceptsForSequenceClassification(PCAConcepts(2).fit(store), model)
            >>> ids = torch.tensor([tokenizer("Not bad.")["input_ids"]])
            >>> with wrapper.scoring([0, 0, 1, 0, 0]):  # the activation at position 2 ("bad") only
            ...     at_bad = wrapper(input_ids=ids).logits
            >>> bool(torch.allclose(at_bad, wrapper(input_ids=ids).logits))  # outside the block: the sum
            False
        """
        previous = self.position_weights
        self.position_weights = torch.as_tensor(np.asarray(weights, dtype=np.float32))
        try:
            yield self
        finally:
            self.position_weights = previous

    def _hidden(self, input_ids, inputs_embeds, attention_mask) -> torch.Tensor:
        captured: dict[str, torch.Tensor] = {}

        def hook(module, inputs, value):
            captured["hidden"] = _layers.hidden_of(value)
            raise _StopForward

        inputs = {"input_ids": input_ids} if inputs_embeds is None else {"inputs_embeds": inputs_embeds}
        with _layers.hooks(self.model, {self.layer: hook}):
            try:
                self.model(**inputs, attention_mask=attention_mask)
            except _StopForward:
                pass
        if "hidden" not in captured:
            raise RuntimeError(f"layer {self.layer} did not run during the forward pass")
        return captured["hidden"]

    def encode(self, hidden: torch.Tensor) -> torch.Tensor:
        """Concept coefficients ``(..., n_concepts)`` of hidden states ``(..., d)``, differentiable when the concept
        model has a torch encoder.

        Example:
            >>> wrapper = InputsToConceptsForSequenceClassification(concepts, model)  # NMF: no torch encoder
            >>> wrapper.encode(torch.tensor(store[:2])).shape
            torch.Size([2, 8])
            >>> wrapper.encode(torch.tensor(store[:2], requires_grad=True))
            Traceback (most recent call last):
            ...
            TypeError: NMFConcepts has no differentiable encoder, so gradient methods cannot attribute its concepts; use a perturbation method (occlusion, lime, kernel_shap, sobol), or a concept model with a torch encoder (SparseAutoencoder, PCAConcepts, ICAConcepts, SVDConcepts, DirectionConcepts)
        """
        cm = self.concept_model
        flat = hidden.reshape(-1, hidden.shape[-1])
        if cm.differentiable_encoder:
            codes = cm.encode_torch(flat.float())
        else:
            if flat.requires_grad and torch.is_grad_enabled():
                raise TypeError(
                    f"{type(cm).__name__} has no differentiable encoder, so gradient methods cannot "
                    "attribute its concepts; use a perturbation method (occlusion, lime, kernel_shap, "
                    "sobol), or a concept model with a torch encoder (SparseAutoencoder, PCAConcepts, "
                    "ICAConcepts, SVDConcepts, DirectionConcepts)"
                )
            codes = torch.from_numpy(cm.transform(flat.detach().float().cpu().numpy())).to(flat.device)
        return codes.reshape(*hidden.shape[:-1], cm.n_concepts)

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs):
        """Concept activations as classifier logits ``(rows, n_concepts)`` in a ``SequenceClassifierOutput``."""
        from transformers.modeling_outputs import SequenceClassifierOutput

        if any(kwargs.get(name) for name in ("output_attentions", "output_hidden_states")):
            raise ValueError(
                "the inputs-to-concepts model returns concept activations only (no attentions or hidden "
                "states); attention methods do not apply to concepts, use a gradient or perturbation "
                "method"
            )
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        hidden = self._hidden(input_ids, inputs_embeds, attention_mask)
        codes = self.encode(hidden)  # (rows, T, concepts)
        rows, length = codes.shape[:2]
        weights = torch.ones((rows, length), dtype=codes.dtype, device=codes.device)
        if attention_mask is not None:
            weights = weights * attention_mask.to(codes.device, codes.dtype)
        if self.position_weights is not None:
            if self.position_weights.shape != (length,):
                raise ValueError(
                    f"position weights are set for {self.position_weights.shape[0]} tokens but the input "
                    f"has {length}; set them for the text being explained (scoring(weights))"
                )
            weights = weights * self.position_weights.to(codes.device, codes.dtype)
        logits = torch.einsum("btc,bt->bc", codes, weights)
        return SequenceClassifierOutput(logits=logits)

    def __repr__(self) -> str:
        return (
            f"InputsToConceptsForSequenceClassification({type(self.concept_model).__name__} with "
            f"{self.n_concepts} concepts at {self.layer} of {type(self.model).__name__})"
        )


def _concept_ids(concept, n: int) -> list[int] | None:
    if concept is None:
        return None
    items = list(concept) if isinstance(concept, (list, tuple, np.ndarray, range)) else [concept]
    if not items:
        raise ValueError("concept list is empty; pass a concept index, a list of them, or None for the most active")
    out = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
            raise TypeError(f"concepts are given by index (an int), got {item!r}")
        if not -n <= int(item) < n:
            raise ValueError(f"concept {int(item)} out of range; there are {n} concepts (0..{n - 1})")
        out.append(int(item) % n)
    return out


def concept_attribution(
    concept_model: ConceptModel | InputsToConceptsForSequenceClassification,
    model,
    tokenizer,
    text: str,
    *,
    concept: int | Sequence[int] | None = None,
    method: str = "integrated_gradients",
    position: int | None = None,
    layer=None,
    method_params: dict[str, Any] | None = None,
    **options,
):
    """Attribute a concept's activation on ``text`` to the input tokens, with any attribution method.

    Args:
        concept_model: a fitted concept model (or an :class:`InputsToConceptsForSequenceClassification` around one).
        model, tokenizer: the model the concept model was fitted on and its fast tokenizer.
        text: the input.
        concept: a concept index, a list of them (one score row each), or ``None`` for the concept with the largest
            score on this text.
        method: a registered attribution method (``list_methods()``): gradient methods need a concept model with a
            differentiable encoder (:func:`gradient_support` says which), perturbation methods work for all.
        position: score the activation at this token position (an index into the result's tokens, special tokens
            included; negative counts from the end); default ``None``: the activation summed over the non-special
            tokens (the rows an activation store keeps).
        layer: the concept layer (default the layer the concept model was fitted on).
        method_params: keyword arguments of the method's constructor (``{"n_steps": 64, "progress": False}``).
        options: go to :meth:`~interp_widgets.attribution.Attributor.attribute` (``granularity``,
            ``max_batch_tokens`` ...). By default a pass holds at most about 2^26 / n_concepts tokens, so that the
            concept coefficients of one pass stay near 256 MB.

    Returns an :class:`~interp_widgets.attribution.AttributionResult`: one row of scores per concept, targets
    labelled ``"concept i"``, no class probability (``target_probs`` is NaN: a softmax over concepts means
    nothing), and ``params`` recording ``concept_score`` (what was attributed), ``concept_activation`` (its value on
    the text), ``concept_model``, ``concept_layer`` and ``concept_position``. The model is not modified.

    Example:
        >>> from interp_widgets.concepts import PCAConcepts
        >>> pca = PCAConcepts(4).fit(store)
        >>> r = concept_attribution(pca, model, tokenizer, "Great food, slow service.", concept=[0, 1],
        ...                         method="input_x_gradient", method_params={"progress": False})
        >>> r.target_labels, r.scores.shape, r.params["concept_model"]
        (['concept 0', 'concept 1'], (2, 8), 'PCAConcepts')
        >>> at = concept_attribution(pca, model, tokenizer, "Great food, slow service.", concept=0, position=2,
        ...                          method="occlusion")
        >>> at.params["concept_score"]
        "activation of concept 0 at position 2 ('food')"
        >>> concept_attribution(concepts, model, tokenizer, "Great food.", concept=0, method="saliency")
        Traceback (most recent call last):
        ...
        TypeError: saliency is a gradient method and NMFConcepts has no differentiable encoder (perturbation methods only (no differentiable encoder)); use a perturbation method such as method='occlusion', 'kernel_shap', 'lime' or 'sobol', or a concept model with a torch encoder (SparseAutoencoder, PCAConcepts, ICAConcepts, SVDConcepts, DirectionConcepts)
    """

    from interp_widgets.attribution import METHODS, attribute

    if isinstance(concept_model, InputsToConceptsForSequenceClassification):
        wrapper = concept_model
        if wrapper.model is not model:
            raise ValueError(
                "this inputs-to-concepts model wraps another model than the one given; pass the model it wraps"
            )
    else:
        wrapper = InputsToConceptsForSequenceClassification(concept_model, model, layer=layer)
    cm = wrapper.concept_model
    if not isinstance(text, str):
        raise TypeError(f"text must be one string, got {type(text).__name__}; call concept_attribution once per text")
    klass = METHODS[method]
    if klass.family == "attention":
        raise ValueError(
            f"{method} reads attention weights and scores no target, so it cannot attribute a concept; "
            "use a gradient or perturbation method"
        )
    if klass.needs_gradients and not cm.differentiable_encoder:
        support = gradient_support(cm).split(": ", 1)[1]
        raise TypeError(
            f"{method} is a gradient method and {type(cm).__name__} has no differentiable encoder "
            f"({support}); use a perturbation method such as method='occlusion', 'kernel_shap', 'lime' "
            "or 'sobol', or a concept model with a torch encoder (SparseAutoencoder, PCAConcepts, "
            "ICAConcepts, SVDConcepts, DirectionConcepts)"
        )
    targets = _concept_ids(concept, cm.n_concepts)
    encoding = ModelAdapter(model, tokenizer).encode(text)
    n_tokens = len(encoding)
    if position is None:
        weights = (~encoding.special_mask).astype(np.float32)
        if not weights.any():
            raise ValueError("the text has no non-special tokens to score; pass a longer text or position=")
        what = "summed over the non-special tokens"
    else:
        position = check_int(
            "position",
            position,
            minimum=-n_tokens,
            maximum=n_tokens - 1,
            hint=f"the text has {n_tokens} tokens (special tokens included)",
        )
        position %= n_tokens
        weights = np.zeros(n_tokens, dtype=np.float32)
        weights[position] = 1.0
        what = f"at position {position} ({encoding.tokens[position]!r})"
    options.setdefault("max_batch_tokens", max(n_tokens, min(16384, _CODE_BUDGET // max(1, cm.n_concepts))))
    with wrapper.scoring(weights):
        if targets is None:  # the concept with the largest score on this text
            with torch.no_grad(), _layers.evaluation(model):
                ids = torch.as_tensor(encoding.input_ids, device=ModelAdapter(model, tokenizer).device)[None]
                targets = [int(wrapper(input_ids=ids).logits[0].argmax())]
        result = attribute(
            wrapper, tokenizer, text, method=method, target=targets, method_params=method_params, **options
        )
        with torch.no_grad(), _layers.evaluation(model):
            ids = torch.as_tensor(encoding.input_ids, device=ModelAdapter(model, tokenizer).device)[None]
            activation = wrapper(input_ids=ids).logits[0, targets].double().cpu().numpy()
    labels = [f"concept {c}" for c in targets]
    scores_what = [f"activation of concept {c} {what}" for c in targets]
    params = {
        **result.params,
        "concept_score": scores_what[0] if len(targets) == 1 else scores_what,
        "concept_activation": [float(v) for v in activation],
        "concept_model": type(cm).__name__,
        "concept_layer": wrapper.layer,
        "concept_position": "sum" if position is None else int(position),
    }
    return result.replace(target_labels=labels, target_probs=np.full(len(targets), np.nan), params=params)


class ConceptInputAttributions:
    """Input attributions of concepts on texts, computed when first asked for and cached: what the concept
    browser's text view shows as token colours for the selected concept.

    ``scores(text, concept)`` returns the :func:`concept_attribution` result (one score row) for that text and
    concept, computing it the first time (``compute=False`` returns only what is cached). The browser asks for the
    selected concept on the selected text when its text view is switched to "input attribution".

    Args:
        concept_model, model, tokenizer: as for :func:`concept_attribution`.
        method: the attribution method (default integrated gradients for concept models with a differentiable
            encoder, occlusion otherwise).
        position, method_params, options: as for :func:`concept_attribution`.

    Example:
        >>> attributions = ConceptInputAttributions(concepts, model, tokenizer)  # NMF: occlusion
        >>> attributions.method, attributions.cached
        ('occlusion', [])
        >>> r = attributions.scores("Not bad at all.", 5)
        >>> r.target_labels, attributions.cached
        (['concept 5'], [('Not bad at all.', 5)])
        >>> attributions.scores("Slow service.", 5, compute=False) is None
        True
    """

    def __init__(
        self,
        concept_model: ConceptModel,
        model,
        tokenizer,
        *,
        method: str | None = None,
        position: int | None = None,
        method_params: dict[str, Any] | None = None,
        **options,
    ):
        from interp_widgets.attribution import METHODS

        self.wrapper = InputsToConceptsForSequenceClassification(concept_model, model, layer=options.pop("layer", None))
        self.model, self.tokenizer = model, tokenizer
        if method is None:
            method = "integrated_gradients" if concept_model.differentiable_encoder else "occlusion"
        METHODS[method]  # an unknown name fails here, listing the known ones
        self.method = method
        self.position = position
        if method_params is None:
            method_params = {"progress": False}
        self.method_params = method_params
        self.options = options
        self._cache: dict[tuple[str, int], Any] = {}

    @property
    def cached(self) -> list[tuple[str, int]]:
        """The ``(text, concept)`` pairs computed so far."""
        return list(self._cache)

    def scores(self, text: str, concept: int, *, compute: bool = True):
        """The attribution of ``concept``'s activation on ``text`` to its tokens (an AttributionResult), or None
        when it is not cached and ``compute`` is false."""
        key = (text, int(concept))
        if key not in self._cache:
            if not compute:
                return None
            self._cache[key] = concept_attribution(
                self.wrapper,
                self.model,
                self.tokenizer,
                text,
                concept=int(concept),
                method=self.method,
                position=self.position,
                method_params=self.method_params,
                **self.options,
            )
        return self._cache[key]

    def add(self, result) -> None:
        """Cache a :func:`concept_attribution` result computed elsewhere (one concept per result).

        Example:
            >>> attributions = ConceptInputAttributions(concepts, model, tokenizer)
            >>> attributions.add(concept_attribution(concepts, model, tokenizer, "Good.", concept=1, method="occlusion"))
            >>> attributions.cached
            [('Good.', 1)]
        """
        if len(result.target_labels) != 1:
            raise ValueError("add one concept per result: call concept_attribution with a single concept=")
        concept = int(str(result.target_labels[0]).rsplit(" ", 1)[-1])
        self._cache[(result.text, concept)] = result

    def __repr__(self) -> str:
        return (
            f"ConceptInputAttributions({self.method} on {type(self.wrapper.concept_model).__name__} concepts at "
            f"{self.wrapper.layer}, {len(self._cache)} cached)"
        )
