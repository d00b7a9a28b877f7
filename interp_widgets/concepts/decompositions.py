"""Concept models: decompositions of activations into concept coefficients and concept directions.

Every concept model is a scikit-learn estimator (``BaseEstimator`` and ``TransformerMixin``): ``fit(X)``,
``transform(X) -> C`` (rows × concepts), ``inverse_transform(C) -> X̂`` and ``components_`` (concepts × features).
``X`` may be a numpy array, a torch tensor or an :class:`~interp_widgets.concepts.ActivationStore`. Decoding is
affine for every model here, ``X̂ = C @ components_ + offset_``, which makes concept importance exact (see
:mod:`.importance`).

The constructor only stores its keyword parameters (so ``get_params``, ``set_params``, ``sklearn.base.clone`` and
``sklearn.pipeline.Pipeline`` work); ``fit`` validates them and sets the fitted attributes, whose names end in ``_``;
``transform`` and the other methods of a fitted model raise ``sklearn.exceptions.NotFittedError`` before ``fit``.
Every concept model registers itself by ``name`` in :data:`CONCEPT_MODELS`, which is how :meth:`ConceptModel.load`
finds the class of a saved model.

The scikit-learn methods are wrapped, not rewritten: the fitted estimator is ``model.estimator_`` and its constructor
arguments are ``estimator_params``. Semi-NMF is not in scikit-learn and is implemented here (multiplicative updates
of Ding, Li & Jordan, 2010).

NMF needs non-negative data and hidden states are signed, so :class:`NMFConcepts` asks for an explicit choice,
recorded in ``model.nonnegative`` and ``model.fit_info_``:

- ``"shift"``: subtract the per-feature minimum of the training data (``shift_``), clip new data at that floor, and
  add the shift back when decoding. Lossless on the training data.
- ``"relu"``: keep only the positive part ``max(X, 0)``; decoding cannot restore negative values.
- or use :class:`SemiNMFConcepts`: non-negative coefficients with signed directions, on the raw activations.

Example:
    >>> nmf = NMFConcepts(12, nonnegative="shift", estimator_params={"random_state": 0, "max_iter": 1000}).fit(store)
    >>> nmf.transform(store[:100]).shape, nmf.components_.shape
    ((100, 12), (12, 32))
    >>> nmf.fit_info_
    {'rows': 775, 'nonnegative': 'shift', 'mode': 'full'}
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> X = store.to_numpy()
    >>> make_pipeline(StandardScaler(), PCAConcepts(8)).fit_transform(X).shape
    (775, 8)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import NotFittedError

from interp_widgets.concepts._io import load_bundle, save_bundle
from interp_widgets.registry import Registry
from interp_widgets.validation import check_choice, check_int

_FORMAT = "interp_widgets.ConceptModel"
_BLOCK_VALUES = 1 << 24  # unit vectors decoded per block when reading off the affine decoder (about 64 MB)
#: Every concept model class by name, filled by the classes themselves (a read-only, live mapping).
CONCEPT_MODELS = Registry("concept model")


def _as_matrix(X, *, name: str = "X") -> np.ndarray:
    from interp_widgets.concepts.activations import ActivationStore

    if isinstance(X, ActivationStore):
        X = X.to_numpy()
    elif isinstance(X, torch.Tensor):
        X = X.detach().cpu().float().numpy()
    try:
        X = np.asarray(X, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a 2-D array, torch tensor or ActivationStore ({err})") from None
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows × features), got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return X


class ConceptModel(TransformerMixin, BaseEstimator):
    """Base class of concept models: a fitted affine decoder plus an encoder, with persistence.

    A scikit-learn estimator: the parameters are the keyword arguments of ``__init__``, stored unchanged
    (``get_params``, ``clone`` and ``Pipeline`` work), validated by ``fit``. Fitted attributes end in ``_``:
    ``components_``, ``offset_``, ``n_features_in_``, ``layer_`` (the layer of a fitted store, else None),
    ``model_name_`` (the store's ``model.config._name_or_path``, None when unknown; checked by
    :meth:`check_model`) and ``fit_info_``, plus those of each subclass.

    Subclass API: set ``name`` (the class then registers itself in :data:`CONCEPT_MODELS`); take the parameters as
    explicit keyword arguments of ``__init__`` and store each unchanged under its own name; validate them in
    ``_check_params()`` (call ``super()._check_params()``); implement ``_fit(X)`` (set the fitted attributes),
    ``_transform(X)`` and ``_inverse(C)`` (an affine decoder: ``components_`` and ``offset_`` are read off it);
    extend ``_state()`` / ``_restore()`` with the fitted arrays to save.

    Example:
        >>> pca = PCAConcepts(10).fit(store)
        >>> pca.inverse_transform(pca.transform(store[:5])).shape
        (5, 32)
        >>> ConceptModel.load(pca.save(getfixture("tmp_path") / "pca.safetensors"))
        PCAConcepts(10, estimator_params=None, max_fit_rows=200000, stream_epochs=1) [fitted on 32 features]
        >>> import sklearn.base
        >>> sklearn.base.clone(pca).is_fitted
        False
    """

    name: ClassVar[str] = ""
    #: Whether ``transform`` is an affine map ``X @ W + b`` (PCA, ICA, SVD, fixed directions): such models get a
    #: differentiable :meth:`encode_torch` read off ``transform`` itself.
    affine_encoder: ClassVar[bool] = False
    #: Whether ``fit`` learns the concepts from the rows (False for fixed directions such as the neurons themselves,
    #: which may have more concepts than rows).
    learns_from_rows: ClassVar[bool] = True
    components_: np.ndarray
    offset_: np.ndarray
    # notebooks show the text repr below rather than scikit-learn's HTML diagram
    _repr_html_ = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        CONCEPT_MODELS.add_subclass(cls)

    def __init__(self, n_concepts: int):
        self.n_concepts = n_concepts

    # ------------------------------------------------------------------ estimator API
    @property
    def is_fitted(self) -> bool:
        """Whether :meth:`fit` (or :meth:`load`) has run.

        Example:
            >>> PCAConcepts(2).is_fitted
            False
        """
        return hasattr(self, "n_features_in_")

    def __sklearn_is_fitted__(self) -> bool:
        return self.is_fitted

    def _check_params(self) -> None:
        """Validate the constructor parameters (called by :meth:`fit`; subclasses extend)."""
        check_int("n_concepts", self.n_concepts, minimum=1)

    def fit(self, X, y=None) -> "ConceptModel":
        """Fit on activations ``X`` (array, tensor or ActivationStore); returns ``self``.

        Example:
            >>> ica = ICAConcepts(8, estimator_params={"random_state": 0}).fit(store)
            >>> ica
            ICAConcepts(8, estimator_params={'random_state': 0}, max_fit_rows=200000, stream_epochs=1) [fitted on 32 features]
            >>> ica.layer_, ica.n_features_in_, ica.fit_info_
            ('layer:1', 32, {'rows': 775, 'mode': 'full'})
        """
        from interp_widgets._model_names import display_name
        from interp_widgets.concepts.activations import ActivationStore

        self._check_params()
        n_rows, n_features = (len(X), X.dim) if isinstance(X, ActivationStore) else _as_matrix(X).shape
        if n_rows == 0:
            raise ValueError("cannot fit on zero rows of activations; collect activations from at least one text")
        if self.n_concepts > n_rows and self.learns_from_rows:
            raise ValueError(
                f"n_concepts={self.n_concepts} is more than the {n_rows} samples; "
                "use fewer concepts or collect more activations"
            )
        self._check_size(n_rows, n_features)
        self.layer_ = X.layer if isinstance(X, ActivationStore) else None
        self.model_name_ = display_name(str(X.info.get("name_or_path", ""))) if isinstance(X, ActivationStore) else None
        self.fit_info_ = {"rows": int(n_rows)}
        self._fit(X)
        self._set_affine_decoder()
        self.n_features_in_ = int(n_features)
        return self

    def check_model(self, model) -> None:
        """Raise a ValueError if ``model`` (a model or a model name) is not the model this one was fitted on.

        Nothing is checked when either name is unknown (a model built from a config, a store without a name).
        Concept importance, :func:`~interp_widgets.concepts.text_concepts`, interpretation and
        :func:`~interp_widgets.concepts.splice_quality` call it. If the names differ but the models are the same
        (a renamed copy), set ``model_name_`` to the new name or to None.

        Example:
            >>> pca = PCAConcepts(4).fit(store)
            >>> pca.model_name_ = "EleutherAI/pythia-70m"  # as if fitted on a store of that model
            >>> pca.check_model("pythia-70m")  # the TransformerLens alias of the same model: fine
            >>> pca.check_model("EleutherAI/pythia-70m-deduped")
            Traceback (most recent call last):
            ...
            ValueError: this PCAConcepts was fitted on activations of 'EleutherAI/pythia-70m', not of 'EleutherAI/pythia-70m-deduped'; use it with EleutherAI/pythia-70m, or set model_name_ = None if this is the same model under another name
        """
        from interp_widgets._model_names import display_name, model_name_of, same_model_name

        self._check_fitted()
        expected, actual = display_name(getattr(self, "model_name_", None)), model_name_of(model)
        if expected and actual and not same_model_name(expected, actual):
            source = self.fit_info_.get("source_note", "") if isinstance(self.fit_info_, dict) else ""
            raise ValueError(
                f"this {type(self).__name__} was fitted on activations of {expected!r}{source}, not of "
                f"{actual!r}; use it with {expected}, or set model_name_ = None if this is the same "
                "model under another name"
            )

    def _check_size(self, n_rows: int, n_features: int) -> None:
        """Subclasses that cannot be overcomplete raise here."""

    def _repr_mimebundle_(self, **kwargs) -> dict[str, str]:
        return {"text/plain": repr(self)}

    def fit_transform(self, X, y=None) -> np.ndarray:
        """``fit(X)`` then ``transform(X)``.

        Example:
            >>> PCAConcepts(5).fit_transform(store).shape
            (775, 5)
        """
        return self.fit(X).transform(X)

    def transform(self, X) -> np.ndarray:
        """Concept coefficients of ``X``: a ``(rows, n_concepts)`` float array.

        Example:
            >>> C = concepts.transform(store[:10])  # the namespace's 8 NMF concepts
            >>> C.shape, C.dtype, bool((C >= 0).all())
            ((10, 8), dtype('float32'), True)
        """
        X = self._check_input(X)
        return np.asarray(self._transform(X), dtype=np.float32)

    def inverse_transform(self, C, X=None) -> np.ndarray:
        """Reconstruct activations from concept coefficients: ``C @ components_ + offset_``.

        ``X`` (the activations ``C`` came from) is ignored here; SAEs that normalise each row need it.

        Example:
            >>> C = concepts.transform(store[:10])
            >>> X_hat = concepts.inverse_transform(C)
            >>> X_hat.shape
            (10, 32)
            >>> np.allclose(X_hat, C @ concepts.components_ + concepts.offset_, atol=1e-5)
            True
        """
        self._check_fitted()
        C = _as_matrix(C, name="C")
        if C.shape[1] != self.n_concepts:
            raise ValueError(f"C has {C.shape[1]} columns but this model has {self.n_concepts} concepts")
        return C @ self.components_ + self.offset_

    def decode_torch(self, C: torch.Tensor, X=None) -> torch.Tensor:
        """Differentiable decoding ``C @ components_ + offset_`` in torch, in ``C``'s dtype and device.

        ``X`` (the activations ``C`` came from) is ignored here; SAEs that normalise each row need it.

        Example:
            >>> C = torch.zeros(2, concepts.n_concepts, requires_grad=True)
            >>> X_hat = concepts.decode_torch(C)
            >>> X_hat.shape, X_hat.requires_grad
            (torch.Size([2, 32]), True)
            >>> np.allclose(X_hat[0].detach().numpy(), concepts.offset_)  # zero coefficients decode to the offset
            True
        """
        self._check_fitted()
        weight = torch.as_tensor(self.components_, dtype=C.dtype, device=C.device)
        offset = torch.as_tensor(self.offset_, dtype=C.dtype, device=C.device)
        return C @ weight + offset

    @property
    def differentiable_encoder(self) -> bool:
        """Whether :meth:`encode_torch` exists for this model: gradients can flow from the concept coefficients back
        to the activations (SAEs, PCA, ICA, SVD, fixed directions), so gradient attribution methods apply to its
        concepts (:func:`~interp_widgets.concepts.concept_attribution`). Models whose ``transform`` solves an
        optimisation problem (NMF, semi-NMF, dictionary learning) or picks a cluster (k-means) have none.

        Example:
            >>> PCAConcepts(4).differentiable_encoder, concepts.differentiable_encoder  # PCA; the namespace's NMF
            (True, False)
        """
        return bool(self.affine_encoder) or type(self).encode_torch is not ConceptModel.encode_torch

    def encode_torch(self, X: torch.Tensor) -> torch.Tensor:
        """Differentiable concept coefficients of ``X`` (``(..., features)``) in torch, in ``X``'s dtype and device.

        Available when :attr:`differentiable_encoder` is true. For an affine encoder (``affine_encoder``), ``W`` and
        ``b`` of ``transform(X) = X @ W + b`` are read off ``transform`` once (at zero and at the unit vectors),
        so the torch encoder agrees with ``transform`` exactly; other models raise a TypeError that says why.

        Example:
            >>> pca = PCAConcepts(4).fit(store)
            >>> x = torch.tensor(store[:3], requires_grad=True)
            >>> codes = pca.encode_torch(x)
            >>> bool(np.allclose(codes.detach().numpy(), pca.transform(store[:3]), atol=1e-4))
            True
            >>> codes[:, 0].sum().backward(); x.grad.shape  # gradients flow back to the activations
            torch.Size([3, 32])
            >>> concepts.encode_torch(x)  # NMF encodes by solving a non-negative least-squares problem
            Traceback (most recent call last):
            ...
            TypeError: NMFConcepts has no differentiable encoder (its transform solves an optimisation problem or picks a cluster, so no gradient reaches the activations); use a perturbation method (occlusion, lime, kernel_shap, sobol) or a concept model with one: SparseAutoencoder, PCAConcepts, ICAConcepts, SVDConcepts, DirectionConcepts
        """
        self._check_fitted()
        if not self.affine_encoder:
            raise TypeError(
                f"{type(self).__name__} has no differentiable encoder (its transform solves an "
                "optimisation problem or picks a cluster, so no gradient reaches the activations); use a "
                "perturbation method (occlusion, lime, kernel_shap, sobol) or a concept model with one: "
                "SparseAutoencoder, PCAConcepts, ICAConcepts, SVDConcepts, DirectionConcepts"
            )
        if X.shape[-1] != self.n_features_in_:
            raise ValueError(f"this concept model was fitted on {self.n_features_in_} features but got {X.shape[-1]}")
        weight, bias = self._affine_encoder()
        # tensors made per call (from_numpy shares the memory): one cached under inference_mode could not join a graph
        return X @ torch.from_numpy(weight).to(X.device, X.dtype) + torch.from_numpy(bias).to(X.device, X.dtype)

    def _affine_encoder(self) -> tuple[np.ndarray, np.ndarray]:
        """``(W, b)`` of an affine ``transform``, cached until the model is refitted or reloaded."""
        key = id(self.components_)
        cached = self.__dict__.get("_encoder_cache")
        if cached is None or cached[0] != key:
            d = self.n_features_in_
            bias = np.asarray(self._transform(np.zeros((1, d), dtype=np.float32)), dtype=np.float64)[0]
            weight = np.asarray(self._transform(np.eye(d, dtype=np.float32)), dtype=np.float64) - bias
            cached = (key, weight.astype(np.float32), bias.astype(np.float32))
            self.__dict__["_encoder_cache"] = cached
        return cached[1], cached[2]

    def _affine_decoder(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(components, offset)`` where the decoder's weights are known in closed form; None (the default): read
        them off by decoding unit vectors (``n_concepts`` decodes, ``n_concepts² × d`` multiply-adds)."""
        return None

    def _set_affine_decoder(self) -> None:
        known = self._affine_decoder()
        if known is not None:
            self.components_, self.offset_ = (np.ascontiguousarray(a, dtype=np.float32) for a in known)
            return
        n = self.n_concepts
        zero = np.zeros((1, n), dtype=np.float32)
        self.offset_ = np.asarray(self._inverse(zero), dtype=np.float32)[0]
        # unit vectors in blocks of about 64 MB: a 16,384-concept identity matrix alone would take 1 GB
        block, parts = max(1, _BLOCK_VALUES // n), []
        for start in range(0, n, block):
            stop = min(n, start + block)
            eye = np.zeros((stop - start, n), dtype=np.float32)
            eye[np.arange(stop - start), np.arange(start, stop)] = 1.0
            parts.append(np.asarray(self._inverse(eye), dtype=np.float32) - self.offset_)
        self.components_ = np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _check_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError(
                f"this {type(self).__name__} is not fitted yet; call fit(activations) first, or "
                "load a saved model with ConceptModel.load(path)"
            )

    def _check_input(self, X) -> np.ndarray:
        self._check_fitted()
        X = _as_matrix(X)
        if X.shape[1] != self.n_features_in_:
            where = f" (layer {self.layer_})" if self.layer_ else ""
            raise ValueError(
                f"this concept model was fitted on {self.n_features_in_} features{where} but got "
                f"{X.shape[1]}; transform activations from the same layer and model"
            )
        return X

    # ------------------------------------------------------------------ subclass hooks
    def _fit(self, X) -> None:
        raise NotImplementedError

    def _transform(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _inverse(self, C: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # ------------------------------------------------------------------ persistence
    def _state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Arrays and JSON needed to rebuild the fitted model (subclasses extend)."""
        return {"components_": self.components_, "offset_": self.offset_}, {}

    def _restore(self, arrays: dict[str, np.ndarray], extra: dict[str, Any]) -> None:
        self.components_, self.offset_ = arrays["components_"], arrays["offset_"]

    def save(self, path: str | Path) -> Path:
        """Write the fitted model to one safetensors file with a JSON header (never pickle).

        Example:
            >>> path = concepts.save(getfixture("tmp_path") / "nmf8.safetensors")
            >>> path.name
            'nmf8.safetensors'
        """
        return save_bundle(path, _FORMAT, *self._bundle())

    def _bundle(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The arrays and the JSON metadata :meth:`save` writes (results that hold concept models embed them)."""
        self._check_fitted()
        arrays, extra = self._state()
        meta = {
            "class": self.name,
            "n_concepts": self.n_concepts,
            "params": self._saved_params(),
            "layer": self.layer_,
            "model_name": self.model_name_,
            "n_features_in": self.n_features_in_,
            "fit_info": self.fit_info_,
            "extra": extra,
        }
        return arrays, meta

    def _saved_params(self) -> dict[str, Any]:
        """The constructor parameters other than ``n_concepts``."""
        return {key: value for key, value in self.get_params(deep=False).items() if key != "n_concepts"}

    @classmethod
    def _init_params(cls, saved: dict[str, Any]) -> dict[str, Any]:
        """Constructor keyword arguments from the parameters stored in a saved file (subclasses map old layouts)."""
        return saved

    @classmethod
    def load(cls, path: str | Path) -> "ConceptModel":
        """Read a model written by :meth:`save`; ``ConceptModel.load`` returns the right subclass.

        Example:
            >>> path = concepts.save(getfixture("tmp_path") / "nmf8.safetensors")
            >>> again = ConceptModel.load(path)  # the class is read from the file
            >>> again
            NMFConcepts(8, estimator_params={'random_state': 0}, ..., nonnegative='shift', ...) [fitted on 32 features]
            >>> np.array_equal(again.transform(store[:5]), concepts.transform(store[:5]))
            True
        """
        arrays, meta = load_bundle(path, _FORMAT)
        return cls._from_bundle(arrays, meta, path)

    @classmethod
    def _from_bundle(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any], source) -> ConceptModel:
        """Rebuild a model from what :meth:`_bundle` gave (``source`` names the file in errors)."""
        klass = CONCEPT_MODELS.get(meta["class"])
        if klass is None:
            raise ValueError(
                f"{source} holds an unknown concept model {meta['class']!r}; known: "
                f"{', '.join(sorted(CONCEPT_MODELS))} (import the module that defines it first)"
            )
        if cls is not ConceptModel and not issubclass(klass, cls):
            raise ValueError(f"{source} holds a {klass.__name__}, not a {cls.__name__}")
        model = klass(meta["n_concepts"], **klass._init_params(meta["params"]))
        model.layer_, model.n_features_in_, model.fit_info_ = meta["layer"], meta["n_features_in"], meta["fit_info"]
        model.model_name_ = meta.get("model_name")  # files written before it existed: unknown
        model._restore(arrays, meta["extra"])
        return model

    def __repr__(self) -> str:
        params = "".join(f", {k}={v!r}" for k, v in self._saved_params().items())
        state = f"fitted on {self.n_features_in_} features" if self.is_fitted else "not fitted"
        return f"{type(self).__name__}({self.n_concepts}{params}) [{state}]"


# ---------------------------------------------------------------------- scikit-learn wrappers
def _json_scalar(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, np.generic))


class SklearnConcepts(ConceptModel):
    """A scikit-learn decomposition or clustering estimator used as a concept model.

    Args:
        n_concepts: number of concepts (the estimator's ``n_components`` or ``n_clusters``).
        estimator_params: keyword arguments of the wrapped estimator's constructor, such as
            ``{"random_state": 0}``; ``estimator_`` is the fitted scikit-learn object.
        max_fit_rows: a store with more rows is fitted on a random sample of that size, or streamed through
            ``partial_fit`` for estimators that have it (``fit_info_["mode"]`` says which).
        stream_epochs: passes over the store when streaming.

    Example:
        >>> pca = PCAConcepts(16, estimator_params={"random_state": 0}).fit(store)
        >>> type(pca.estimator_).__name__, round(float(pca.estimator_.explained_variance_ratio_.sum()), 3)
        ('PCA', 0.928)
        >>> PCAConcepts(4, max_fit_rows=300).fit(store).fit_info_  # PCA has no partial_fit: fitted on a sample
        {'rows': 775, 'mode': 'sample', 'sampled_rows': 300}
    """

    estimator_class: ClassVar[Any] = None
    size_param: ClassVar[str] = "n_components"
    undercomplete: ClassVar[bool] = False

    def __init__(
        self,
        n_concepts: int,
        *,
        estimator_params: dict[str, Any] | None = None,
        max_fit_rows: int = 200_000,
        stream_epochs: int = 1,
    ):
        super().__init__(n_concepts)
        self.estimator_params = estimator_params
        self.max_fit_rows = max_fit_rows
        self.stream_epochs = stream_epochs

    @classmethod
    def _init_params(cls, saved):
        # files written before estimator_params existed store the estimator's arguments next to the others
        own = {key: value for key, value in saved.items() if key in cls._get_param_names()}
        legacy = {key: value for key, value in saved.items() if key not in own}
        if legacy:
            own["estimator_params"] = {**(own.get("estimator_params") or {}), **legacy}
        return own

    def _check_params(self) -> None:
        super()._check_params()
        check_int("max_fit_rows", self.max_fit_rows, minimum=1)
        check_int("stream_epochs", self.stream_epochs, minimum=1)
        params = self.estimator_params
        if params is not None and not isinstance(params, dict):
            raise TypeError(f"estimator_params must be a dict of keyword arguments or None, got {params!r}")
        params = params or {}
        if self.size_param in params:
            raise ValueError(f"pass the number of concepts as n_concepts, not {self.size_param}")
        if params.get("split_sign"):
            raise ValueError("split_sign=True doubles the coefficients and breaks the concept API; leave it False")

    def _new_estimator(self):
        return self.estimator_class(**{self.size_param: self.n_concepts}, **(self.estimator_params or {}))

    def _check_size(self, n_rows: int, n_features: int) -> None:
        if self.undercomplete and self.n_concepts > n_features:
            raise ValueError(
                f"{type(self).__name__} finds at most as many concepts as features: n_concepts="
                f"{self.n_concepts} > {n_features} features. Use fewer concepts, or an overcomplete "
                "method (NMF, dictionary learning, sparse autoencoder)"
            )

    def _prepare(self, X: np.ndarray) -> np.ndarray:
        """Map raw activations to the estimator's input space (identity except for NMF)."""
        return X

    def _fit(self, X) -> None:
        from interp_widgets.concepts.activations import ActivationStore

        self.estimator_ = self._new_estimator()
        if not isinstance(X, ActivationStore) or len(X) <= self.max_fit_rows:
            self.estimator_.fit(self._prepare_fit(_as_matrix(X)))
            self.fit_info_["mode"] = "full"
        elif hasattr(self.estimator_, "partial_fit"):
            self._prepare_fit_stream(X)
            batch = max(self.n_concepts, int(getattr(self.estimator_, "batch_size", None) or 4096))
            for epoch in range(self.stream_epochs):
                for block in X.minibatches(batch, seed=epoch):
                    if len(block) >= self.n_concepts:
                        self.estimator_.partial_fit(self._prepare(block))
            self.fit_info_.update(mode="streamed", epochs=self.stream_epochs)
        else:
            self.estimator_.fit(self._prepare_fit(X.sample(self.max_fit_rows)))
            self.fit_info_.update(mode="sample", sampled_rows=self.max_fit_rows)

    def _prepare_fit(self, X: np.ndarray) -> np.ndarray:
        return self._prepare(X)

    def _prepare_fit_stream(self, store) -> None:
        """Called once before streaming a store through ``partial_fit``."""

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return self.estimator_.transform(self._prepare(X))

    def _inverse(self, C: np.ndarray) -> np.ndarray:
        return self.estimator_.inverse_transform(C)

    def _state(self):
        arrays, extra = super()._state()
        scalars = {}
        for key, value in vars(self.estimator_).items():
            if not (key.endswith("_") or key.startswith("_")):
                continue
            if isinstance(value, np.ndarray) and value.dtype != object:
                arrays[f"estimator.{key}"] = value
            elif _json_scalar(value):
                scalars[key] = value.item() if isinstance(value, np.generic) else value
        extra["estimator_state"] = scalars
        return arrays, extra

    def _restore(self, arrays, extra) -> None:
        super()._restore(arrays, extra)
        self.estimator_ = self._new_estimator()
        for key, value in extra["estimator_state"].items():
            setattr(self.estimator_, key, value)
        for key, value in arrays.items():
            if key.startswith("estimator."):
                setattr(self.estimator_, key[len("estimator.") :], value)


class PCAConcepts(SklearnConcepts):
    """Principal components as concepts (wraps ``sklearn.decomposition.PCA``); coefficients are signed.

    Example:
        >>> PCAConcepts(10).fit(store).components_.shape
        (10, 32)
    """

    name = "pca"
    affine_encoder = True
    undercomplete = True

    @property
    def estimator_class(self):
        from sklearn.decomposition import PCA

        return PCA


class IncrementalPCAConcepts(PCAConcepts):
    """PCA fitted batch by batch (wraps ``sklearn.decomposition.IncrementalPCA``); streams large stores.

    Example:
        >>> IncrementalPCAConcepts(10, max_fit_rows=500).fit(store).fit_info_  # 775 rows > 500: streamed
        {'rows': 775, 'mode': 'streamed', 'epochs': 1}
    """

    name = "incremental_pca"

    @property
    def estimator_class(self):
        from sklearn.decomposition import IncrementalPCA

        return IncrementalPCA


class SVDConcepts(SklearnConcepts):
    """Truncated SVD directions (wraps ``sklearn.decomposition.TruncatedSVD``; no centring).

    Example:
        >>> SVDConcepts(10, estimator_params={"random_state": 0}).fit(store).transform(store).shape
        (775, 10)
    """

    name = "svd"
    affine_encoder = True
    undercomplete = True

    @property
    def estimator_class(self):
        from sklearn.decomposition import TruncatedSVD

        return TruncatedSVD

    def _check_size(self, n_rows, n_features):
        if self.n_concepts >= n_features:
            raise ValueError(
                f"TruncatedSVD needs n_concepts < features; got n_concepts={self.n_concepts} for "
                f"{n_features} features. Use fewer concepts or PCAConcepts"
            )


class ICAConcepts(SklearnConcepts):
    """Independent components (wraps ``sklearn.decomposition.FastICA``); directions are ``mixing_.T``.

    Example:
        >>> ica = ICAConcepts(8, estimator_params={"random_state": 0}).fit(store)
        >>> ica.components_.shape, np.allclose(ica.components_, ica.estimator_.mixing_.T, atol=1e-5)
        ((8, 32), True)
    """

    name = "ica"
    affine_encoder = True
    undercomplete = True

    @property
    def estimator_class(self):
        from sklearn.decomposition import FastICA

        return FastICA


class KMeansConcepts(SklearnConcepts):
    """Cluster centres as concepts (wraps ``sklearn.cluster.KMeans``).

    ``transform`` returns the one-hot cluster assignment, so ``inverse_transform`` gives each row its centre and
    ``components_`` are the centres. ``distances(X)`` is scikit-learn's ``transform`` (distance to each centre).

    Example:
        >>> kmeans = KMeansConcepts(12, estimator_params={"random_state": 0}).fit(store)
        >>> C = kmeans.transform(store)
        >>> C.shape, bool((C.sum(1) == 1).all())  # one-hot rows
        ((775, 12), True)
        >>> bool((C.argmax(1) == kmeans.estimator_.labels_).all())  # the hot column is the row's cluster
        True
        >>> np.allclose(kmeans.inverse_transform(C[:4]), kmeans.components_[C[:4].argmax(1)])  # its centre
        True
    """

    name = "kmeans"
    size_param = "n_clusters"

    @property
    def estimator_class(self):
        from sklearn.cluster import KMeans

        return KMeans

    def _transform(self, X):
        labels = self.estimator_.predict(X)
        return np.eye(self.n_concepts, dtype=np.float32)[labels]

    def _inverse(self, C):
        return C @ self.estimator_.cluster_centers_

    def distances(self, X) -> np.ndarray:
        """Distance of every row to every centre (scikit-learn's ``KMeans.transform``).

        Example:
            >>> kmeans = KMeansConcepts(12, estimator_params={"random_state": 0}).fit(store)
            >>> d = kmeans.distances(store[:3])
            >>> d.shape
            (3, 12)
            >>> (d.argmin(1) == kmeans.transform(store[:3]).argmax(1)).all()  # each row's cluster is its nearest centre
            np.True_
        """
        return self.estimator_.transform(self._check_input(X))


class MiniBatchKMeansConcepts(KMeansConcepts):
    """K-means by minibatches (wraps ``sklearn.cluster.MiniBatchKMeans``); streams large stores.

    Example:
        >>> mbk = MiniBatchKMeansConcepts(8, estimator_params={"random_state": 0, "n_init": 1}, max_fit_rows=500)
        >>> mbk.fit(store).fit_info_
        {'rows': 775, 'mode': 'streamed', 'epochs': 1}
        >>> mbk.components_.shape
        (8, 32)
    """

    name = "minibatch_kmeans"

    @property
    def estimator_class(self):
        from sklearn.cluster import MiniBatchKMeans

        return MiniBatchKMeans


class DictionaryLearningConcepts(SklearnConcepts):
    """Sparse dictionary learning (wraps ``sklearn.decomposition.DictionaryLearning``); may be overcomplete.

    Example:
        >>> params = {"alpha": 0.5, "max_iter": 2, "random_state": 0}
        >>> dl = DictionaryLearningConcepts(48, estimator_params=params).fit(store[:60])  # overcomplete: 48 > 32
        >>> C = dl.transform(store[:60])
        >>> C.shape, round(float((C == 0).mean()), 2)  # shape and fraction of zero coefficients
        ((60, 48), 0.94)
    """

    name = "dictionary_learning"

    @property
    def estimator_class(self):
        from sklearn.decomposition import DictionaryLearning

        return DictionaryLearning


class MiniBatchDictionaryLearningConcepts(DictionaryLearningConcepts):
    """Dictionary learning by minibatches (wraps ``MiniBatchDictionaryLearning``); streams large stores.

    Example:
        >>> params = {"alpha": 0.5, "max_iter": 2, "batch_size": 32, "random_state": 0}
        >>> mdl = MiniBatchDictionaryLearningConcepts(48, estimator_params=params).fit(store[:100])
        >>> mdl.components_.shape, mdl.estimator_.n_steps_
        ((48, 32), 8)
    """

    name = "minibatch_dictionary_learning"

    @property
    def estimator_class(self):
        from sklearn.decomposition import MiniBatchDictionaryLearning

        return MiniBatchDictionaryLearning


NONNEGATIVE_CHOICES = ("shift", "relu")


class NMFConcepts(SklearnConcepts):
    """Non-negative matrix factorisation (wraps ``sklearn.decomposition.NMF``) with an explicit sign policy.

    Args:
        n_concepts: number of concepts (may exceed the number of features).
        nonnegative: how signed activations become non-negative: ``"shift"`` (subtract the training minimum per
            feature, add it back when decoding) or ``"relu"`` (keep the positive part). ``None`` (default) accepts
            only non-negative data and raises a ValueError otherwise. For signed directions use
            :class:`SemiNMFConcepts`.
        estimator_params, max_fit_rows, stream_epochs: as for :class:`SklearnConcepts`.

    Example:
        >>> params = {"random_state": 0, "max_iter": 1000}
        >>> nmf = NMFConcepts(12, nonnegative="shift", estimator_params=params).fit(store)
        >>> nmf.fit_info_["nonnegative"], nmf.shift_.shape, bool((nmf.shift_ <= 0).all())
        ('shift', (32,), True)
        >>> NMFConcepts(4).fit(store)  # signed activations need a sign policy
        Traceback (most recent call last):
            ...
        ValueError: NMF needs non-negative data but these activations go down to ...
    """

    name = "nmf"

    def __init__(
        self,
        n_concepts: int,
        *,
        nonnegative: str | None = None,
        estimator_params: dict[str, Any] | None = None,
        max_fit_rows: int = 200_000,
        stream_epochs: int = 1,
    ):
        super().__init__(
            n_concepts, estimator_params=estimator_params, max_fit_rows=max_fit_rows, stream_epochs=stream_epochs
        )
        self.nonnegative = nonnegative

    def _check_params(self) -> None:
        super()._check_params()
        if self.nonnegative is not None and self.nonnegative not in NONNEGATIVE_CHOICES:
            raise ValueError(
                f"unknown nonnegative={self.nonnegative!r}; use one of {NONNEGATIVE_CHOICES}, or None "
                "for data that is already non-negative"
            )

    @property
    def estimator_class(self):
        from sklearn.decomposition import NMF

        return NMF

    def _prepare_fit(self, X: np.ndarray) -> np.ndarray:
        self._set_shift(X.min(axis=0))
        return self._prepare(X)

    def _prepare_fit_stream(self, store) -> None:
        low = np.full(store.dim, np.inf, dtype=np.float32)
        for _, block in store.iter_chunks():
            low = np.minimum(low, block.min(axis=0))
        self._set_shift(low)

    def _set_shift(self, minimum: np.ndarray) -> None:
        if self.nonnegative is None and (minimum < 0).any():
            raise ValueError(
                f"NMF needs non-negative data but these activations go down to {float(minimum.min()):.3g}. "
                "Choose how to handle signs: NMFConcepts(..., nonnegative='shift') or nonnegative='relu', "
                "or use SemiNMFConcepts (signed directions, non-negative coefficients)"
            )
        self.shift_ = np.minimum(minimum, 0).astype(np.float32) if self.nonnegative == "shift" else None
        self.fit_info_["nonnegative"] = self.nonnegative or "data already non-negative"

    def _prepare(self, X: np.ndarray) -> np.ndarray:
        if self.shift_ is not None:
            X = X - self.shift_
        return np.maximum(X, 0) if self.nonnegative else X

    def _inverse(self, C):
        X = self.estimator_.inverse_transform(C)
        return X + self.shift_ if self.shift_ is not None else X

    def _check_input(self, X):
        X = super()._check_input(X)
        if self.nonnegative is None and (X < 0).any():
            raise ValueError(
                "this NMF model was fitted without a sign policy and X has negative values; refit with "
                "nonnegative='shift' or 'relu'"
            )
        return X

    def _state(self):
        arrays, extra = super()._state()
        if self.shift_ is not None:
            arrays["shift_"] = self.shift_
        return arrays, extra

    def _restore(self, arrays, extra):
        super()._restore(arrays, extra)
        self.shift_ = arrays.get("shift_")


class MiniBatchNMFConcepts(NMFConcepts):
    """NMF by minibatches (wraps ``sklearn.decomposition.MiniBatchNMF``); streams large stores.

    Example:
        >>> mbnmf = MiniBatchNMFConcepts(16, nonnegative="relu", estimator_params={"random_state": 0}, max_fit_rows=500)
        >>> mbnmf.fit(store).fit_info_
        {'rows': 775, 'nonnegative': 'relu', 'mode': 'streamed', 'epochs': 1}
    """

    name = "minibatch_nmf"

    @property
    def estimator_class(self):
        from sklearn.decomposition import MiniBatchNMF

        return MiniBatchNMF


# ---------------------------------------------------------------------- semi-NMF
def _pos(A: torch.Tensor) -> torch.Tensor:
    return (A.abs() + A) / 2


def _neg(A: torch.Tensor) -> torch.Tensor:
    return (A.abs() - A) / 2


class SemiNMFConcepts(ConceptModel):
    """Semi-NMF: ``X ≈ C @ D`` with non-negative coefficients ``C`` and signed directions ``D``, on raw activations.

    Multiplicative updates of Ding, Li & Jordan (2010): ``D`` is the least-squares solution given ``C``, and
    ``C ← C ⊙ sqrt(((XDᵀ)⁺ + C(DDᵀ)⁻) / ((XDᵀ)⁻ + C(DDᵀ)⁺))``. Initialised from k-means assignments (+0.2).
    ``transform`` runs the ``C`` update with ``D`` fixed.

    Args:
        n_concepts: number of concepts.
        max_iter, tol: update rounds at most, and the stop when the relative error improves by less than ``tol``.
        transform_iter: update rounds of ``transform``.
        random_state: seed of the k-means initialisation.
        max_fit_rows: a store is fitted on a random sample of at most that many rows.

    Example:
        >>> semi = SemiNMFConcepts(8, max_iter=50, transform_iter=20, random_state=0).fit(store)
        >>> C = semi.transform(store[:50])
        >>> bool((C >= 0).all()), bool((semi.components_ < 0).any())  # non-negative coefficients, signed directions
        (True, True)
        >>> semi.fit_info_["n_iter"], round(semi.fit_info_["relative_error"], 3)
        (50, 0.34)
    """

    name = "semi_nmf"

    def __init__(
        self,
        n_concepts: int,
        *,
        max_iter: int = 200,
        transform_iter: int = 100,
        tol: float = 1e-5,
        random_state: int = 0,
        max_fit_rows: int = 200_000,
    ):
        super().__init__(n_concepts)
        self.max_iter = max_iter
        self.transform_iter = transform_iter
        self.tol = tol
        self.random_state = random_state
        self.max_fit_rows = max_fit_rows

    def _check_params(self) -> None:
        super()._check_params()
        check_int("max_iter", self.max_iter, minimum=1)
        check_int("transform_iter", self.transform_iter, minimum=0)
        check_int("max_fit_rows", self.max_fit_rows, minimum=1)
        if not isinstance(self.tol, (int, float, np.floating)) or isinstance(self.tol, bool) or self.tol < 0:
            raise ValueError(f"tol must be a number >= 0, got {self.tol!r}")

    def _fit(self, X) -> None:
        from sklearn.cluster import KMeans

        from interp_widgets.concepts.activations import ActivationStore

        if isinstance(X, ActivationStore):
            X = X.sample(self.max_fit_rows, seed=self.random_state)
        X = _as_matrix(X)
        labels = KMeans(self.n_concepts, n_init=1, random_state=self.random_state).fit_predict(X)
        Xt = torch.from_numpy(X).double()
        C = torch.from_numpy(np.eye(self.n_concepts)[labels] + 0.2)
        previous = np.inf
        for iteration in range(self.max_iter):
            D = torch.linalg.lstsq(C, Xt).solution
            C = self._update(Xt, C, D)
            error = float(torch.linalg.norm(Xt - C @ D) / torch.linalg.norm(Xt))
            if previous - error < self.tol:
                break
            previous = error
        self.D_ = torch.linalg.lstsq(C, Xt).solution.float().numpy()
        self.fit_info_.update(n_iter=iteration + 1, relative_error=error, nonnegative="semi-NMF (signed directions)")

    @staticmethod
    def _update(X: torch.Tensor, C: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
        XD, DD = X @ D.T, D @ D.T
        numerator = _pos(XD) + C @ _neg(DD)
        denominator = _neg(XD) + C @ _pos(DD)
        return C * torch.sqrt(numerator / denominator.clamp_min(1e-12))

    def _transform(self, X: np.ndarray) -> np.ndarray:
        Xt, D = torch.from_numpy(X).double(), torch.from_numpy(self.D_).double()
        C = (Xt @ torch.linalg.pinv(D)).clamp_min(0) + 1e-3
        for _ in range(self.transform_iter):
            C = self._update(Xt, C, D)
        return C.float().numpy()

    def _inverse(self, C: np.ndarray) -> np.ndarray:
        return C @ self.D_

    def _state(self):
        arrays, extra = super()._state()
        arrays["D_"] = self.D_
        return arrays, extra

    def _restore(self, arrays, extra):
        super()._restore(arrays, extra)
        self.D_ = arrays["D_"]


# ---------------------------------------------------------------------- the neurons themselves
class NeuronsAsConcepts(ConceptModel):
    """Every neuron of the layer as a concept: the identity, ``transform(X) = X`` and ``components_`` the unit vectors.

    Interpreto's ``NeuronsAsConcepts``: nothing is learnt. ``n_concepts`` must be the layer width, and ``fit`` only
    checks that the activations have that width (and records their layer and model, as every concept model does),
    so the neurons go through the same API as learnt concepts (concept importance, interpretation, the browser).

    Args:
        n_concepts: the layer width (one concept per neuron).

    Example:
        >>> neurons = NeuronsAsConcepts(32).fit(store)
        >>> np.array_equal(neurons.transform(store[:3]), store[:3]), neurons.components_.shape
        (True, (32, 32))
        >>> NeuronsAsConcepts(8).fit(store)
        Traceback (most recent call last):
        ...
        ValueError: NeuronsAsConcepts has one concept per neuron, so n_concepts must be the layer width: got n_concepts=8 for 32 features; use NeuronsAsConcepts(32)
    """

    name = "neurons"
    affine_encoder = True
    learns_from_rows = False

    def _check_size(self, n_rows: int, n_features: int) -> None:
        if self.n_concepts != n_features:
            raise ValueError(
                f"NeuronsAsConcepts has one concept per neuron, so n_concepts must be the layer width: got "
                f"n_concepts={self.n_concepts} for {n_features} features; use NeuronsAsConcepts({n_features})"
            )

    def _fit(self, X) -> None:
        self.fit_info_["mode"] = "identity (nothing fitted)"

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return X

    def _inverse(self, C: np.ndarray) -> np.ndarray:
        return C

    def _affine_decoder(self):
        return np.eye(self.n_concepts, dtype=np.float32), np.zeros(self.n_concepts, dtype=np.float32)

    def _affine_encoder(self):
        return self._affine_decoder()

    def _state(self):
        return {}, {}  # the identity is rebuilt on load rather than stored (a 4096-wide layer: 64 MB)

    def _restore(self, arrays, extra):
        self.components_, self.offset_ = self._affine_decoder()


# ---------------------------------------------------------------------- sparse PCA
class SparsePCAConcepts(SklearnConcepts):
    """Sparse principal components (wraps ``sklearn.decomposition.SparsePCA``): sparse directions, signed coefficients.

    The directions solve ``min ||X − mean − U V||² + alpha ||V||₁`` (``V`` = ``components_``); ``transform`` is
    scikit-learn's ridge projection of the centred rows on them (``ridge_alpha``), an affine map, so the encoder is
    differentiable. Interpreto 0.5.2's ``SparsePCAConcepts`` wraps the same estimator (through Overcomplete's
    ``SkSparsePCA``) with ``alpha = sparsity`` (default 1), ``method="cd"`` and ``tol=1e-3``; pass
    ``estimator_params={"alpha": ..., "method": "cd", "tol": 1e-3, "random_state": ...}`` for the same fit (the
    tests check equality to 1e-5). Without them scikit-learn's defaults apply (``method="lars"``, ``tol=1e-8``).

    Example:
        >>> spca = SparsePCAConcepts(6, estimator_params={"alpha": 1.0, "method": "cd", "tol": 1e-3, "random_state": 0})
        >>> spca = spca.fit(store[:300])
        >>> spca.components_.shape, bool((spca.estimator_.components_ == 0).mean() > 0.2)  # sparse directions
        ((6, 32), True)
        >>> spca.transform(store[:4]).shape
        (4, 6)
    """

    name = "sparse_pca"
    affine_encoder = True

    @property
    def estimator_class(self):
        from sklearn.decomposition import SparsePCA

        return SparsePCA


# ---------------------------------------------------------------------- convex NMF
CONVEX_NMF_UPDATES = ("paper", "interpreto")


class ConvexNMFConcepts(ConceptModel):
    """Convex NMF (Ding, Li & Jordan, 2010): ``X ≈ Z D`` with ``D = W X``, ``Z ≥ 0`` and ``W ≥ 0``, on raw activations.

    Every direction is a non-negative combination of training rows, so concepts stay inside the cone of the data.
    Fitting runs the multiplicative updates of Interpreto 0.5.2's ``ConvexNMFConcepts`` (Overcomplete's ``ConvexNMF``
    with ``solver="mu"``): the same random initialisation (``|N(0, 1)| · sqrt(mean|X| / n_concepts)`` for ``Z``, then
    for ``W``, drawn from a generator seeded with ``random_state``, which is Interpreto's draw after
    ``torch.manual_seed(random_state)``), the same updates (with the ``1e-10`` guards) and the same stop
    (``||Z − Z_old|| / ||Z|| ≤ tol``). The ``W`` update is the paper's (``update="paper"``, the default):
    Overcomplete's multiplies by ``W Z Zᵀ`` where the paper has ``Zᵀ Z W`` (a ``k × n`` product either way), which
    breaks the paper's monotone decrease of the error; without ``strict_convex`` its ``W`` grows without bound (to
    NaN within 500 iterations on Gaussian rows), and with it the error stalls above the paper rule's.
    ``update="interpreto"`` runs Overcomplete's rule, whose dictionary equals Interpreto's under the same seed (the
    tests check 1e-5). The updates read the
    positive and negative parts of the rows' Gram matrix ``X Xᵀ``; they are computed once and every product is
    ordered to cost ``rows² × n_concepts`` per iteration (Interpreto recomputes the Gram matrix and multiplies two
    ``rows × rows`` matrices each iteration, ``rows³``).

    The two ``rows × rows`` float32 parts bound the rows: ``max_rows`` (default 10,000, 800 MB) is a stated cap and
    ``fit`` refuses more rows with a ValueError naming the fix (a random subsample such as
    ``store.sample(max_rows)``). Interpreto builds ``X Xᵀ`` and several more ``rows × rows`` matrices with no cap.

    ``transform`` solves ``min ||X − Z D||² s.t. Z ≥ 0`` for new rows with ``D`` fixed, by ``transform_iter``
    semi-NMF multiplicative updates (as :class:`SemiNMFConcepts`) from the clipped least-squares codes, so a row's
    codes do not depend on the other rows of the batch. (Interpreto's encoder restarts from random codes and reuses
    the rows being encoded as the basis of ``D``, which only matches the fitted ``D`` on the training rows and needs
    exactly as many rows.)

    Args:
        n_concepts: number of concepts.
        max_iter, tol: update rounds at most, and the relative change of ``Z`` that stops them (0: never stop early).
        transform_iter: update rounds of ``transform``.
        strict_convex: rescale each row of ``W`` to sum to 1 after every update (Interpreto's option).
        random_state: seed of the initialisation.
        max_rows: the row cap (see above).
        update: ``"paper"`` (Ding et al.'s ``W`` update) or ``"interpreto"`` (Overcomplete's, for comparison).

    Example:
        >>> cnmf = ConvexNMFConcepts(6, max_iter=100, random_state=0).fit(store[:300])
        >>> C = cnmf.transform(store[:5])
        >>> C.shape, bool((C >= 0).all()), bool((cnmf.W_ >= 0).all())
        ((5, 6), True, True)
        >>> np.allclose(cnmf.components_, cnmf.W_ @ store[:300], atol=1e-3)  # directions combine training rows
        True
        >>> ConvexNMFConcepts(4, max_rows=200).fit(store[:300])
        Traceback (most recent call last):
        ...
        ValueError: ConvexNMFConcepts holds two rows × rows matrices (0.00 GB at 300 rows) and refuses more than max_rows=200 rows; fit it on a random subsample (store.sample(200), or X[rng.choice(len(X), 200, replace=False)]), or raise max_rows if the memory is there
    """

    name = "convex_nmf"

    def __init__(
        self,
        n_concepts: int,
        *,
        max_iter: int = 500,
        tol: float = 1e-4,
        transform_iter: int = 300,
        strict_convex: bool = False,
        random_state: int = 0,
        max_rows: int = 10_000,
        update: str = "paper",
    ):
        super().__init__(n_concepts)
        self.update = update
        self.max_iter = max_iter
        self.tol = tol
        self.transform_iter = transform_iter
        self.strict_convex = strict_convex
        self.random_state = random_state
        self.max_rows = max_rows

    def _check_params(self) -> None:
        super()._check_params()
        check_int("max_iter", self.max_iter, minimum=1)
        check_int("transform_iter", self.transform_iter, minimum=0)
        check_int("random_state", self.random_state, minimum=0)
        check_int("max_rows", self.max_rows, minimum=1)
        check_choice("update", self.update, CONVEX_NMF_UPDATES)
        if not isinstance(self.tol, (int, float, np.floating)) or isinstance(self.tol, bool) or self.tol < 0:
            raise ValueError(f"tol must be a number >= 0, got {self.tol!r}")
        if not isinstance(self.strict_convex, bool):
            raise TypeError(f"strict_convex must be True or False, got {self.strict_convex!r}")

    def _check_size(self, n_rows: int, n_features: int) -> None:
        if n_rows > self.max_rows:
            gb = 2 * 4 * n_rows**2 / 1e9
            raise ValueError(
                f"ConvexNMFConcepts holds two rows × rows matrices ({gb:.2f} GB at {n_rows} rows) and refuses more "
                f"than max_rows={self.max_rows} rows; fit it on a random subsample (store.sample({self.max_rows}), or "
                f"X[rng.choice(len(X), {self.max_rows}, replace=False)]), or raise max_rows if the memory is there"
            )

    def _fit(self, X) -> None:
        from interp_widgets.concepts.activations import ActivationStore

        A = torch.from_numpy(np.ascontiguousarray(X[:] if isinstance(X, ActivationStore) else _as_matrix(X)))
        n, k, eps = A.shape[0], self.n_concepts, 1e-10
        generator = torch.Generator().manual_seed(self.random_state)
        mu = torch.sqrt(A.abs().mean() / k)
        Z = torch.randn(n, k, generator=generator).mul_(mu).abs_()
        W = torch.randn(k, n, generator=generator).mul_(mu).abs_()
        if self.strict_convex:
            W = W / (W.sum(1, keepdim=True) + eps)
        gram = A @ A.T
        pos, neg = gram.clamp_min(0), (-gram).clamp_min_(0)
        del gram
        for iteration in range(self.max_iter):
            Z_old = Z
            # Z ← Z ⊙ sqrt((G⁺Wᵀ + Z W G⁻ Wᵀ) / (G⁻Wᵀ + Z W G⁺ Wᵀ)), the k × k products first
            pos_wt, neg_wt = pos @ W.T, neg @ W.T
            numerator = pos_wt + Z @ (W @ neg_wt)
            denominator = neg_wt + Z @ (W @ pos_wt)
            Z = Z * torch.sqrt(numerator / (denominator + eps) + eps)
            zt_pos, zt_neg = Z.T @ pos, Z.T @ neg
            if self.update == "paper":
                # W ← W ⊙ sqrt((Zᵀ G⁺ + Zᵀ Z W G⁻) / (Zᵀ G⁻ + Zᵀ Z W G⁺)); G is symmetric: W G± = (G± Wᵀ)ᵀ
                ztz = Z.T @ Z
                numerator, denominator = zt_pos + ztz @ neg_wt.T, zt_neg + ztz @ pos_wt.T
            else:
                # Overcomplete's rule: W Z Zᵀ where the paper has Zᵀ Z W
                wz = W @ Z
                numerator, denominator = zt_pos + wz @ zt_neg, zt_neg + wz @ zt_pos
            W = W * torch.sqrt(numerator / (denominator + eps) + eps)
            if self.strict_convex:
                W = W / (W.sum(1, keepdim=True) + eps)
            if self.tol > 0 and torch.linalg.norm(Z - Z_old) / torch.linalg.norm(Z) <= self.tol:
                break
        self.W_ = W.numpy()
        self.D_ = (W @ A).numpy()
        error = float(torch.linalg.norm(A - Z @ (W @ A)) / torch.linalg.norm(A).clamp_min(1e-12))
        self.fit_info_.update(n_iter=iteration + 1, relative_error=error, nonnegative="convex NMF (Z ≥ 0, W ≥ 0)")

    def _transform(self, X: np.ndarray) -> np.ndarray:
        Xt, D = torch.from_numpy(X).double(), torch.from_numpy(self.D_).double()
        Z = (Xt @ torch.linalg.pinv(D)).clamp_min(0) + 1e-3
        for _ in range(self.transform_iter):
            Z = SemiNMFConcepts._update(Xt, Z, D)
        return Z.float().numpy()

    def _inverse(self, C: np.ndarray) -> np.ndarray:
        return C @ self.D_

    def _affine_decoder(self):
        return self.D_, np.zeros(self.D_.shape[1], dtype=np.float32)

    def _state(self):
        arrays, extra = super()._state()
        arrays.update(D_=self.D_, W_=self.W_)
        return arrays, extra

    def _restore(self, arrays, extra):
        super()._restore(arrays, extra)
        self.D_, self.W_ = arrays["D_"], arrays["W_"]
