"""One TrainingConfig and one training loop for every sparse dictionary: the config is validated once and reaches the
loop whether it is passed as training= or as keyword arguments; get_params, set_params, clone and save/load keep it;
files saved with the flat training parameters of before still load; and the loop trains a kind whose target is not
its input (the seam transcoders use)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from interp_widgets.concepts import (
    CONCEPT_MODELS,
    BatchTopKSAE,
    ConceptModel,
    JumpReLUSAE,
    SparseAutoencoder,
    TrainingConfig,
    collect_activations,
)
from interp_widgets.concepts._io import load_bundle, save_bundle
from interp_widgets.concepts.training import Step, train_dictionary
from interp_widgets.demo import corpus

X = np.random.default_rng(0).normal(size=(400, 8)).astype(np.float32)
FAST = dict(max_epochs=3, batch_size=64, monitor_rows=50, progress=False)


def test_config_is_frozen_validated_once_and_shows_what_differs():
    config = TrainingConfig(lr=3e-3, max_epochs=5)
    assert repr(config) == "TrainingConfig(lr=0.003, max_epochs=5)" and repr(TrainingConfig()) == "TrainingConfig()"
    with pytest.raises(AttributeError):
        config.lr = 1.0
    for bad, message in (
        ({"lr": -1}, "lr must be a number >= 0"),
        ({"max_epochs": 0}, "max_epochs must be an integer >= 1"),
        ({"monitor_rows": -1}, "monitor_rows must be an integer >= 0"),
        ({"seed": 1.5}, "seed must be an integer >= 0"),
        ({"device": "gpu0"}, "device must be a torch device"),
    ):
        with pytest.raises(ValueError, match=message):
            TrainingConfig(**bad)
        with pytest.raises(ValueError, match=message):  # keyword arguments of a dictionary are checked the same way
            JumpReLUSAE(4, **bad)


def test_unknown_keyword_names_the_closest_field():
    with pytest.raises(TypeError, match="BatchTopKSAE got an unexpected keyword argument 'learning_rate'"):
        BatchTopKSAE(4, learning_rate=1e-3)
    with pytest.raises(TypeError, match="did you mean 'batch_size'"):
        SparseAutoencoder(4, batchsize=32)


@pytest.mark.parametrize("kind", [SparseAutoencoder, JumpReLUSAE, BatchTopKSAE])
def test_keywords_and_training_config_train_the_same(kind):
    by_keyword = kind(16, lr=3e-3, **FAST)
    by_config = kind(16, training=TrainingConfig(lr=3e-3, **FAST))
    assert by_keyword.get_params() == by_config.get_params()
    assert by_keyword.training == TrainingConfig(lr=3e-3, **FAST)
    overridden = kind(16, training=TrainingConfig(lr=1.0, **FAST), lr=3e-3)  # keywords override the config's fields
    assert overridden.training == by_config.training
    a, b = by_keyword.fit(X), clone(by_config).fit(X)
    for name in a.weights_:
        assert torch.equal(a.weights_[name], b.weights_[name])
    assert a.fit_info_["history"] == b.fit_info_["history"] and a.fit_info_["epochs"] == 3


def test_set_params_routes_training_fields_and_pipelines_can_tune_them():
    sae = SparseAutoencoder(8, max_epochs=4)
    assert sae.set_params(lr=3e-3, k=2) is sae and sae.training == TrainingConfig(lr=3e-3, max_epochs=4) and sae.k == 2
    pipeline = make_pipeline(StandardScaler(), SparseAutoencoder(8, progress=False))
    pipeline.set_params(sparseautoencoder__max_epochs=2, sparseautoencoder__batch_size=64).fit(X)
    assert pipeline[-1].fit_info_["epochs"] == 2 and pipeline[-1].training.batch_size == 64
    with pytest.raises(ValueError, match="Invalid parameter 'max_epoch'"):  # scikit-learn's own message
        SparseAutoencoder(8).set_params(max_epoch=2)


def test_widest_concept_model_constructor_has_at_most_12_named_parameters():
    widths = {
        name: sum(p.kind is not p.VAR_KEYWORD for p in inspect.signature(klass).parameters.values())
        for name, klass in CONCEPT_MODELS.items()
    }
    assert max(widths.values()) <= 12, widths
    assert widths["sae"] == 5  # n_concepts, activation, k, l1_coefficient, training


@pytest.mark.parametrize("kind", [SparseAutoencoder, JumpReLUSAE, BatchTopKSAE])
def test_saved_files_keep_the_config_and_old_flat_files_load(kind, tmp_path):
    sae = kind(16, lr=3e-3, **FAST).fit(X)
    path = sae.save(tmp_path / "new.safetensors")
    arrays, meta = load_bundle(path, "interp_widgets.ConceptModel")
    assert meta["params"]["training"] == {**vars(TrainingConfig()), "lr": 3e-3, **FAST}
    loaded = ConceptModel.load(path)
    assert loaded.get_params() == sae.get_params()
    # the layout written before TrainingConfig: the training parameters flat beside the SAE's own
    meta["params"] = {**{k: v for k, v in meta["params"].items() if k != "training"}, **meta["params"]["training"]}
    old = ConceptModel.load(save_bundle(tmp_path / "old.safetensors", "interp_widgets.ConceptModel", arrays, meta))
    assert type(old) is kind and old.get_params() == sae.get_params()
    np.testing.assert_array_equal(old.transform(X), sae.transform(X))
    untrained = ConceptModel.load(kind(16, progress=False).fit(X[:40]).save(tmp_path / "d.safetensors"))
    assert untrained.training == TrainingConfig(progress=False)


class _LinearTarget:
    """A toy dictionary kind trained on a target that is not its input: relu(x W_enc + b_enc) @ W_dec + b_dec ≈ y."""

    n_concepts = 24

    def _init_weights(self, x, y, generator):
        return {
            "W_enc": torch.randn(x.shape[1], self.n_concepts, generator=generator) * 0.3,
            "b_enc": torch.zeros(self.n_concepts),
            "W_dec": torch.randn(self.n_concepts, y.shape[1], generator=generator) * 0.1,
            "b_dec": y.mean(0).clone(),
        }

    def _normalise(self, x, w):
        return x

    def _normalise_target(self, y, w):
        return y - w["b_dec"]

    def _loss(self, xn, w, target=None):
        assert target is not None  # the loop passes the normalised target
        codes = torch.relu(xn @ w["W_enc"] + w["b_enc"])
        residual = target - codes @ w["W_dec"]
        return Step(residual.pow(2).mean(), (codes > 0).sum(0), residual)

    def _after_step(self, w):
        pass

    def _resample(self, w, dead, inputs, residual, generator):
        return 0


def test_the_loop_trains_towards_a_target_that_is_not_the_input():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(8, 12)), rng.normal(size=(12, 5))
    Y = (np.maximum(X @ A, 0) @ B).astype(np.float32)  # 5 features from 8: only a target-aware loop can fit it
    config = TrainingConfig(lr=1e-2, max_epochs=40, batch_size=64, patience=40, progress=False)
    run = train_dictionary(_LinearTarget(), X, Y, config=config, label="toy")
    assert run.history[-1]["monitor_fvu"] < 0.2 < run.history[0]["monitor_fvu"]
    shuffled = train_dictionary(_LinearTarget(), X, Y[::-1].copy(), config=config, label="toy")
    assert shuffled.history[-1]["monitor_fvu"] > 0.8  # rows paired wrongly: nothing to learn, so pairing matters
    with pytest.raises(ValueError, match="the target Y has 399 rows but X has 400"):
        train_dictionary(_LinearTarget(), X, Y[:-1], config=config, label="toy")


def test_the_loop_pairs_the_rows_of_two_aligned_stores(bert_classifier):
    model, tokenizer = bert_classifier
    texts = corpus()[:20]
    layer0, layer1 = (collect_activations(model, tokenizer, texts, layer=i, progress=False) for i in (0, 1))
    config = TrainingConfig(lr=1e-2, max_epochs=4, batch_size=64, monitor_rows=100, progress=False)
    kind = _LinearTarget()
    data_run = train_dictionary(kind, layer0, layer1, config=config, label="toy")
    array_run = train_dictionary(kind, layer0.to_numpy(), layer1.to_numpy(), config=config, label="toy")
    assert data_run.note == "random sample of the store (also trained on)" and array_run.note == "held-out rows"
    assert data_run.history[-1]["monitor_fvu"] < data_run.history[0]["monitor_fvu"]
    other = collect_activations(model, tokenizer, corpus()[20:30], layer=1, progress=False)
    with pytest.raises(ValueError, match="not row-aligned with the input store"):
        train_dictionary(kind, layer0, other, config=config, label="toy")


def test_the_auxiliary_k_loss_is_refused_where_it_does_not_apply():
    for bad, message in (({"auxk_alpha": -1}, "auxk_alpha must be a number >= 0"), ({"dead_rows": 0}, "dead_rows")):
        with pytest.raises(ValueError, match=message):
            TrainingConfig(**bad)
    with pytest.raises(ValueError, match="auxk_alpha applies to TopK dictionaries.*'relu'.*pass auxk_alpha=0"):
        SparseAutoencoder(8, activation="relu", auxk_alpha=1 / 32, **FAST).fit(X)
    with pytest.raises(ValueError, match="auxk_alpha applies to TopK dictionaries.*JumpReLUSAE"):
        JumpReLUSAE(8, auxk_alpha=1 / 32, **FAST).fit(X)
    # TopK and BatchTopK take it, and the epochs record how many concepts it trained
    for kind in (SparseAutoencoder, BatchTopKSAE):
        history = kind(64, k=1, auxk_alpha=1 / 32, dead_rows=64, **FAST).fit(X).fit_info_["history"]
        assert all("auxk_dead" in record for record in history)


def _silenced_trainer(**settings):
    """A TopK SAE's trainer whose concepts 0–2 can never fire (their bias is −10⁴), after 3 steps of 128 rows."""
    from interp_widgets.concepts.training import DictionaryTrainer

    sae = SparseAutoencoder(16, k=2, progress=False, **settings)
    sae.k_, sae.preprocessing_ = 2, {"center": False, "normalize_activations": "none", "apply_b_dec_to_input": True}
    rows = torch.as_tensor(X)
    trainer = DictionaryTrainer(sae, sae.training_config, rows[:100])
    with torch.no_grad():
        trainer.w["b_enc"][:3] = -1e4
    for start in (100, 228, 356):
        trainer.step(rows[start : start + 128] if start < 356 else rows[start:].repeat(3, 1)[:128])
    return trainer


