"""Dictionary training across ranks: 2 gloo processes on CPU, each reading its part of every minibatch, equal one
process on the same data and seed (the union of the ranks' rows is the single-process batch).

After 3 Adam steps the weights agree to 1e-6 relative (only the order of float summation differs); after a short
full run the held-out FVU agrees within 1 %; BatchTopK's selection over the whole batch equals the single-process
one; early stopping and the dead-concept counts agree; every rank ends with the same weights. Layer-parallel
TranscoderSet training (one rank per group of layers) gives every rank the single-process set.

The ranks here are forked workers (fast); ``test_training_torchrun.py`` launches real ``torchrun`` on part of this.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from interp_widgets.concepts import BatchTopKSAE, JumpReLUSAE, MatryoshkaSAE, SparseAutoencoder, TrainingConfig
from interp_widgets.concepts.activations import META_FIELDS, ActivationStore
from interp_widgets.concepts.training import Ranks
from interp_widgets.concepts.transcoders import Transcoder
from interp_widgets.demo import corpus
from tests import tiny_models

RNG = np.random.default_rng(0)
# sparse structure, so that the dictionaries learn something in a few epochs: 220 rows = 22 held out + 3 batches of 66
ATOMS = RNG.normal(size=(24, 8)).astype(np.float32)
CODES = (RNG.random((220, 24)) < 0.12) * RNG.exponential(size=(220, 24))
X = (CODES @ ATOMS + 0.05 * RNG.normal(size=(220, 8))).astype(np.float32)
Y = (X @ RNG.normal(size=(8, 6)) * 0.5).astype(np.float32)
STEPS = {"max_epochs": 1, "batch_size": 66, "monitor_rows": 50, "resample_dead": False, "progress": False}
FULL = {"max_epochs": 8, "batch_size": 33, "monitor_rows": 50, "progress": False, "lr": 3e-3}


def models() -> dict:
    """Each case: a fitted model's name → a function fitting it (the same on every rank and in one process)."""
    return {
        "topk_3_steps": lambda store: SparseAutoencoder(16, k=3, **STEPS).fit(X),
        "topk_auxk_3_steps": lambda store: SparseAutoencoder(16, k=3, auxk_alpha=1 / 32, dead_rows=50, **STEPS).fit(X),
        "jumprelu_3_steps": lambda store: JumpReLUSAE(16, **STEPS).fit(X),
        "batchtopk_3_steps": lambda store: BatchTopKSAE(16, k=3, **STEPS).fit(X),
        "transcoder_3_steps": lambda store: Transcoder(16, k=3, **STEPS).fit(X, Y),
        "matryoshka_3_steps": lambda store: MatryoshkaSAE(16, k=3, **STEPS).fit(X),  # prefixes 4, 8, 16
        # a store on disk: 220 rows, monitoring sample of 50 (also trained on), batches 66, 66, 66, 22
        "store_topk_4_steps": lambda store: SparseAutoencoder(16, k=3, **STEPS).fit(store),
        # batches of 73, 73, 73 and 1 row: rank 1 has no row in the last step but takes part in it
        "store_batchtopk_4_steps": lambda store: BatchTopKSAE(16, k=3, **{**STEPS, "batch_size": 73}).fit(store),
        "topk_full": lambda store: SparseAutoencoder(16, k=3, **FULL).fit(X),
        "batchtopk_full": lambda store: BatchTopKSAE(16, k=3, **FULL).fit(X),
        # wide: concepts die and are resampled in most epochs; stops early after 7 of 8 epochs
        "resample_early_stop_full": lambda store: SparseAutoencoder(64, k=2, patience=1, min_delta=0.03, **FULL).fit(X),
    }


def disk_store(path: str) -> ActivationStore:
    if not os.path.exists(os.path.join(path, "manifest.json")):
        meta = {
            name: np.arange(len(X)) if name == "position" else np.zeros(len(X), dtype=np.int64) for name in META_FIELDS
        }
        # three chunks, so that batches span chunks
        ActivationStore([X[:90], X[90:150], X[150:]], meta, ["t"], {"dim": 8, "layer": "l"}).save(path)
    return ActivationStore.open(path)


