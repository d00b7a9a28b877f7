"""Matryoshka SAEs: the nested-prefix loss, persistence of the prefixes, and the parent -> children hierarchy found on
a planted hierarchy (the toy model of Bussmann et al., 2025)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp_widgets.concepts import BatchTopKSAE, ConceptModel, MatryoshkaSAE, concept_hierarchy


def planted_hierarchy(rows=6000, n_parents=4, n_children=4, d=32, seed=0):
    """Bussmann et al.'s toy: orthogonal unit feature directions; each parent fires with probability 0.2, and when it
    fires, one of its children (chosen uniformly, so children are mutually exclusive) fires with probability 0.85; a
    child never fires without its parent. Magnitudes are uniform in [0.5, 1.5]."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(d, d)))[0].T
    parents, children = basis[:n_parents], basis[n_parents : n_parents * (1 + n_children)]
    active_p = rng.random((rows, n_parents)) < 0.2
    with_child = active_p & (rng.random((rows, n_parents)) < 0.85)
    which = rng.integers(0, n_children, size=(rows, n_parents))
    active_c = np.zeros((rows, n_parents, n_children), bool)
    r, p = np.nonzero(with_child)
    active_c[r, p, which[r, p]] = True
    active_c = active_c.reshape(rows, -1)
    X = (active_p * rng.uniform(0.5, 1.5, active_p.shape)) @ parents
    X += (active_c * rng.uniform(0.5, 1.5, active_c.shape)) @ children + 0.01 * rng.normal(size=(rows, d))
    pairs = [(n_parents + i, i // n_children) for i in range(n_parents * n_children)]  # (child, parent) features
    return X.astype(np.float32), np.concatenate([active_p, active_c], axis=1), pairs


def latent_of(truth: np.ndarray, fired: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """For each planted feature, the candidate latent whose firing has the highest Jaccard index with it."""
    t, f = truth.astype(float), fired[:, candidates].astype(float)
    inter = t.T @ f
    union = t.sum(0)[:, None] + f.sum(0)[None, :] - inter
    return candidates[(inter / np.maximum(union, 1)).argmax(1)]


def recovered(tree, latents: np.ndarray, pairs) -> float:
    """The fraction of planted (child, parent) pairs whose latents the tree links."""
    return float(np.mean([tree.parent_of.get(int(latents[c])) == int(latents[p]) for c, p in pairs]))


SEEDS = range(7)  # the recovery is judged by its median over these seeds, never by one chosen seed
RESTARTS = 10  # each seed's fit keeps the lowest-loss of 10 initialisations (TrainingConfig.restarts)


@pytest.fixture(scope="module")
def toys():
    """One SAE per seed in SEEDS on the planted hierarchy, with the latents matched to the planted features."""
    X, truth, pairs = planted_hierarchy()
    runs, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)  # 24 x 32 weights: more threads only contend (70 fits: ~25 s on 1 quiet core)
    try:
        for seed in SEEDS:
            sae = MatryoshkaSAE(
                24, k=1.5, prefixes=(4,), lr=3e-3, max_epochs=60, patience=15, batch_size=256, seed=seed,
                restarts=RESTARTS,
            )  # fmt: skip
            sae.set_params(progress=False).fit(X)
            fired = sae.transform(X) > 0
            latents = np.concatenate(
                [
                    latent_of(truth[:, :4], fired, np.arange(4)),  # parents matched in the first prefix
                    latent_of(truth[:, 4:], fired, np.arange(4, 24)),  # children in the rest
                ]
            )
            runs.append((sae, latents))
    finally:
        torch.set_num_threads(threads)
    return X, pairs, runs


# One fit is not enough. Measured with restarts=1 at these settings on seeds 0-34 (this toy, 16 planted pairs): only 5
# of 35 fits recover every pair (median 75 %, min 38 %). The failures are an optimisation failure, not a failure of
# the hierarchy rule: a first-prefix latent learns a parent + child mix and a parent falls into the second group, and
# every such run ends at a higher monitoring loss (0.51-0.71, against 0.42-0.46 for the runs that recover every pair).
# Learning rate, epochs, batch size, k, data size, decoder/b_dec initialisation, a wider first prefix and resampling
# dead latents from their own prefix's residual did not change that. Keeping the lowest-loss of 10 restarts recovered
# every pair on each of seeds 0-13.
def test_planted_hierarchy_is_recovered_at_the_median_seed(toys):
    X, pairs, runs = toys
    rates = [recovered(sae.hierarchy(X, min_conditional=0.8, min_cosine=-0.1), latents, pairs) for sae, latents in runs]
    print(f"planted hierarchy: {' '.join(f'{r:.0%}' for r in rates)} of {len(pairs)} pairs over seeds {list(SEEDS)}")
    assert np.median(rates) >= 0.9
    for sae, _ in runs:  # the kept restart is the lowest-loss one, and the losses separate the two kinds of run
        losses = sae.fit_info_["restart_losses"]
        assert len(losses) == RESTARTS and sae.fit_info_["best_monitor_loss"] == min(losses) < 0.47


def test_planted_hierarchy_links_are_sound_on_every_seed(toys):
    X, pairs, runs = toys
    rates = []
    for sae, latents in runs:
        # The children's decoder rows of a Matryoshka SAE are the part of the child that the parent does not
        # reconstruct: on this toy (orthogonal features) they are orthogonal to the parent's (measured: the planted
        # links' cosines lie within 0.01 of 0 on seeds 0-6), so min_cosine is set below every one of them here. The
        # 4 latents beyond the 16 children may lean on a parent (one at cosine 0.61 on these seeds).
        tree = sae.hierarchy(X, min_conditional=0.8, min_cosine=-1.0)
        rates.append(recovered(tree, latents, pairs))
        assert all(tree.conditional[c] >= 0.8 for c in tree.parent_of)
        assert set(tree.parents) <= set(range(4))  # every parent sits in the first prefix
        assert max(abs(tree.cosine[int(latents[c])]) for c, _ in pairs if int(latents[c]) in tree.cosine) < 0.1
        assert all(0 <= tree.absorption[p] <= 0.2 for p in tree.parents)  # children fire with their parent
        fvu = sae.prefix_fvu(X)
        assert 0.4 < fvu[0] < 0.7 and fvu[1] < 0.05  # the 4 parents alone leave the children's share (0.43)
    assert min(rates) >= 0.9  # with the restarts, every seed (measured: 100 % on each of seeds 0-13)


def test_thresholds_that_nothing_passes_find_nothing(toys):
    X, pairs, runs = toys
    for sae, latents in runs:
        tree = sae.hierarchy(X, min_conditional=1.0, min_cosine=0.99)
        assert tree.parent_of == {} and tree.children == {} and tree.absorption == {}
        assert recovered(tree, latents, pairs) < 0.9  # the recovery check above fails when nothing passes
        # the issue's min_cosine = 0.3 links no planted pair on any seed: no child's decoder leans towards its parent
        # here (nor on SmolLM2: benchmarks/concepts.py --parts matryoshka); only a spare latent that does can link
        issues = sae.hierarchy(X, min_cosine=0.3)
        assert recovered(issues, latents, pairs) == 0.0
        assert not {int(latents[c]) for c, _ in pairs} & set(issues.parent_of)
        # the default, -0.1, finds every planted pair that the conditional alone finds
        default = sae.hierarchy(X)
        assert default.min_cosine == -0.1
        assert recovered(default, latents, pairs) == recovered(sae.hierarchy(X, min_cosine=-1.0), latents, pairs)


def test_hierarchy_by_hand():
    codes = np.array([[2, 1, 0, 0], [1, 0, 3, 0], [0, 0, 0, 0], [0, 1, 0, 0], [1, 0, 0, 2]], dtype=np.float32)
    decoder = np.array([[1, 0], [0.8, 0.6], [0.6, 0.8], [0.8, -0.6]], dtype=np.float32)
    groups = [0, 1, 1, 2]
    tree = concept_hierarchy(codes, decoder, groups, min_conditional=0.5, min_cosine=0.3)
    assert tree.parent_of == {1: 0, 2: 0, 3: 0}  # 3 (group 2) could hang under 1 or 2 but never fires with them
    assert tree.conditional == {1: 0.5, 2: 1.0, 3: 1.0}
    assert tree.children == {0: [2, 3, 1]}  # by decreasing P(parent | child), then index
    assert tree.absorption == {0: pytest.approx(1 / 4)}  # child rows 0, 1, 3, 4; the parent is off in row 3
    assert tree.cosine[3] == pytest.approx(0.8)
    # the cosine threshold removes 2 (0.6 < 0.7); a group-2 child can hang under a group-1 concept
    codes2 = np.array([[1, 1, 0, 1], [1, 1, 0, 1], [1, 0, 1, 0]], dtype=np.float32)
    nested = concept_hierarchy(codes2, decoder, groups, min_conditional=0.8, min_cosine=0.7)
    assert nested.parent_of == {1: 0, 3: 1} or nested.parent_of == {1: 0, 3: 0}
    assert 2 not in nested.parent_of
    for bad in ({"min_conditional": 1.5}, {"min_cosine": -2}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            concept_hierarchy(codes, decoder, groups, **bad)
    with pytest.raises(ValueError, match="groups"):
        concept_hierarchy(codes, decoder, [0, 1])


def test_loss_sums_each_prefix_from_the_global_batch_topk():
    X = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
    sae = MatryoshkaSAE(12, k=3, prefixes=(2, 6), max_epochs=1, batch_size=64, progress=False).fit(X)
    w = {name: t.clone() for name, t in sae.weights_.items()}
    xn = sae._normalise(torch.from_numpy(X[:64]), w)
    codes = BatchTopKSAE._batch_topk(sae, xn @ w["W_enc"] + w["b_enc"])  # one selection over the whole dictionary
    expected = sum((xn - codes[:, :m] @ w["W_dec"][:m]).pow(2).mean() for m in (2, 6, 12))
    step = sae._loss(xn, w)
    torch.testing.assert_close(step.loss, expected)
    torch.testing.assert_close(step.residual, xn - codes @ w["W_dec"])
    assert sae.prefixes_ == [2, 6, 12] and sae.groups_.tolist() == [0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]


def test_prefixes_checked_resolved_and_saved(tmp_path):
    assert MatryoshkaSAE(12, prefixes=(3, 12))._resolved_prefixes() == [3, 12]
    assert MatryoshkaSAE(12)._resolved_prefixes() == [3, 6, 12]
    assert MatryoshkaSAE(3)._resolved_prefixes() == [1, 3]
    X = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    for bad in ((4, 3), (0, 4), (4, 13), "abc", 4):
        with pytest.raises(ValueError, match="prefixes"):
            MatryoshkaSAE(12, prefixes=bad, max_epochs=1, progress=False).fit(X)
    sae = MatryoshkaSAE(12, k=2, prefixes=(3, 6), max_epochs=2, progress=False).fit(X)
    loaded = ConceptModel.load(sae.save(tmp_path / "m.safetensors"))
    assert type(loaded) is MatryoshkaSAE and loaded.prefixes_ == [3, 6, 12] and loaded.prefixes == (3, 6)
    np.testing.assert_allclose(loaded.transform(X), sae.transform(X), atol=1e-6)


def test_saelens_folder_keeps_the_widths(tmp_path):
    import json

    from interp_widgets.concepts import load_sae, save_sae

    X = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
    sae = MatryoshkaSAE(12, k=2, prefixes=(3, 6), max_epochs=2, progress=False).fit(X)
    folder = save_sae(sae, tmp_path / "m", hook_name="blocks.1.hook_resid_post")
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["architecture"] == "jumprelu" and cfg["metadata"]["training_architecture"] == "matryoshka_batchtopk"
    assert cfg["metadata"]["training_architecture_details"] == {"k": 2.0, "matryoshka_widths": [3, 6, 12]}
    back = load_sae(folder)
    assert type(back) is MatryoshkaSAE and back.prefixes_ == [3, 6, 12] and back.k_ == 2.0
    np.testing.assert_allclose(back.transform(X), sae.transform(X), atol=1e-5)
    cfg["metadata"]["training_architecture_details"]["matryoshka_widths"] = [6, 3]
    (folder / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="matryoshka_widths must be increasing"):
        load_sae(folder)