def test_resampling_counts_silent_rows_across_epochs_and_restarts_only_those_concepts():
    trainer = _silenced_trainer(resample_rows=200)
    silent = set(torch.nonzero(trainer._since_fired >= 200).flatten().tolist())
    assert {0, 1, 2} <= silent and len(silent) < 16
    weights = {name: t.detach().clone() for name, t in trainer.w.items()}
    moments = {name: trainer.optimizer.state[t]["exp_avg_sq"].clone() for name, t in trainer.w.items()}
    record = trainer.end_epoch()
    assert record["resampled"] == len(silent)
    index = torch.tensor(sorted(silent))
    kept = torch.tensor([c for c in range(16) if c not in silent])
    for name, axis in (("W_enc", 1), ("W_dec", 0), ("b_enc", 0)):
        weight, state = trainer.w[name].detach(), trainer.optimizer.state[trainer.w[name]]["exp_avg_sq"]
        assert torch.equal(weight.index_select(axis, kept), weights[name].index_select(axis, kept)), name
        assert torch.equal(state.index_select(axis, kept), moments[name].index_select(axis, kept)), name
        assert not torch.equal(weight.index_select(axis, index), weights[name].index_select(axis, index)), name
        assert float(state.index_select(axis, index).abs().max()) == 0.0, name
    assert bool((trainer.w["b_enc"].detach()[index] > -1e3).all())  # they can fire again
    assert int(trainer._since_fired[index].max()) == 0


