"""What the 16k-concept benchmark run needed, on small inputs: bounded blocks in interpretation (top rows, top texts
streamed across block boundaries, sparse histograms, context coefficients, vocabulary projection) and in reading off
the affine decoder; each checked against a dense reference computed in one piece (full stable sorts)."""

from __future__ import annotations

import numpy as np
import pytest

from interp_widgets.concepts import (
    DirectionConcepts,
    PCAConcepts,
    SparseAutoencoder,
    collect_activations,
    interpret_concepts,
    vocabulary_projection,
)
from interp_widgets.concepts import decompositions, interpret

TEXTS = [
    f"{'a good' if i % 2 else 'a bad'} film number {i} for the {'night' if i % 3 else 'day'} and then some more "
    f"words about the {'food' if i % 4 else 'music'}"
    for i in range(40)
]


@pytest.fixture(scope="module")
def disk_store(gpt2_lm, tmp_path_factory):
    model, tokenizer = gpt2_lm
    return collect_activations(model, tokenizer, TEXTS, layer="layer:1", memory_budget="20kB", progress=False)


@pytest.fixture(scope="module")
def sae(disk_store):
    return SparseAutoencoder(48, activation="topk", k=3, max_epochs=2, batch_size=64, progress=False).fit(disk_store)


def _stable_top(values: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-values, kind="stable")[:k]


def test_top_columns_breaks_ties_like_a_stable_sort():
    rng = np.random.default_rng(0)
    for _ in range(50):
        values = rng.integers(0, 4, size=(7, 30)).astype(np.float32)  # many ties, at the cut too
        top = int(rng.integers(1, 31))
        np.testing.assert_array_equal(
            interpret._top_columns(values, top), np.argsort(-values, axis=1, kind="stable")[:, :top]
        )


def test_interpretation_in_small_blocks_matches_a_dense_reference(disk_store, sae, monkeypatch):
    assert not disk_store.in_memory and len(disk_store._chunks) > 3
    n, k, bins = sae.n_concepts, 5, 7
    monkeypatch.setattr(interpret, "_BLOCK_VALUES", 256 * n)  # 256-row blocks: texts straddle block boundaries
    calls = []
    original = type(sae).transform
    monkeypatch.setattr(sae, "transform", lambda X: calls.append(len(X)) or original(sae, X), raising=False)
    interp = interpret_concepts(sae, disk_store, k=k, window=2, bins=bins, progress=False)
    assert max(calls) <= 256 and len(calls) > 4  # never the whole store at once
    C = original(sae, disk_store.to_numpy())
    text_ids = disk_store.text_ids
    for c in range(n):
        order = [r for r in _stable_top(C[:, c], k) if C[r, c] != 0]
        assert interp.top_rows[c][: len(order)].tolist() == order, c
        assert (interp.top_rows[c][len(order) :] == -1).all()
        maxima = np.array([C[text_ids == t, c].max() for t in range(len(TEXTS))])
        texts = [t for t in _stable_top(maxima, k) if maxima[t] != 0]
        assert interp.top_texts[c][: len(texts)].tolist() == texts, c
        np.testing.assert_allclose(interp.top_text_values[c][: len(texts)], maxima[texts])
        active = C[:, c][C[:, c] != 0]
        assert interp.density[c] == pytest.approx(len(active) / len(C))
        assert interp.hist_counts[c].sum() == len(active)
        if len(active):
            expected, _ = np.histogram(active.astype(np.float64), bins=interp.hist_edges[c])
            np.testing.assert_array_equal(interp.hist_counts[c], expected)
        for example in interp.examples[c]:
            r = example["row"]
            span = [s for s in range(r - 2, r + 3) if 0 <= s < len(C) and text_ids[s] == text_ids[r]]
            np.testing.assert_allclose(example["context_activations"], C[span, c], atol=1e-6)
            assert example["context_activations"][example["center"]] == pytest.approx(example["activation"])


