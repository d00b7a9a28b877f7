"""frequency_analysis: brute force per type, scipy correlations, planted frequency-pinning."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from interp_widgets.geometry import frequency_analysis


def test_matches_brute_force_and_scipy():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 12, (400,), generator=g) ** 2 % 17  # uneven frequencies, gaps in the ids
    H = torch.randn(400, 6, generator=g, dtype=torch.float64) + 300.0  # large offset: precision check
    for kind in ("mean", "rms"):
        result = frequency_analysis(H, ids, min_count=5, distance=kind)
        expected_ids, expected_counts, expected_distances = [], [], []
        for token in sorted(set(ids.tolist())):
            rows = H[ids == token]
            if rows.shape[0] < 5:
                continue
            dist = (rows - rows.mean(0)).norm(dim=1)
            expected_ids.append(token)
            expected_counts.append(rows.shape[0])
            expected_distances.append(float(dist.mean() if kind == "mean" else dist.pow(2).mean().sqrt()))
        assert result.token_ids.tolist() == expected_ids and result.counts.tolist() == expected_counts
        np.testing.assert_allclose(result.distances, expected_distances, rtol=1e-10)
        assert result.pearson == pytest.approx(stats.pearsonr(np.log(expected_counts), expected_distances)[0])
        assert result.spearman == pytest.approx(stats.spearmanr(np.log(expected_counts), expected_distances)[0])


def test_planted_pinning_gives_negative_correlation_and_chart():
    g = torch.Generator().manual_seed(1)
    counts = [400, 200, 100, 50, 25, 12, 6]
    ids = torch.cat([torch.full((c,), i) for i, c in enumerate(counts)])
    spread = torch.tensor([0.05 * 2**i for i in range(len(counts))])[ids]
    result = frequency_analysis(torch.randn(ids.shape[0], 16, generator=g) * spread[:, None], ids)
    assert result.spearman == -1.0 and result.pearson < -0.8
    title = result.chart().to_dict()["title"]
    assert "Spearman -1.00" in (title["text"] if isinstance(title, dict) else title)


def test_bad_input():
    with pytest.raises(ValueError, match="only 1 token type"):
        frequency_analysis(torch.randn(40, 3), torch.zeros(40, dtype=torch.long))
    with pytest.raises(ValueError, match="min_count must be an integer >= 2"):
        frequency_analysis(torch.randn(10, 3), torch.arange(10), min_count=1)
    with pytest.raises(ValueError, match="one id per row"):
        frequency_analysis(torch.randn(10, 3), torch.arange(9))
