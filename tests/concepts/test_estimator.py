"""Every registered concept model follows scikit-learn's estimator conventions: get_params, clone, Pipeline,
fitted attributes set by fit only, NotFittedError; and save/load keeps working."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from sklearn.utils.estimator_checks import (
    check_get_params_invariance,
    check_no_attributes_set_in_init,
    check_set_params,
)
from sklearn.utils.validation import check_is_fitted

from interp_widgets.concepts import CONCEPT_MODELS, ConceptModel, NMFConcepts, PCAConcepts, SemiNMFConcepts
from interp_widgets.concepts._io import load_bundle, save_bundle

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

X = np.random.default_rng(0).normal(size=(120, 8)).astype(np.float32)

# small, fast, seeded settings per registered model (a model missing here is tested with its defaults)
FAST = {
    "svd": {"estimator_params": {"random_state": 0}},
    "ica": {"estimator_params": {"random_state": 0, "max_iter": 50}},
    "kmeans": {"estimator_params": {"random_state": 0, "n_init": 1}},
    "minibatch_kmeans": {"estimator_params": {"random_state": 0, "n_init": 1}},
    "dictionary_learning": {
        "estimator_params": {"random_state": 0, "max_iter": 3, "fit_algorithm": "cd", "transform_algorithm": "lasso_cd"}
    },
    "minibatch_dictionary_learning": {"estimator_params": {"random_state": 0, "max_iter": 2, "batch_size": 64}},
    "nmf": {"nonnegative": "shift", "estimator_params": {"random_state": 0, "max_iter": 50}},
    "minibatch_nmf": {"nonnegative": "shift", "estimator_params": {"random_state": 0}},
    "semi_nmf": {"max_iter": 20, "transform_iter": 20},
    "direction": {"directions": np.eye(3, 8, dtype=np.float32) + 0.1},
    "sae": {"max_epochs": 2, "batch_size": 64, "progress": False},
    "jumprelu_sae": {"max_epochs": 2, "batch_size": 64, "progress": False},
    "batchtopk_sae": {"max_epochs": 2, "batch_size": 64, "progress": False},
    "matryoshka_sae": {"max_epochs": 2, "batch_size": 64, "progress": False},
    "transcoder": {"max_epochs": 2, "batch_size": 64, "progress": False},
    "mp_sae": {"k": 2, "max_epochs": 2, "batch_size": 64, "progress": False},
    "sparse_pca": {"estimator_params": {"method": "cd", "tol": 1e-3, "random_state": 0}},
    "convex_nmf": {"max_iter": 20, "transform_iter": 20},
}
# concept counts other than 3: the neurons are as many as the features of X
SIZE = {"neurons": 8}
NAMES = sorted(CONCEPT_MODELS)


def same_params(a: dict, b: dict) -> bool:
    """Equal parameter dicts, comparing array-valued parameters (e.g. fixed directions) by value."""
    return a.keys() == b.keys() and all(
        np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) or isinstance(b[k], np.ndarray) else a[k] == b[k]
        for k in a
    )


def make(name: str) -> ConceptModel:
    return CONCEPT_MODELS[name](SIZE.get(name, 3), **FAST.get(name, {}))


@pytest.mark.parametrize("name", NAMES)
def test_parameters_are_stored_unchanged_and_round_trip(name):
    model = make(name)
    check_no_attributes_set_in_init(name, model)
    check_get_params_invariance(name, model)
    check_set_params(name, model)
    params = model.get_params()
    assert params["n_concepts"] == SIZE.get(name, 3) and same_params(type(model)(**params).get_params(), params)
    assert not [key for key in vars(model) if key.endswith("_")]  # fitted attributes are set by fit only


@pytest.mark.parametrize("name", NAMES)
def test_clone_pipeline_and_persistence(name, tmp_path):
    model = make(name)
    for method, args in (
        ("transform", (X,)),
        ("inverse_transform", (np.zeros((2, SIZE.get(name, 3))),)),
        ("save", (tmp_path / "unfitted.safetensors",)),
    ):
        with pytest.raises(NotFittedError, match=r"not fitted yet; call fit\(activations\) first"):
            getattr(model, method)(*args)
    with pytest.raises(NotFittedError):
        check_is_fitted(model)

    fitted = clone(model).fit(StandardScaler().fit_transform(X))
    check_is_fitted(fitted)
    assert not model.is_fitted and same_params(clone(fitted).get_params(), fitted.get_params())
    assert not clone(fitted).is_fitted
    expected = fitted.transform(StandardScaler().fit_transform(X))
    pipeline = make_pipeline(StandardScaler(), clone(model)).fit(X)
    np.testing.assert_allclose(pipeline.transform(X), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        make_pipeline(FunctionTransformer(), clone(model)).fit_transform(X),
        clone(model).fit(X).transform(X),
        rtol=1e-5,
        atol=1e-5,
    )

    loaded = ConceptModel.load(pipeline[-1].save(tmp_path / "model.safetensors"))
    assert type(loaded) is type(model) and same_params(loaded.get_params(), model.get_params())
    np.testing.assert_allclose(loaded.transform(StandardScaler().fit_transform(X)), expected, rtol=1e-5, atol=1e-5)


def test_estimator_arguments_go_in_estimator_params_only():
    with pytest.raises(TypeError, match="random_state"):  # the keyword style of the unreleased 0.1.0 is gone
        NMFConcepts(3, nonnegative="shift", random_state=0)


def test_files_saved_before_estimator_params_still_load(tmp_path, recwarn):
    path = PCAConcepts(3, estimator_params={"random_state": 0}).fit(X).save(tmp_path / "new.safetensors")
    arrays, meta = load_bundle(path, "interp_widgets.ConceptModel")
    meta["params"] = {"max_fit_rows": 200_000, "stream_epochs": 1, "random_state": 0}  # the version-1 layout
    old = save_bundle(tmp_path / "old.safetensors", "interp_widgets.ConceptModel", arrays, meta)
    loaded = ConceptModel.load(old)
    assert loaded.estimator_params == {"random_state": 0} and not recwarn.list
    np.testing.assert_allclose(loaded.transform(X), ConceptModel.load(path).transform(X))


def test_validation_happens_in_fit_with_named_fixes():
    model = SemiNMFConcepts(3, max_iter=0)  # stored as given
    assert model.max_iter == 0
    with pytest.raises(ValueError, match="max_iter must be an integer >= 1, got 0"):
        model.fit(X)
    with pytest.raises(TypeError, match="estimator_params must be a dict"):
        PCAConcepts(3, estimator_params=[("random_state", 0)]).fit(X)
    with pytest.raises(ValueError, match="unknown nonnegative='abs'"):
        NMFConcepts(3, nonnegative="abs").fit(np.abs(X))