def fit_transcoder_set(process_group=None, lm=tiny_models.gpt2_lm):
    """Layer-parallel across ``process_group`` (None: one process): a transcoder per block of the tiny ``lm()``."""
    from interp_widgets.circuits import TranscoderSet

    model, tokenizer = lm()
    template = Transcoder(16, k=2, max_epochs=3, batch_size=64, progress=False)
    return TranscoderSet.fit(model, tokenizer, corpus()[:30], transcoder=template, buffer_tokens=150,
                             process_group=process_group)  # fmt: skip


def set_weights(tcs) -> dict:
    """A TranscoderSet's weights as ``"<layer>/<name>"`` → array."""
    return {f"{layer}/{name}": t.numpy() for layer in tcs.layers for name, t in tcs[layer].weights_.items()}


def record(model) -> dict:
    out = {f"w/{name}": t.numpy() for name, t in model.weights_.items()}
    history = model.fit_info_["history"]
    out["monitor_fvu"] = np.array([r["monitor_fvu"] for r in history])
    out["dead"] = np.array([r["dead"] for r in history])
    out["resampled"] = np.array([r["resampled"] for r in history])
    out["train_loss"] = np.array([r["train_loss"] for r in history])
    out["epochs"] = np.array(model.fit_info_["epochs"])
    out["held_out_fvu"] = np.array(model.fit_info_["history"][-1]["monitor_fvu"])
    if "threshold" in model.fit_info_:
        out["threshold"] = np.array(model.fit_info_["threshold"])
    return out


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        store = disk_store(os.path.join(out_dir, "store"))
        for name, fit in models().items():
            np.savez(os.path.join(out_dir, f"{name}-rank{rank}.npz"), **record(fit(store)))
        # BatchTopK's selection over the whole batch: each rank holds its rows of one matrix of pre-activations
        pre = torch.as_tensor(np.random.default_rng(5).normal(size=(9, 16)).astype(np.float32))
        ranks = Ranks()
        ranks.rows = len(pre)
        sae = BatchTopKSAE(16, k=3)
        sae.k_, sae._ranks = 3.0, ranks
        np.save(os.path.join(out_dir, f"batchtopk-rank{rank}.npy"), sae._batch_topk(pre[ranks.part(len(pre))]).numpy())
        np.savez(os.path.join(out_dir, f"layers-rank{rank}.npz"), **set_weights(fit_transcoder_set(dist.group.WORLD)))
        # ranks holding different data are told so, on every rank
        try:
            SparseAutoencoder(8, k=2, **STEPS).fit(X[rank * 100 : rank * 100 + 100])
        except ValueError as error:
            with open(os.path.join(out_dir, f"refused-rank{rank}.txt"), "w") as file:
                file.write(str(error))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    store = disk_store(str(out / "store"))  # written once, before the ranks open it
    # fork keeps the test fast (no re-import of torch); the workers run single-threaded
    mp.start_processes(_worker, args=(2, str(out / "init"), str(out)), nprocs=2, join=True, start_method="fork")
    single = {name: record(fit(store)) for name, fit in models().items()}
    ranks = {name: [dict(np.load(out / f"{name}-rank{r}.npz")) for r in range(2)] for name in single}
    return out, single, ranks


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


@pytest.mark.parametrize(
    "name",
    [
        "topk_3_steps",
        "topk_auxk_3_steps",
        "jumprelu_3_steps",
        "batchtopk_3_steps",
        "transcoder_3_steps",
        "matryoshka_3_steps",
        "store_topk_4_steps",
        "store_batchtopk_4_steps",
    ],
)
def test_three_steps_equal_one_process_on_the_union(runs, name):
    _, single, ranks = runs
    zero, one = ranks[name]
    weights = [key for key in single[name] if key.startswith("w/")]
    assert weights
    for key in weights:
        np.testing.assert_array_equal(zero[key], one[key], err_msg=key)  # every rank holds the same weights
        assert relative(zero[key], single[name][key]) < 1e-6, (key, relative(zero[key], single[name][key]))
    np.testing.assert_array_equal(zero["dead"], single[name]["dead"])  # firing counts summed across ranks
    np.testing.assert_allclose(zero["train_loss"], single[name]["train_loss"], rtol=1e-6)  # the batch's loss
    np.testing.assert_allclose(zero["monitor_fvu"], single[name]["monitor_fvu"], rtol=1e-5)


