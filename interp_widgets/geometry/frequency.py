"""Token frequency against distance to the token's centroid (anisotropy-paper §3.8).

The paper reports that frequent tokens sit tightly around their centroids ("pinned"), rare ones spread more:
a negative relation between log-frequency and centroid distance, strong in decoders. Per token type ``w`` in a
set of hidden states: count ``f_w``, centroid ``c_w`` (mean of its rows) and distance ``d_w`` = mean ``‖h − c_w‖``
over its occurrences (two passes, float64; ``distance="rms"`` gives the root-mean-square form). Types seen fewer
than ``min_count`` times are dropped (their centroid is noise); the threshold is kept with the result.

Example:
    >>> import torch
    >>> ids = torch.arange(60) % 6
    >>> result = frequency_analysis(torch.randn(60, 4), ids, min_count=5)
    >>> result.n_types, result.min_count
    (6, 5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from interp_widgets.geometry._kernels.inputs import ArrayLike, as_labels, as_points
from interp_widgets.layers import no_new_hooks
from interp_widgets.validation import check_int

__all__ = ["FrequencyAnalysis", "fisher_interval", "frequency_analysis", "frequency_by_layer", "frequency_chart"]


@dataclass(frozen=True, eq=False)
class FrequencyAnalysis:
    """Per-type counts and centroid distances with their Pearson and Spearman correlation.

    Attributes:
        token_ids: the kept token types (ascending).
        counts: occurrences of each kept type.
        distances: mean (or RMS) distance of each type's rows to its centroid.
        pearson, spearman: correlation of ``(log counts, distances)``; NaN when either is constant.
        min_count: types seen fewer times were dropped.
        distance: ``"mean"`` or ``"rms"``.
        pearson_ci, spearman_ci: 95 % confidence intervals over the kept types (Fisher z; for Spearman with the
            Bonett–Wright standard error ``sqrt((1 + r²/2)/(m − 3))``); NaN when the coefficient is.

    Example:
        >>> import torch
        >>> result = frequency_analysis(torch.randn(40, 3), torch.arange(40) % 4)
        >>> len(result.to_dataframe())
        4
    """

    token_ids: np.ndarray
    counts: np.ndarray
    distances: np.ndarray
    pearson: float
    spearman: float
    min_count: int
    distance: str
    pearson_ci: tuple = (math.nan, math.nan)
    spearman_ci: tuple = (math.nan, math.nan)

    @property
    def n_types(self) -> int:
        """Number of kept token types.

        Example:
            >>> import torch
            >>> frequency_analysis(torch.randn(40, 2), torch.arange(40) % 4).n_types
            4
        """
        return int(self.token_ids.shape[0])

    def to_dataframe(self, tokenizer=None):
        """``pandas.DataFrame`` with ``token_id, count, distance`` (and ``token`` text given a tokenizer).

        Example:
            >>> import torch
            >>> frequency_analysis(torch.randn(40, 2), torch.arange(40) % 4).to_dataframe().columns.tolist()
            ['token_id', 'count', 'distance']
        """
        import pandas as pd

        frame = pd.DataFrame({"token_id": self.token_ids, "count": self.counts, "distance": self.distances})
        if tokenizer is not None:
            frame["token"] = tokenizer.convert_ids_to_tokens(self.token_ids.tolist())
        return frame

    def chart(self, tokenizer=None):
        """Altair scatter of log10 count against centroid distance with a fitted line; the coefficients are in
        the title (token texts, if given, only appear in tooltips and are escaped by Vega).

        Example:
            >>> import torch
            >>> type(frequency_analysis(torch.randn(40, 2), torch.arange(40) % 4).chart()).__name__
            'LayerChart'
        """
        import altair as alt

        frame = self.to_dataframe(tokenizer)
        frame["log10_count"] = np.log10(frame["count"].to_numpy())
        tooltip = ["token_id", "count", "distance"] + (["token"] if tokenizer is not None else [])
        points = (
            alt.Chart(frame)
            .mark_circle(opacity=0.6)
            .encode(
                x=alt.X("log10_count:Q", title="log10 frequency"),
                y=alt.Y("distance:Q", title=f"{self.distance} distance to centroid"),
                tooltip=tooltip,
            )
        )
        line = points.transform_regression("log10_count", "distance").mark_line(color="black")
        title = (
            f"frequency vs centroid distance: Pearson {self.pearson:+.2f}, Spearman {self.spearman:+.2f} "
            f"({self.n_types} types with ≥ {self.min_count} occurrences)"
        )
        return alt.layer(points, line).properties(title=title, width=420, height=260)


def frequency_analysis(
    H: ArrayLike, token_ids: ArrayLike, *, min_count: int = 5, distance: str = "mean"
) -> FrequencyAnalysis:
    """Count, centroid and centroid distance of every token type in ``H`` (n × d rows with one id per row).

    Args:
        H: hidden states, padding already removed.
        token_ids: the token id of each row.
        min_count: drop types seen fewer times (≥ 2).
        distance: ``"mean"`` (mean Euclidean distance to the centroid) or ``"rms"`` (root mean square).

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> ids = torch.cat([torch.zeros(200), torch.ones(40), torch.full((12,), 2), torch.full((6,), 3)]).long()
        >>> spread = torch.tensor([0.1, 1.0, 3.0, 6.0])[ids]  # frequent tokens pinned, rare ones spread
        >>> H = torch.randn(258, 8, generator=g) * spread[:, None]
        >>> frequency_analysis(H, ids).spearman
        -1.0
    """
    from scipy import stats

    check_int("min_count", min_count, minimum=2)
    if distance not in ("mean", "rms"):
        raise ValueError(f"distance must be 'mean' or 'rms', got {distance!r}")
    x = as_points(H)
    types, inverse = as_labels(token_ids, x.shape[0], "token_ids", x.device)
    rows = x.shape[0]
    needed = MIN_TYPES * min_count
    if rows < needed:
        raise ValueError(
            f"a frequency analysis over {rows} token(s) cannot work: it needs at least {MIN_TYPES} token "
            f"types seen {min_count} times each, so at least {needed} tokens; pass more text (a few "
            f"thousand tokens) or lower min_count"
        )
    counts = torch.bincount(inverse, minlength=types.shape[0])
    centroids = torch.zeros(types.shape[0], x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, inverse, x)
    centroids = centroids / counts[:, None]
    offsets = torch.linalg.vector_norm(x - centroids[inverse], dim=1)
    per_row = offsets if distance == "mean" else offsets * offsets
    totals = torch.zeros(types.shape[0], dtype=x.dtype, device=x.device).index_add_(0, inverse, per_row)
    distances = totals / counts
    if distance == "rms":
        distances = distances.sqrt()
    keep = counts >= min_count
    if int(keep.sum()) < MIN_TYPES:
        raise ValueError(
            f"only {int(keep.sum())} token type(s) occur at least {min_count} times in {rows} tokens; "
            f"a correlation with a confidence interval needs {MIN_TYPES} or more: pass more text or "
            f"lower min_count"
        )
    log_counts = torch.log(counts[keep].to(x.dtype)).cpu().numpy()
    kept = distances[keep].cpu().numpy()
    constant = np.ptp(log_counts) == 0 or np.ptp(kept) == 0
    pearson = math.nan if constant else float(stats.pearsonr(log_counts, kept)[0])
    spearman = math.nan if constant else float(stats.spearmanr(log_counts, kept)[0])
    m = kept.shape[0]
    return FrequencyAnalysis(
        token_ids=types[keep].cpu().numpy(),
        counts=counts[keep].cpu().numpy(),
        distances=kept,
        pearson=pearson,
        spearman=spearman,
        min_count=min_count,
        distance=distance,
        pearson_ci=fisher_interval(pearson, 1.0 / math.sqrt(m - 3)),
        spearman_ci=fisher_interval(spearman, math.sqrt((1 + spearman**2 / 2) / (m - 3))),
    )


#: Fewest kept token types for a correlation with a Fisher-z interval (m − 3 > 0).
MIN_TYPES = 4


def fisher_interval(r: float, standard_error: float, level: float = 0.95) -> tuple[float, float]:
    """Confidence interval of a correlation ``r`` by the Fisher transform, ``tanh(atanh r ± z·se)``.

    Example:
        >>> low, high = fisher_interval(0.5, 0.1); round(low, 3), round(high, 3)
        (0.339, 0.632)
    """
    from scipy import stats

    if not math.isfinite(r):
        return (math.nan, math.nan)
    z = float(stats.norm.ppf(0.5 + level / 2))
    centre = math.atanh(max(min(r, 1 - 1e-15), -1 + 1e-15))
    return (math.tanh(centre - z * standard_error), math.tanh(centre + z * standard_error))


def frequency_by_layer(
    model,
    tokenizer,
    texts,
    layers,
    *,
    max_length: int = 128,
    batch_size: int = 8,
    min_count: int = 5,
    distance: str = "mean",
    skip_special: bool = True,
    progress: bool = True,
) -> dict:
    """:func:`frequency_analysis` of a model's hidden states at several layers over one text set (no gradients;
    the model's mode is restored afterwards).

    Args:
        model, tokenizer: a Hugging Face model and its tokenizer (padding is removed with the attention mask).
        texts: the probe texts.
        layers: indices into ``output_hidden_states`` (0 = embeddings, i = after block i).
        max_length, batch_size: tokenisation.
        min_count, distance: as for :func:`frequency_analysis`.
        skip_special: drop the tokenizer's special tokens (BOS/CLS/SEP: their massive activations dominate).
        progress: tqdm bar.

    Returns:
        ``{layer: FrequencyAnalysis}``; :func:`frequency_chart` draws the coefficients with their intervals.

    Example:
        >>> texts = ["the cat sat on the mat", "the dog sat on the log"] * 10
        >>> result = frequency_by_layer(lm, lm_tokenizer, texts, [0, 1], min_count=5, progress=False)
        >>> sorted(result), result[1].n_types >= 4
        ([0, 1], True)
    """
    from tqdm.auto import tqdm

    if isinstance(texts, str) or not texts:
        raise ValueError("texts must be a non-empty list of strings")
    layers = [int(layer) for layer in layers]
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    special = torch.as_tensor(sorted(set(getattr(tokenizer, "all_special_ids", []) or [])), dtype=torch.long)
    rows: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    ids: list[torch.Tensor] = []
    try:
        with torch.no_grad(), no_new_hooks(model):  # output_hidden_states installs transformers' capturing hooks
            for start in tqdm(range(0, len(texts), batch_size), disable=not progress, desc="frequency"):
                enc = tokenizer(
                    list(texts[start : start + batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=max_length,
                    return_tensors="pt",
                )
                out = model(**{k: v.to(device) for k, v in enc.items()}, output_hidden_states=True)
                keep = enc["attention_mask"].bool()
                if skip_special and special.numel():
                    keep &= ~torch.isin(enc["input_ids"], special)
                for layer in layers:
                    if not -len(out.hidden_states) <= layer < len(out.hidden_states):
                        raise ValueError(
                            f"layer {layer} is out of range: the model has {len(out.hidden_states)} "
                            f"hidden states (0 = embeddings)"
                        )
                    rows[layer].append(out.hidden_states[layer][keep.to(device)].float().cpu())
                ids.append(enc["input_ids"][keep])
    finally:
        model.train(was_training)
    token_ids = torch.cat(ids)
    return {
        layer: frequency_analysis(torch.cat(rows[layer]), token_ids, min_count=min_count, distance=distance)
        for layer in layers
    }


def frequency_chart(results: dict, title: str = "frequency vs centroid distance"):
    """Altair chart of Pearson and Spearman (log frequency vs centroid distance) per layer, with 95 % intervals;
    ``results`` is ``{model name: {layer: FrequencyAnalysis}}`` or one ``{layer: FrequencyAnalysis}``.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0); ids = torch.arange(200) % 8
        >>> result = {0: frequency_analysis(torch.randn(200, 4, generator=g), ids)}
        >>> type(frequency_chart(result)).__name__
        'LayerChart'
    """
    import altair as alt
    import pandas as pd

    if results and all(isinstance(v, FrequencyAnalysis) for v in results.values()):
        results = {"model": results}
    records = []
    for name, per_layer in results.items():
        for layer, result in per_layer.items():
            for kind, value, (low, high) in (
                ("Pearson", result.pearson, result.pearson_ci),
                ("Spearman", result.spearman, result.spearman_ci),
            ):
                records.append(
                    {
                        "model": name,
                        "layer": int(layer),
                        "coefficient": kind,
                        "r": value,
                        "low": low,
                        "high": high,
                        "types": result.n_types,
                    }
                )
    frame = pd.DataFrame(records)
    base = alt.Chart(frame).encode(
        x=alt.X("layer:O", title="layer (hidden state index)"), color=alt.Color("model:N"), xOffset="coefficient:N"
    )
    points = base.mark_point(filled=True).encode(
        y=alt.Y("r:Q", title="correlation (log frequency, distance)", scale=alt.Scale(domain=[-1, 1])),
        shape="coefficient:N",
        tooltip=["model", "layer", "coefficient", "r", "low", "high", "types"],
    )
    bars = base.mark_rule().encode(y="low:Q", y2="high:Q")
    return alt.layer(bars, points).properties(title=title, width=460, height=260)