def test_resampling_waits_for_the_silent_rows_and_stops_after_resample_stop_rows():
    waiting = _silenced_trainer(resample_rows=10_000)
    record = waiting.end_epoch()
    assert record["dead"] >= 3 and record["resampled"] == 0  # silent during the epoch, but not for 10,000 rows
    stopped = _silenced_trainer(resample_rows=200, resample_stop_rows=300)  # 384 rows trained already
    assert stopped.end_epoch()["resampled"] == 0
    per_epoch = _silenced_trainer()  # resample_rows=0: silent during the epoch
    assert per_epoch.end_epoch()["resampled"] >= 3


def test_resampled_concepts_start_from_the_sample_given_to_end_epoch():
    trainer = _silenced_trainer(resample_rows=200)
    row = torch.as_tensor(X[:1]) * 5
    with torch.no_grad():
        residual = trainer.dictionary._loss(trainer.dictionary._normalise(row, trainer.w), trainer.w).residual[0]
    trainer.end_epoch(sample=(row.repeat(64, 1), None))  # every pick is this one row
    decoders = trainer.w["W_dec"].detach()[:3]
    assert torch.allclose(decoders, (residual / residual.norm()).expand(3, -1), atol=1e-6)


def test_restarts_keep_the_lowest_monitoring_loss_and_one_restart_is_the_plain_fit():
    plain = BatchTopKSAE(6, k=2, seed=4, **FAST).fit(X)
    one = BatchTopKSAE(6, k=2, seed=4, restarts=1, **FAST).fit(X)
    assert "restart_losses" not in one.fit_info_
    for name, weight in plain.weights_.items():
        assert torch.equal(weight, one.weights_[name])
    several = BatchTopKSAE(6, k=2, seed=4, restarts=3, **FAST).fit(X)
    losses, kept = several.fit_info_["restart_losses"], several.fit_info_["restart"]
    assert len(losses) == 3 and losses[0] == pytest.approx(plain.fit_info_["best_monitor_loss"], rel=1e-6)
    assert len(set(losses)) == 3  # the restarts start from different initialisations
    assert kept == int(np.argmin(losses)) and several.fit_info_["best_monitor_loss"] == min(losses)
    # the kept weights are the best restart's: their monitoring loss is the lowest, not the first restart's
    assert several.fit_info_["best_monitor_loss"] <= plain.fit_info_["best_monitor_loss"]
    assert min(record["monitor_loss"] for record in several.fit_info_["history"]) == pytest.approx(min(losses))
    with pytest.raises(ValueError, match="restarts must be an integer >= 1"):
        TrainingConfig(restarts=0)