@pytest.mark.parametrize("name", ["topk_full", "batchtopk_full", "resample_early_stop_full"])
def test_a_short_full_run_reaches_the_same_held_out_fvu(runs, name):
    _, single, ranks = runs
    zero, one = ranks[name]
    for key in zero:
        np.testing.assert_array_equal(zero[key], one[key], err_msg=key)  # the ranks agree bit for bit
    assert int(zero["epochs"]) == int(single[name]["epochs"])  # early stopping decided alike
    if name == "resample_early_stop_full":
        assert int(zero["epochs"]) < FULL["max_epochs"] and zero["resampled"].sum() > 0
        np.testing.assert_array_equal(zero["dead"], single[name]["dead"])
    fvu, reference = float(zero["held_out_fvu"]), float(single[name]["held_out_fvu"])
    assert fvu < 0.9 and abs(fvu - reference) <= 0.01 * reference, (fvu, reference)
    if name == "batchtopk_full":  # the inference threshold estimated after training
        assert abs(float(zero["threshold"]) - float(single[name]["threshold"])) <= 0.01 * float(
            single[name]["threshold"]
        )


def test_batchtopk_selects_over_the_whole_batch(runs):
    out, _, _ = runs
    pre = torch.as_tensor(np.random.default_rng(5).normal(size=(9, 16)).astype(np.float32))
    sae = BatchTopKSAE(16, k=3)
    sae.k_ = 3.0
    whole = sae._batch_topk(pre).numpy()
    parts = np.concatenate([np.load(out / f"batchtopk-rank{r}.npy") for r in range(2)])  # rows 0-4 and 5-8
    np.testing.assert_array_equal(parts, whole)
    assert (whole > 0).sum() == 27  # k · B of the whole batch
    per_rank = np.concatenate([sae._batch_topk(pre[:5]).numpy(), sae._batch_topk(pre[5:]).numpy()])
    assert not np.array_equal(per_rank, whole)  # a per-rank top-(k·B_r) is not the batch's


def test_ranks_with_different_data_are_refused_on_every_rank(runs):
    out, _, _ = runs
    for rank in range(2):
        message = (out / f"refused-rank{rank}.txt").read_text()
        assert "different monitoring samples" in message and "whole array or store on every rank" in message


def test_single_process_rules():
    assert Ranks.resolve(TrainingConfig()) is None
    with pytest.raises(RuntimeError, match="not initialised"):
        Ranks.resolve(TrainingConfig(distributed=True))
    with pytest.raises(ValueError, match="distributed must be"):
        TrainingConfig(distributed="yes")
    store = ActivationStore([X[:90], X[90:]], {n: np.zeros(len(X), dtype=np.int64) for n in META_FIELDS}, ["t"], {})
    rows = list(store.minibatch_rows(66, seed=3))
    assert np.array_equal(np.sort(np.concatenate(rows)), np.arange(len(X)))
    for batch, index in zip(store.minibatches(66, seed=3), rows):
        np.testing.assert_array_equal(batch, X[index])


def test_layer_parallel_transcoder_set_equals_one_process(runs):
    out, _, _ = runs
    single = set_weights(fit_transcoder_set())
    assert {key.split("/")[0] for key in single} == {"0", "1"}
    for rank in range(2):  # rank 0 trained layer 0, rank 1 layer 1; both got the whole set
        parallel = dict(np.load(out / f"layers-rank{rank}.npz"))
        assert sorted(parallel) == sorted(single)
        for key in single:  # to float rounding: the workers run single-threaded, this process may not
            assert relative(parallel[key], single[key]) < 1e-6, (key, relative(parallel[key], single[key]))