def test_vocabulary_projection_in_blocks_matches_a_full_sort(gpt2_lm, disk_store, monkeypatch):
    model, tokenizer = gpt2_lm
    rng = np.random.default_rng(0)
    directions = rng.normal(size=(30, disk_store.dim)).astype(np.float32)
    directions[3] = directions[4]  # equal rows and equal logits: ties
    cm = DirectionConcepts(30, directions=directions).fit(disk_store)
    weight = model.get_output_embeddings().weight.detach().numpy()
    logits = cm.components_ @ weight.T
    expected = np.argsort(-logits, axis=1, kind="stable")[:, :6]
    monkeypatch.setattr(interpret, "_BLOCK_VALUES", 4 * weight.shape[0])  # four concepts per block
    tokens, values = vocabulary_projection(cm, model, tokenizer, top=6)
    assert tokens == [[tokenizer.decode([i]) for i in row.tolist()] for row in expected]
    np.testing.assert_allclose(values, np.take_along_axis(logits, expected, 1), rtol=1e-5)


def test_affine_decoder_read_in_blocks(disk_store, sae, monkeypatch):
    monkeypatch.setattr(decompositions, "_BLOCK_VALUES", 5 * 48)  # five unit vectors per block
    again = SparseAutoencoder(48, activation="topk", k=3, max_epochs=2, batch_size=64, progress=False).fit(disk_store)
    np.testing.assert_allclose(again.components_, sae.components_, atol=1e-6)
    np.testing.assert_allclose(again.components_, again.weights_["W_dec"].numpy() * again.scale_, atol=1e-6)
    pca = PCAConcepts(6).fit(disk_store)
    np.testing.assert_allclose(pca.components_, pca.estimator_.components_, atol=1e-5)


def test_evaluate_in_blocks_matches_the_dense_metrics(disk_store, sae, monkeypatch):
    from interp_widgets.concepts import evaluate, metrics

    monkeypatch.setattr(metrics, "_BLOCK_VALUES", 256 * sae.n_concepts)
    calls = []
    original = type(sae).transform
    monkeypatch.setattr(sae, "transform", lambda X: calls.append(len(X)) or original(sae, X), raising=False)
    for X in (disk_store, disk_store.to_numpy()):
        calls.clear()
        report = evaluate(sae, X)
        assert max(calls) <= 256 and sum(calls) == len(disk_store)
        dense = disk_store.to_numpy().astype(np.float64)
        C = original(sae, dense)
        residual = dense - sae.inverse_transform(C)
        fvu = (residual**2).sum() / ((dense - dense.mean(0)) ** 2).sum()
        assert report["explained_variance"] == pytest.approx(1 - fvu, rel=1e-6)
        assert report["l0"] == pytest.approx((C != 0).sum(1).mean())
        assert report["dead"].tolist() == np.flatnonzero((C != 0).sum(0) == 0).tolist()


def test_select_copies_rows_and_metadata_in_bounded_chunks(disk_store, tmp_path):
    from interp_widgets.concepts import ActivationStore

    norms = disk_store.row_norms()
    np.testing.assert_allclose(norms, np.linalg.norm(disk_store.to_numpy().astype(np.float64), axis=1))
    keep = disk_store.positions > 0
    keep[::7] = False
    chosen = disk_store.select(keep, path=tmp_path / "kept", memory_budget="8kB")
    assert (
        not chosen.in_memory
        and len(chosen._chunks) > 1
        and chosen.info["selected"] == f"{keep.sum()} of {len(keep)} rows"
    )
    np.testing.assert_array_equal(chosen.to_numpy(), disk_store.to_numpy()[keep])
    for field in ("text_ids", "positions", "token_ids", "offsets"):
        np.testing.assert_array_equal(getattr(chosen, field), getattr(disk_store, field)[keep])
    assert chosen.tokens() == [t for t, k in zip(disk_store.tokens(), keep) if k] and chosen.texts == disk_store.texts
    again = ActivationStore.open(tmp_path / "kept")
    np.testing.assert_array_equal(again.to_numpy(), chosen.to_numpy())
    by_index = disk_store.select(np.flatnonzero(keep))
    assert by_index.in_memory and np.array_equal(by_index.to_numpy(), chosen.to_numpy())
    empty = disk_store.select(np.zeros(len(disk_store), bool))
    assert empty.shape == (0, disk_store.dim)
    with pytest.raises(ValueError, match="needs .* values"):
        disk_store.select(keep[:-1])
    with pytest.raises(IndexError, match="out of range"):
        disk_store.select([len(disk_store)])
    with pytest.raises(FileExistsError, match="not empty"):
        disk_store.select(keep, path=tmp_path / "kept")
