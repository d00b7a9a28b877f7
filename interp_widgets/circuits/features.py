"""What each feature of a transcoder set means: computed once per set and corpus, cached, and carried by graphs.

:meth:`TranscoderSet.explain <interp_widgets.circuits.TranscoderSet.explain>` runs **one** forward pass over a
corpus for every layer (as :meth:`~interp_widgets.circuits.TranscoderSet.fit` does) and returns a
:class:`FeatureExplanations`: for every (layer, feature)

- its top activating contexts: the ``n_examples`` tokens where the feature's activation (its transcoder's code at the
  layer's input point) is largest, each with ``window`` tokens either side in the same text and the activation on
  each; kept with the bounded-memory top-k of the concept interpreter
  (:func:`~interp_widgets.concepts.interpret_concepts`): memory is ``features × n_examples × (2 window + 1)``, not
  the corpus;
- its density (the share of tokens where it is active), mean and maximum, and a histogram of its nonzero
  activations (below);
- its decoder's vocabulary projection: the top and bottom tokens of ``W_dec[f] @ W_Uᵀ`` (``W_U`` the model's output
  embedding, no final norm). Transcoder decoders are not unit-norm, so these are logits per unit of activation and
  differ in scale from feature to feature (``decoder_norm`` says by how much);
- a label: the most frequent top tokens by default, or a labeller's (``labeller=``, e.g.
  :class:`~interp_widgets.concepts.LMLabeler`; :meth:`FeatureExplanations.relabel` labels just some features, such as
  a graph's).

**The histogram** is exact and needs one pass: each feature's nonzero activations fall into ``bins`` equal bins over
``[0, H)``, where ``H`` is the smallest power of two above its maximum; when a larger value arrives, ``H`` doubles
and neighbouring bins merge (exactly, since a bin of the doubled grid is two bins of the old one). The counts are
therefore those of ``floor(a · bins / H)`` over every nonzero activation ``a``, whatever the order of the texts.
:meth:`FeatureExplanations.histogram` drops the empty bins above the maximum.

**Cache**: ``explain(..., cache_dir=)`` writes the result to ``cache_dir/feature-explanations-{key}.safetensors``,
``key`` a digest of the set's weights (:meth:`~interp_widgets.circuits.TranscoderSet.checksum`), the corpus and the
settings, and reads it back on the next call without running the model. A file that cannot be read, or whose arrays
no longer match the checksum written with them, is refused with the fix (delete it; ``explain`` recomputes it).

**Graphs**: :meth:`AttributionGraph.with_explanations <interp_widgets.circuits.AttributionGraph.with_explanations>`
keeps the explanations of a graph's features (:meth:`FeatureExplanations.detail`: the fields of circuit-tracer's
``frontend/feature_models.py`` plus ``label``); ``to_json`` writes them as the ``features/{scan}/{index}.json`` detail
files, and the labels as the feature nodes' ``clerp``.

Example:
    >>> from interp_widgets.circuits import TranscoderSet
    >>> from interp_widgets.concepts import Transcoder
    >>> tc = Transcoder(16, k=2, max_epochs=2, progress=False)
    >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=tc)
    >>> explained = tcs.explain(lm, lm_tokenizer, texts[:20], n_examples=3, progress=False)
    >>> explained
    FeatureExplanations(2 layers, 16 features each, 3 contexts each over 657 tokens, labels from top tokens)
    >>> list(explained.detail(1, 0))[:5]
    ['transcoder_id', 'index', 'examples_quantiles', 'top_logits', 'bottom_logits']
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from interp_widgets.circuits._graph_json import cantor_pair
from interp_widgets.concepts.interpret import _block_top, _checked_label, _merge_topk, _top_columns, label_from_tokens
from interp_widgets.validation import check_int

__all__ = ["ExplanationRun", "FeatureExplanations", "LayerFeatures"]

_FORMAT = "interp_widgets.FeatureExplanations"
_VERSION = 1
#: Values in one block of vocabulary logits (about 64 MB of float32).
_BLOCK_VALUES = 1 << 24
Labeller = Callable[[int, list[dict]], str]

#: The arrays of a :class:`LayerFeatures`, as saved (``layer.{i}.{name}``).
_ARRAYS = ("density", "mean", "act_max", "decoder_norm", "hist_counts", "hist_top", "top_values", "top_texts",
           "top_positions", "context_ids", "context_acts", "top_logit_ids", "top_logit_values", "bottom_logit_ids",
           "bottom_logit_values")  # fmt: skip


@dataclass(eq=False)
class LayerFeatures:
    """The explanations of one layer's features (``n`` features, ``k`` examples, ``c = 2 window + 1`` context tokens,
    ``v`` vocabulary tokens): ``density``, ``mean`` and ``act_max`` (n,); ``hist_counts`` (n, bins) over
    ``[0, hist_top)`` (the histogram, module docstring); ``top_values`` (n, k; NaN pads), ``top_texts`` and
    ``top_positions`` (n, k: the text and the token position of each top context, -1 pads); ``context_ids`` (n, k, c:
    token ids of each context, -1 outside the text) and ``context_acts`` (its activations, NaN outside);
    ``top_logit_ids`` / ``top_logit_values`` and ``bottom_logit_ids`` / ``bottom_logit_values`` (n, v: the decoder's
    vocabulary projection, largest and smallest first); ``decoder_norm`` (n,); ``labels``.

    Example:
        >>> from interp_widgets.circuits import TranscoderSet
        >>> from interp_widgets.concepts import Transcoder
        >>> tc = Transcoder(16, k=2, max_epochs=1, progress=False)
        >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=tc)
        >>> part = tcs.explain(lm, lm_tokenizer, texts[:5], n_examples=2, window=1, progress=False).layers[0]
        >>> part.n_features, part.context_ids.shape, part.top_logit_ids.shape
        (16, (16, 2, 3), (16, 10))
    """

    layer: int
    density: np.ndarray
    mean: np.ndarray
    act_max: np.ndarray
    decoder_norm: np.ndarray
    hist_counts: np.ndarray
    hist_top: np.ndarray
    top_values: np.ndarray
    top_texts: np.ndarray
    top_positions: np.ndarray
    context_ids: np.ndarray
    context_acts: np.ndarray
    top_logit_ids: np.ndarray
    top_logit_values: np.ndarray
    bottom_logit_ids: np.ndarray
    bottom_logit_values: np.ndarray
    labels: list[str]

    def __post_init__(self):
        self.layer = int(self.layer)
        for name in ("density", "mean", "act_max", "decoder_norm", "hist_top"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        for name in ("top_values", "context_acts", "top_logit_values", "bottom_logit_values"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float32))
        for name in ("hist_counts", "top_texts", "top_positions", "context_ids", "top_logit_ids", "bottom_logit_ids"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        self.labels = [str(label) for label in self.labels]
        n = len(self.density)
        for name in _ARRAYS:
            if len(getattr(self, name)) != n:
                raise ValueError(f"layer {self.layer}: {name} has {len(getattr(self, name))} rows for {n} features")
        if len(self.labels) != n:
            raise ValueError(f"layer {self.layer}: {len(self.labels)} labels for {n} features")

    @property
    def n_features(self) -> int:
        """The number of features of the layer."""
        return len(self.density)


@dataclass
class ExplanationRun:
    """What explanations were made of: the ``model_name``, the set's ``input_point`` and weights (``transcoders``:
    :meth:`~interp_widgets.circuits.TranscoderSet.checksum`), the ``corpus`` (a digest of the texts), ``n_texts``
    and ``n_tokens`` scanned, the settings (``params``: ``n_examples``, ``window``, ``bins``, ``vocab_top``,
    ``include_special``), the cache ``key`` made of all of them, and where the labels came from (``label_source``).

    Example:
        >>> ExplanationRun(model_name="m", input_point="mlp_in", transcoders="ab", corpus="cd", n_texts=1,
        ...                n_tokens=5).label_source
        'top tokens'
    """

    model_name: str | None
    input_point: str
    transcoders: str
    corpus: str
    n_texts: int
    n_tokens: int
    params: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    label_source: str = "top tokens"


class FeatureExplanations:
    """Every feature of a transcoder set explained over a corpus (module docstring): ``layers`` (``{layer:
    LayerFeatures}``), ``vocab`` (the text of every token id they mention, each decoded alone) and ``run``
    (:class:`ExplanationRun`). Made by :meth:`TranscoderSet.explain
    <interp_widgets.circuits.TranscoderSet.explain>`; :meth:`save` / :meth:`load` (safetensors, never pickle).

    Example:
        >>> from interp_widgets.circuits import TranscoderSet
        >>> from interp_widgets.concepts import Transcoder
        >>> tc = Transcoder(16, k=2, max_epochs=2, progress=False)
        >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=tc)
        >>> explained = tcs.explain(lm, lm_tokenizer, texts[:20], n_examples=3, progress=False)
        >>> explained.to_dataframe().columns.tolist()[:5]
        ['layer', 'feature', 'label', 'density', 'mean']
        >>> [e["token"] for e in explained.examples(1, 3)] == [e["token"] for e in explained.examples(1, 3)]
        True
    """

    def __init__(self, layers: dict[int, LayerFeatures], vocab: dict[int, str], run: ExplanationRun):
        if not layers:
            raise ValueError("FeatureExplanations needs at least one layer")
        for layer, part in layers.items():
            if not isinstance(part, LayerFeatures) or part.layer != int(layer):
                raise TypeError(f"layers[{layer}] must be the LayerFeatures of layer {layer}")
        self.layers = {int(layer): part for layer, part in sorted(layers.items())}
        self.vocab = {int(i): str(t) for i, t in vocab.items()}
        self.run = run

    # ------------------------------------------------------------------ reading one feature
    def _part(self, layer: int, feature: int) -> LayerFeatures:
        layer, feature = int(layer), int(feature)
        if layer not in self.layers:
            raise KeyError(
                f"no explanations for layer {layer}; these cover layers {list(self.layers)}: explain that layer "
                f"(TranscoderSet.explain(..., layers=[..., {layer}]))"
            )
        part = self.layers[layer]
        if not 0 <= feature < part.n_features:
            raise IndexError(f"layer {layer} has {part.n_features} features (0..{part.n_features - 1}), not {feature}")
        return part

    def _token(self, token_id: int) -> str:
        return self.vocab.get(int(token_id), f"<{int(token_id)}>")

    def label(self, layer: int, feature: int) -> str:
        """The label of a feature ('' for a feature that never fired).

        Example:
            >>> FeatureExplanations.load(_example_file()).label(0, 1)
            'the / a'
        """
        return self._part(layer, feature).labels[int(feature)]

    def examples(self, layer: int, feature: int) -> list[dict]:
        """The top activating contexts of a feature, strongest first, as dicts (the examples a labeller such as
        :class:`~interp_widgets.concepts.LMLabeler` reads): ``activation``, ``text_id``, ``position`` (of the token in
        its text's tokens), ``token``, ``context`` (the window's tokens, each decoded alone), ``context_activations``
        and ``center`` (the token's index in ``context``).

        Example:
            >>> example = FeatureExplanations.load(_example_file()).examples(0, 1)[0]
            >>> example["context"][example["center"]] == example["token"], example["activation"]
            (True, 3.0)
        """
        part = self._part(layer, feature)
        f = int(feature)
        out = []
        for j, value in enumerate(part.top_values[f]):
            if not np.isfinite(value):
                continue
            ids, acts = part.context_ids[f, j], part.context_acts[f, j]
            inside = ids >= 0
            center = int(np.count_nonzero(inside[: len(ids) // 2]))
            context = [self._token(i) for i in ids[inside]]
            out.append(
                {
                    "activation": float(value),
                    "text_id": int(part.top_texts[f, j]),
                    "position": int(part.top_positions[f, j]),
                    "token": context[center],
                    "context": context,
                    "context_activations": acts[inside].astype(np.float64).tolist(),
                    "center": center,
                }
            )
        return out

    def histogram(self, layer: int, feature: int) -> tuple[np.ndarray, np.ndarray]:
        """The histogram of a feature's nonzero activations: ``(counts, edges)``, equal bins from 0 up to the last
        non-empty one (module docstring: exact, one pass). A feature that never fired has no bins.

        Example:
            >>> counts, edges = FeatureExplanations.load(_example_file()).histogram(0, 1)
            >>> counts.tolist(), edges.tolist()
            ([0, 1, 0, 1], [0.0, 1.0, 2.0, 3.0, 4.0])
        """
        part = self._part(layer, feature)
        counts = part.hist_counts[int(feature)]
        filled = np.flatnonzero(counts)
        if not len(filled):
            return np.zeros(0, np.int64), np.zeros(1)
        used = int(filled[-1]) + 1
        width = part.hist_top[int(feature)] / len(counts)
        return counts[:used].copy(), np.arange(used + 1) * width

    def quantile_values(self, layer: int, feature: int, n: int = 100) -> list[float]:
        """The 1/n, 2/n, …, n/n quantiles of a feature's nonzero activations, read from its histogram (linear within
        a bin, so within one bin width of the exact ones, the smallest activations whose share of activations at or
        below them reaches the level; the last is the maximum). What circuit-tracer's front end
        reads as ``quantile_values`` to say at which percentile a node's activation lies.

        Example:
            >>> FeatureExplanations.load(_example_file()).quantile_values(0, 1, n=2)
            [2.0, 3.0]
        """
        counts, edges = self.histogram(layer, feature)
        if not len(counts):
            return []
        n = check_int("n", n, minimum=1)
        cumulative = np.concatenate([[0.0], np.cumsum(counts, dtype=np.float64)]) / counts.sum()
        levels = np.arange(1, n + 1) / n
        at = np.minimum(np.searchsorted(cumulative[1:], levels - 1e-12), len(counts) - 1)  # the bin of each level
        share = (levels - cumulative[at]) / np.maximum(cumulative[at + 1] - cumulative[at], 1e-300)
        values = edges[at] + np.clip(share, 0.0, 1.0) * (edges[1] - edges[0])
        values[-1] = self._part(layer, feature).act_max[int(feature)]
        return np.minimum(values, values[-1]).tolist()

    def detail(self, layer: int, feature: int, scan: str = "") -> dict[str, Any]:
        """A feature as circuit-tracer's ``features/{scan}/{index}.json`` detail file (the fields of its
        ``frontend/feature_models.py``), plus ``label``: the top contexts as the ``"Top activations"`` examples
        (``tokens`` decoded one by one, ``tokens_acts_list``, ``train_token_ind`` = the activating token,
        ``is_repeated_datapoint`` when an earlier example came from the same text), ``top_logits`` /
        ``bottom_logits`` (the vocabulary projection's tokens), ``act_min`` (0) and ``act_max``, ``quantile_values``
        (:meth:`quantile_values`), ``histogram`` (the counts of :meth:`histogram`; the front end draws them over
        ``[act_min, act_max]``, and the last bin ends within one bin width above ``act_max``) and
        ``activation_frequency`` (the density). Token text is data here: nothing is escaped.

        Example:
            >>> detail = FeatureExplanations.load(_example_file()).detail(0, 1, scan="toy")
            >>> detail["index"], detail["top_logits"][:2], detail["histogram"], detail["label"]
            (2, ['a', 'the'], [0, 1, 0, 1], 'the / a')
            >>> detail["examples_quantiles"][0]["examples"][0]["tokens"]
            ['<b>', 'the', ' cat']
        """
        part = self._part(layer, feature)
        f = int(feature)
        seen: set[int] = set()
        examples = []
        for example in self.examples(layer, feature):
            examples.append(
                {
                    "tokens_acts_list": [0.0 if not np.isfinite(a) else a for a in example["context_activations"]],
                    "train_token_ind": example["center"],
                    "is_repeated_datapoint": example["text_id"] in seen,
                    "tokens": example["context"],
                }
            )
            seen.add(example["text_id"])
        counts, _ = self.histogram(layer, feature)
        return {
            "transcoder_id": str(scan or ""),
            "index": cantor_pair(layer, f),
            "examples_quantiles": [{"quantile_name": "Top activations", "examples": examples}] if examples else [],
            "top_logits": [self._token(i) for i in part.top_logit_ids[f]],
            "bottom_logits": [self._token(i) for i in part.bottom_logit_ids[f]],
            "act_min": 0.0,
            "act_max": float(part.act_max[f]),
            "quantile_values": self.quantile_values(layer, f),
            "histogram": [int(c) for c in counts],
            "activation_frequency": float(part.density[f]),
            "label": part.labels[f],
        }

    # ------------------------------------------------------------------ labels
    def relabel(
        self,
        labeller: Labeller,
        *,
        features: Iterable[tuple[int, int]] | None = None,
        source: str | None = None,
        progress: bool = True,
    ) -> FeatureExplanations:
        """Label features with ``labeller(feature, examples) -> str`` (e.g. :class:`~interp_widgets.concepts.
        LMLabeler`; ``examples`` as :meth:`examples` gives them). ``features``: the ``(layer, feature)`` pairs to
        label (default: every feature that fired; a local LM takes about a second each, so label a graph's features
        only: ``graph.with_explanations(explained, labeller=...)`` does). Features that never fired are not asked
        about. ``run.label_source`` records ``source`` (default: the labeller's ``name``). Returns ``self``.

        Example:
            >>> explained = FeatureExplanations.load(_example_file())
            >>> explained.relabel(lambda f, ex: ex[0]["token"].upper(), features=[(0, 1)], source="shout").label(0, 1)
            'THE'
        """
        if not callable(labeller):
            raise TypeError("labeller must be a callable (feature index, examples) -> str, e.g. LMLabeler(...)")
        from tqdm.auto import tqdm

        if features is None:
            chosen = [(layer, f) for layer, part in self.layers.items() for f in np.flatnonzero(part.density > 0)]
        else:
            chosen = sorted({(int(layer), int(f)) for layer, f in features})
        new: dict[tuple[int, int], str] = {}
        for layer, f in tqdm(chosen, desc="labelling features", unit="feature", disable=not progress):
            part = self._part(layer, f)
            if part.density[f] > 0:  # all or nothing: a failing labeller leaves the labels as they were
                new[(layer, int(f))] = _checked_label(
                    labeller(int(f), self.examples(layer, f)), int(f), part.density[f]
                )
        for (layer, f), label in new.items():
            self.layers[layer].labels[f] = label
        self.run.label_source = source or getattr(labeller, "name", None) or "custom"
        return self

    # ------------------------------------------------------------------ tables and display
    def to_dataframe(self):
        """One row per (layer, feature): ``layer``, ``feature``, ``label``, ``density``, ``mean``, ``act_max``,
        ``decoder_norm``, ``top_tokens`` (the tokens of the top contexts), ``top_logits`` and ``bottom_logits``
        (the vocabulary projection's first tokens), joined with `` | ``.

        Example:
            >>> frame = FeatureExplanations.load(_example_file()).to_dataframe()
            >>> frame[["layer", "feature", "label", "top_tokens", "top_logits"]].values.tolist()
            [[0, 0, '', '', 'the | a'], [0, 1, 'the / a', 'the | a', 'a | the']]
        """
        import pandas as pd

        return pd.DataFrame(
            [self._row(layer, f) for layer, part in self.layers.items() for f in range(part.n_features)]
        )

    def _row(self, layer: int, f: int) -> dict[str, Any]:
        part = self.layers[layer]
        return {
            "layer": layer,
            "feature": f,
            "label": part.labels[f],
            "density": float(part.density[f]),
            "mean": float(part.mean[f]),
            "act_max": float(part.act_max[f]),
            "decoder_norm": float(part.decoder_norm[f]),
            "top_tokens": " | ".join(e["token"] for e in self.examples(layer, f)),
            "top_logits": " | ".join(self._token(i) for i in part.top_logit_ids[f, :5]),
            "bottom_logits": " | ".join(self._token(i) for i in part.bottom_logit_ids[f, :5]),
        }

    def __repr__(self) -> str:
        widths = sorted({part.n_features for part in self.layers.values()})
        each = f"{widths[0]} features each" if len(widths) == 1 else f"{widths} features"
        return (
            f"FeatureExplanations({len(self.layers)} layers, {each}, {self.run.params.get('n_examples')} contexts "
            f"each over {self.run.n_tokens} tokens, labels from {self.run.label_source})"
        )

    def _repr_html_(self) -> str:
        import html

        import pandas as pd

        # the 12 features with the largest activations, found from the arrays (a set has ~10^5 features)
        keys = [(layer, int(f)) for layer, part in self.layers.items() for f in np.flatnonzero(part.density > 0)]
        peaks = [self.layers[layer].act_max[f] for layer, f in keys]
        chosen = [keys[i] for i in np.argsort(peaks, kind="stable")[::-1][:12]]
        live = pd.DataFrame([self._row(layer, f) for layer, f in chosen]).round(4)
        title = html.escape(repr(self))
        # escape=True: token text and labels are untrusted
        return f"<div><b>{title}</b>{live.to_html(index=False, escape=True)}</div>"

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write to one safetensors file (arrays in the body, the rest as JSON in its header, with a checksum of the
        arrays that :meth:`load` verifies). Never pickles.

        Example:
            >>> explained = FeatureExplanations.load(_example_file())
            >>> again = FeatureExplanations.load(explained.save(getfixture("tmp_path") / "x.safetensors"))
            >>> again.detail(0, 1) == explained.detail(0, 1), again.run == explained.run
            (True, True)
        """
        from safetensors.numpy import save_file

        from interp_widgets._files import output_path

        path = output_path(path)
        arrays = {
            f"layer.{layer}.{name}": np.ascontiguousarray(getattr(part, name))
            for layer, part in self.layers.items()
            for name in _ARRAYS
        }
        meta = {
            "format": _FORMAT,
            "version": _VERSION,
            "run": self.run.__dict__,
            "labels": {str(layer): part.labels for layer, part in self.layers.items()},
            "vocab": [[i, t] for i, t in sorted(self.vocab.items())],
            "checksum": _digest(arrays),
        }
        tmp = path.with_name(path.name + ".tmp")
        save_file(arrays, str(tmp), metadata={"interp_widgets": json.dumps(meta)})
        os.replace(tmp, path)  # atomic: a reader never sees half a file
        return path

    @classmethod
    def load(cls, path: str | Path) -> FeatureExplanations:
        """Read a file written by :meth:`save`; a file whose arrays do not match their checksum is refused.

        Example:
            >>> FeatureExplanations.load(_example_file())
            FeatureExplanations(1 layers, 2 features each, 2 contexts each over 6 tokens, labels from top tokens)
        """
        from interp_widgets._files import read_safetensors

        fix = "pass a file written by FeatureExplanations.save (or TranscoderSet.explain(..., cache_dir=))"
        metadata, arrays = read_safetensors(path, what="saved FeatureExplanations", fix=fix)
        try:
            meta = json.loads(metadata.get("interp_widgets", "{}"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} has a damaged header ({err}); {fix}") from None
        if meta.get("format") != _FORMAT:
            raise ValueError(
                f"{path} holds {meta.get('format') or 'no interp_widgets object'}, not FeatureExplanations; {fix}"
            )
        if meta.get("version") != _VERSION:
            raise ValueError(
                f"{path} has FeatureExplanations version {meta.get('version')!r}; this interp_widgets reads version "
                f"{_VERSION}: explain the set again"
            )
        if meta.get("checksum") != _digest(arrays):
            raise ValueError(
                f"{path} is corrupted: its arrays do not match the checksum written with them; delete it and explain "
                "the set again (TranscoderSet.explain)"
            )
        layers = {}
        for layer, labels in meta["labels"].items():
            values = {name: arrays[f"layer.{layer}.{name}"] for name in _ARRAYS}
            layers[int(layer)] = LayerFeatures(layer=int(layer), labels=labels, **values)
        return cls(layers, {int(i): t for i, t in meta["vocab"]}, ExplanationRun(**meta["run"]))


def _digest(arrays: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        digest.update(name.encode())
        digest.update(str(value.dtype).encode())
        digest.update(str(value.shape).encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def corpus_digest(texts) -> str:
    """A digest of a corpus (each text, or chat conversation, as JSON): part of the explanations' cache key.

    Example:
        >>> corpus_digest(["a", "b"]) == corpus_digest(["a", "b"]) != corpus_digest(["ab"])
        True
    """
    digest = hashlib.sha256()
    for text in texts:
        digest.update(json.dumps(text, sort_keys=True).encode())
        digest.update(b"\0")
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------- the scan
class _LayerScan:
    """One layer's running statistics over the stream of token rows: the top ``k`` rows of every feature with their
    context windows (the concept interpreter's top-k merge), counts, sums, maxima and the doubling histogram."""

    def __init__(self, n: int, k: int, window: int, bins: int):
        self.n, self.k, self.window, self.bins = n, k, window, bins
        c = 2 * window + 1
        self.values = np.full((n, 0), -np.inf)
        self.texts = np.full((n, 0), -1, np.int64)
        self.positions = np.full((n, 0), -1, np.int64)
        self.ids = np.full((n, 0, c), -1, np.int64)
        self.acts = np.full((n, 0, c), np.nan, np.float32)
        self.active = np.zeros(n, np.int64)
        self.total = np.zeros(n)
        self.high = np.zeros(n)
        self.hist = np.zeros((n, bins), np.int64)
        self.top = np.zeros(n)  # the histogram's upper edge H (a power of two), 0 until the feature fires

    def add(self, C: np.ndarray, text_ids: np.ndarray, token_ids: np.ndarray, positions: np.ndarray) -> None:
        n, rows = self.n, len(C)
        values, local = _block_top(C, np.arange(rows), self.k)  # (n, ≤k), largest first
        offsets = np.arange(-self.window, self.window + 1)
        at = local[:, :, None] + offsets
        clipped = np.clip(at, 0, rows - 1)
        inside = (at >= 0) & (at < rows) & (text_ids[clipped] == text_ids[local][:, :, None])  # the same text only
        acts = np.where(inside, C[clipped, np.arange(n)[:, None, None]], np.nan).astype(np.float32)
        ids = np.where(inside, token_ids[clipped], -1)
        # the interpreter's merge, on slot numbers: which of the kept and the new candidates stay
        kept = self.values.shape[1]
        slots_old = np.broadcast_to(np.arange(kept), (n, kept))
        slots_new = np.broadcast_to(kept + np.arange(values.shape[1]), values.shape)
        self.values, slots = _merge_topk(self.values, slots_old, values, slots_new, self.k)

        def pick(old, new):
            both = np.concatenate([old, new], axis=1)
            index = slots if both.ndim == 2 else slots[:, :, None]
            return np.take_along_axis(both, index, 1)

        self.texts = pick(self.texts, text_ids[local])
        self.positions = pick(self.positions, positions[local])
        self.ids = pick(self.ids, ids)
        self.acts = pick(self.acts, acts)
        self.active += np.count_nonzero(C, axis=0)
        self.total += C.sum(0, dtype=np.float64)
        batch_max = C.max(0).astype(np.float64)
        self.high = np.maximum(self.high, batch_max)
        self._histogram(C, batch_max)

    def _histogram(self, C: np.ndarray, batch_max: np.ndarray) -> None:
        bins = self.bins
        _, exponent = np.frexp(batch_max)
        needed = np.where(batch_max > 0, np.ldexp(1.0, exponent), 0.0)  # the smallest power of two above the max
        grows = np.flatnonzero((needed > self.top) & (self.top > 0))
        factors = (needed[grows] / self.top[grows]).astype(np.int64)
        for factor in np.unique(factors):  # H doubles (factor times): merge each run of `factor` bins into one
            chosen = grows[factors == factor]
            if factor >= bins:
                merged = self.hist[chosen].sum(1, keepdims=True)
            else:
                merged = self.hist[chosen].reshape(len(chosen), bins // factor, factor).sum(2)
            self.hist[chosen] = 0
            self.hist[chosen, : merged.shape[1]] = merged
        self.top = np.maximum(self.top, needed)
        row, feature = np.nonzero(C)
        if len(row):
            index = np.floor(C[row, feature].astype(np.float64) * bins / self.top[feature]).astype(np.int64)
            self.hist += np.bincount(feature * bins + index, minlength=self.n * bins).reshape(self.n, bins)

    def finish(self, rows: int) -> dict[str, np.ndarray]:
        pad = self.k - self.values.shape[1]
        values, texts, positions, ids, acts = self.values, self.texts, self.positions, self.ids, self.acts
        if pad > 0:
            values = np.pad(values, ((0, 0), (0, pad)), constant_values=np.nan)
            texts = np.pad(texts, ((0, 0), (0, pad)), constant_values=-1)
            positions = np.pad(positions, ((0, 0), (0, pad)), constant_values=-1)
            ids = np.pad(ids, ((0, 0), (0, pad), (0, 0)), constant_values=-1)
            acts = np.pad(acts, ((0, 0), (0, pad), (0, 0)), constant_values=np.nan)
        silent = ~(values > 0)  # a row where the feature is 0 did not fire: no context (a dead feature has none)
        return {
            "density": self.active / max(rows, 1),
            "mean": self.total / max(rows, 1),
            "act_max": self.high,
            "hist_counts": self.hist,
            "hist_top": self.top,
            "top_values": np.where(silent, np.nan, values),
            "top_texts": np.where(silent, -1, texts),
            "top_positions": np.where(silent, -1, positions),
            "context_ids": np.where(silent[:, :, None], -1, ids),
            "context_acts": np.where(silent[:, :, None], np.nan, acts),
        }


def _projection(W_dec: np.ndarray, W_U: np.ndarray, top: int) -> dict[str, np.ndarray]:
    """Top and bottom ``top`` tokens of ``W_dec @ W_Uᵀ`` per feature, in blocks of about 64 MB of logits."""
    vocab = len(W_U)
    top = min(int(top), vocab)
    block = max(1, _BLOCK_VALUES // vocab)
    out: dict[str, list] = {
        "top_logit_ids": [],
        "top_logit_values": [],
        "bottom_logit_ids": [],
        "bottom_logit_values": [],
    }
    for start in range(0, len(W_dec), block):
        logits = W_dec[start : start + block] @ W_U.T
        high = _top_columns(logits, top)
        low = _top_columns(-logits, top)
        out["top_logit_ids"].append(high)
        out["top_logit_values"].append(np.take_along_axis(logits, high, 1))
        out["bottom_logit_ids"].append(low)
        out["bottom_logit_values"].append(np.take_along_axis(logits, low, 1))
    return {name: np.concatenate(parts) for name, parts in out.items()}


def cache_path(cache_dir: str | Path, key: str) -> Path:
    """The cache file of the explanations with this key.

    Example:
        >>> cache_path("/tmp/cache", "0123456789abcdef" * 4).name
        'feature-explanations-0123456789abcdef01234567.safetensors'
    """
    return Path(cache_dir) / f"feature-explanations-{key[:24]}.safetensors"


def explain_set(
    transcoders,
    model,
    tokenizer,
    texts: list,
    *,
    layers: list[int],
    stream: Callable[[list[int]], Iterator[tuple[int, np.ndarray, dict]]],
    n_examples: int,
    window: int,
    bins: int,
    vocab_top: int,
    include_special: bool,
    labeller: Labeller | None,
    cache_dir: str | Path | None,
    progress: bool,
) -> FeatureExplanations:
    """The work of :meth:`TranscoderSet.explain <interp_widgets.circuits.TranscoderSet.explain>` (which checks the
    arguments and gives the ``stream`` of token rows: ``stream(layers)`` yields ``(index after the run of texts,
    text id of each row, {layer: (inputs, outputs)})``).

    Example:
        >>> from interp_widgets.circuits import TranscoderSet
        >>> from interp_widgets.concepts import Transcoder
        >>> tc = Transcoder(16, k=2, max_epochs=1, progress=False)
        >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=tc)
        >>> tcs.explain(lm, lm_tokenizer, texts[:3], layers=[1], n_examples=2, progress=False).layers[1].n_features
        16
    """
    from tqdm.auto import tqdm

    from interp_widgets.adapter import ModelAdapter
    from interp_widgets._model_names import display_name, model_name_of

    n_examples = check_int("n_examples", n_examples, minimum=1)
    window = check_int("window", window, minimum=0)
    bins = check_int("bins", bins, minimum=2)
    if bins & (bins - 1):
        raise ValueError(f"bins must be a power of two (the histogram doubles its range by merging bins), got {bins}")
    vocab_top = check_int("vocab_top", vocab_top, minimum=1)
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if output is None or not hasattr(output, "weight"):
        raise ValueError(
            f"{type(model).__name__} has no output embedding, so its features have no vocabulary projection; "
            "explain a causal language model's transcoders"
        )
    params = {"n_examples": n_examples, "window": window, "bins": bins, "vocab_top": vocab_top,
              "include_special": bool(include_special), "layers": list(layers)}  # fmt: skip
    corpus = corpus_digest(texts)
    checksum = transcoders.checksum()
    name = display_name(model_name_of(model))
    key_fields = {"transcoders": checksum, "corpus": corpus, "n_texts": len(texts), "params": params,
                  "input_point": transcoders.input_point, "model_name": name, "format": _VERSION}  # fmt: skip
    key = hashlib.sha256(json.dumps(key_fields, sort_keys=True).encode()).hexdigest()
    path = None if cache_dir is None else cache_path(cache_dir, key)
    if path is not None and path.exists():
        try:
            cached = FeatureExplanations.load(path)
        except (ValueError, OSError, KeyError, TypeError) as err:
            raise ValueError(
                f"the cached feature explanations {path} cannot be used: {err}. Delete that file and call explain "
                "again: it recomputes them (one pass over the texts) and writes the cache anew"
            ) from None
        if cached.run.key != key:
            raise ValueError(
                f"the cache file {path} holds the explanations of another set, corpus or settings; delete it (or pass "
                "another cache_dir) and call explain again"
            )
        wanted = None if labeller is None else (getattr(labeller, "name", None) or "custom")
        if wanted is not None and cached.run.label_source != wanted:
            cached.relabel(labeller, progress=progress).save(path)
        return cached

    scans = {layer: _LayerScan(transcoders[layer].n_concepts, n_examples, window, bins) for layer in layers}
    adapter = ModelAdapter(model, tokenizer)
    rows, position = 0, 0
    bar = tqdm(total=len(texts), desc=f"explaining features ({len(layers)} layers)", unit="text",
               disable=not progress)  # fmt: skip
    gen = stream(layers)
    try:
        for end, text_ids, pairs in gen:
            token_ids, positions = [], []
            for t in np.unique(text_ids):  # the rows' tokens: each text of the run encoded again (no model)
                enc = adapter.encode(texts[int(t)])
                keep = np.flatnonzero(np.ones(len(enc), bool) if include_special else ~enc.special_mask)
                token_ids.append(np.asarray(enc.input_ids, np.int64)[keep])
                positions.append(keep)
            token_ids = np.concatenate(token_ids) if token_ids else np.zeros(0, np.int64)
            positions = np.concatenate(positions) if positions else np.zeros(0, np.int64)
            if len(token_ids) != len(text_ids):
                raise RuntimeError("the texts' tokens do not line up with the activations' rows")
            if len(text_ids):
                for layer, scan in scans.items():
                    C = transcoders[layer].transform(pairs[layer][0])
                    scan.add(C, text_ids, token_ids, positions)
            rows += len(text_ids)
            bar.update(end - position)
            position = end
    finally:
        gen.close()
        bar.close()
    if rows == 0:
        raise ValueError("the texts gave no token rows to explain; pass texts with tokens that are not special")
    W_U = output.weight.detach().float().cpu().numpy()
    parts = {}
    for layer, scan in scans.items():
        found = scan.finish(rows)
        W_dec = transcoders[layer].folded()["W_dec"].float().numpy()
        if W_dec.shape[1] != W_U.shape[1]:
            raise ValueError(
                f"layer {layer}'s decoder writes width {W_dec.shape[1]} but the output embedding reads "
                f"{W_U.shape[1]}; explain the set with the model it was trained on"
            )
        found.update(_projection(W_dec, W_U, vocab_top))
        found["decoder_norm"] = np.linalg.norm(W_dec, axis=1)
        parts[layer] = found
    used = set()
    for found in parts.values():
        used.update(np.unique(found["context_ids"]).tolist())
        used.update(np.unique(found["top_logit_ids"]).tolist())
        used.update(np.unique(found["bottom_logit_ids"]).tolist())
    used.discard(-1)
    vocab = {i: tokenizer.decode([i], clean_up_tokenization_spaces=False) for i in sorted(used)}
    layers_out = {}
    for layer, found in parts.items():
        labels = []
        for f in range(len(found["density"])):
            centers = [
                vocab[int(ids[window])]
                for ids, value in zip(found["context_ids"][f], found["top_values"][f])
                if np.isfinite(value)
            ]
            labels.append(label_from_tokens(centers) if centers else "")
        layers_out[layer] = LayerFeatures(layer=layer, labels=labels, **found)
    run = ExplanationRun(
        model_name=name,
        input_point=transcoders.input_point,
        transcoders=checksum,
        corpus=corpus,
        n_texts=len(texts),
        n_tokens=rows,
        params=params,
        key=key,
    )
    result = FeatureExplanations(layers_out, vocab, run)
    if labeller is not None:
        result.relabel(labeller, progress=progress)
    if path is not None:
        result.save(path)
    return result


def _example_file() -> Path:
    """A small saved explanation for the examples: one layer, two features (0 never fired; 1 fires on "the" and "a",
    with activations 3.0 and 2.0 in the texts "<b>the cat" and "<b>a dog")."""
    import tempfile

    path = Path(tempfile.gettempdir()) / "interp_widgets_example_explanations.safetensors"
    nan = np.nan
    part = LayerFeatures(
        layer=0,
        density=[0.0, 2 / 6],
        mean=[0.0, 5 / 6],
        act_max=[0.0, 3.0],
        decoder_norm=[1.0, 2.0],
        hist_counts=[[0, 0, 0, 0], [0, 1, 0, 1]],
        hist_top=[0.0, 4.0],
        top_values=[[nan, nan], [3.0, 2.0]],
        top_texts=[[-1, -1], [0, 1]],
        top_positions=[[-1, -1], [1, 1]],
        context_ids=[[[-1, -1, -1], [-1, -1, -1]], [[1, 10, 11], [1, 12, 13]]],
        context_acts=[[[nan] * 3, [nan] * 3], [[0.0, 3.0, 0.0], [0.0, 2.0, 0.0]]],
        top_logit_ids=[[10, 12], [12, 10]],
        top_logit_values=[[0.5, 0.1], [0.9, 0.4]],
        bottom_logit_ids=[[13, 11], [11, 13]],
        bottom_logit_values=[[-0.5, -0.1], [-0.9, -0.4]],
        labels=["", "the / a"],
    )
    vocab = {1: "<b>", 10: "the", 11: " cat", 12: "a", 13: " dog"}
    run = ExplanationRun("toy", "mlp_in", "0" * 64, "1" * 64, 2, 6, {"n_examples": 2, "window": 1, "bins": 4,
                         "vocab_top": 2, "include_special": False, "layers": [0]}, key="2" * 64)  # fmt: skip
    return FeatureExplanations({0: part}, vocab, run).save(path)
