"""The result of a lens: per lens, layer and position, the top-k tokens, the targets' probabilities and ranks and
KL(final ‖ lens).

Example:
    >>> from interp_widgets.lens import logit_lens
    >>> result = logit_lens(lm, lm_tokenizer, "The room was quiet", progress=False)
    >>> result
    LensResult(6 tokens, 2 layers, lenses=['logit'], targets=['next token'])
    >>> result.to_dataframe().columns[:6].tolist()
    ['lens', 'layer', 'position', 'token', 'top1', 'top1_prob']
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from interp_widgets._files import output_path, read_safetensors
from interp_widgets.targets import Targets
from interp_widgets.validation import check_choice, check_int

__all__ = ["LensResult"]

_FORMAT = "interp_widgets.LensResult"
_VERSION = 1


@dataclass
class LensResult:
    """A logit (and optionally tuned) lens over a text: ``N`` lenses × ``L`` layers × ``T`` positions.

    Attributes:
        tokens, token_ids: the ``T`` tokens (prompt, continuation, generated tokens).
        layers: the ``L`` canonical names of the residual-stream points read (``layer:i``, ``layer:i.resid_mid``).
        lenses: ``["logit"]`` or ``["logit", "tuned"]``.
        top_ids, top_probs: ``(N, L, T, k)`` the top-k token ids and probabilities of each cell.
        kl: ``(N, L, T)`` KL(final ‖ lens) in nats, final being the model's own output distribution.
        target_ids: ``(T, M)`` the targets of each position: column 0 the next token (a masked LM: the token itself,
            ``-1`` where there is none), then one column per ``targets=`` token.
        targets: the ``M`` targets (:class:`~interp_widgets.targets.Targets`): their names (``target_labels``) and
            token ids (``-1`` for the next token, which varies by position).
        target_probs, target_ranks: ``(N, L, T, M)`` probability (NaN where no target) and rank (1 = top, 0 = none).
        vocab_ids, vocab_text: the decoded text of every token id the result mentions.
        generated_mask: ``(T,)`` which tokens were generated.

    Example:
        >>> from interp_widgets.lens import logit_lens
        >>> result = logit_lens(lm, lm_tokenizer, "The room was quiet", progress=False)
        >>> result.top_tokens(layer=-1, position=0)[0][0] == result.token_text(result.top_ids[0, -1, 0, 0])
        True
    """

    tokens: list[str]
    token_ids: np.ndarray
    layers: list[str]
    lenses: list[str]
    top_ids: np.ndarray
    top_probs: np.ndarray
    kl: np.ndarray
    target_ids: np.ndarray
    targets: Targets
    target_probs: np.ndarray
    target_ranks: np.ndarray
    vocab_ids: np.ndarray
    vocab_text: list[str]
    generated_mask: np.ndarray
    prompt_length: int = 0
    model_name: str = ""
    task: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    _ARRAYS = (
        "token_ids",
        "top_ids",
        "top_probs",
        "kl",
        "target_ids",
        "target_probs",
        "target_ranks",
        "vocab_ids",
        "generated_mask",
    )

    # ------------------------------------------------------------------ look-ups
    def token_text(self, token_id: int) -> str:
        """The decoded text of a token id the result mentions.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room", progress=False)
            >>> result.token_text(result.token_ids[0]) == result.tokens[0]
            True
        """
        index = int(np.searchsorted(self.vocab_ids, int(token_id)))
        if index >= len(self.vocab_ids) or self.vocab_ids[index] != int(token_id):
            raise KeyError(f"token id {int(token_id)} does not occur in this result")
        return self.vocab_text[index]

    def _lens(self, lens: str) -> int:
        return self.lenses.index(check_choice("lens", lens, self.lenses))

    def _layer(self, layer) -> int:
        if isinstance(layer, str):
            if layer not in self.layers:
                raise ValueError(f"unknown layer {layer!r}; this result has {self.layers}")
            return self.layers.index(layer)
        index = check_int(
            "layer",
            layer,
            minimum=-len(self.layers),
            maximum=len(self.layers) - 1,
            hint=f"this result has {len(self.layers)} layers ({self.layers[0]} … {self.layers[-1]})",
        )
        return index % len(self.layers)

    @property
    def target_labels(self) -> list[str]:
        """The names of the ``M`` targets (``targets.labels``, read-only).

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> logit_lens(lm, lm_tokenizer, "The room", targets=[" was"], progress=False).target_labels
            ['next token', ' was']
        """
        return self.targets.labels

    def _target(self, target) -> int:
        return self.targets.index(target)

    def top_tokens(self, *, layer, position: int, lens: str = "logit") -> list[tuple[str, float]]:
        """The top-k ``(token text, probability)`` of one cell.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room", top_k=2, progress=False)
            >>> len(result.top_tokens(layer="layer:0", position=1))
            2
        """
        n, l = self._lens(lens), self._layer(layer)
        t = check_int("position", position, minimum=-len(self.tokens), maximum=len(self.tokens) - 1)
        return [(self.token_text(i), float(p)) for i, p in zip(self.top_ids[n, l, t], self.top_probs[n, l, t])]

    def trajectory(self, position: int, target=0, lens: str = "logit"):
        """Probability and rank of one target across the layers at one position, as a DataFrame.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room was", progress=False)
            >>> result.trajectory(0).columns.tolist()
            ['layer', 'target', 'probability', 'rank']
        """
        import pandas as pd

        n, m = self._lens(lens), self._target(target)
        t = check_int("position", position, minimum=-len(self.tokens), maximum=len(self.tokens) - 1)
        label = self.target_labels[m]
        if m == 0 and self.target_ids[t, 0] >= 0:
            label = f"{label} ({self.token_text(self.target_ids[t, 0])!r})"
        return pd.DataFrame(
            {
                "layer": self.layers,
                "target": label,
                "probability": self.target_probs[n, :, t, m],
                "rank": self.target_ranks[n, :, t, m],
            }
        )

    # ------------------------------------------------------------------ tables and charts
    def to_dataframe(self):
        """One row per lens, layer and position: the token, the top-1 token and probability, KL, and each target's
        probability and rank.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room was quiet", progress=False)
            >>> frame = result.to_dataframe()
            >>> len(frame), frame.columns[-3:].tolist()
            (12, ['kl', 'next token_prob', 'next token_rank'])
        """
        import pandas as pd

        N, L, T = self.kl.shape
        lens, layer, pos = np.meshgrid(np.arange(N), np.arange(L), np.arange(T), indexing="ij")
        lens, layer, pos = lens.ravel(), layer.ravel(), pos.ravel()
        top1 = self.top_ids[..., 0].ravel()
        lookup = dict(zip(self.vocab_ids.tolist(), self.vocab_text))
        frame = pd.DataFrame(
            {
                "lens": np.asarray(self.lenses)[lens],
                "layer": np.asarray(self.layers)[layer],
                "position": pos,
                "token": np.asarray(self.tokens, dtype=object)[pos],
                "top1": [lookup[int(i)] for i in top1],
                "top1_prob": self.top_probs[..., 0].ravel(),
                "kl": self.kl.ravel(),
            }
        )
        for m, label in enumerate(self.target_labels):
            frame[f"{label}_prob"] = self.target_probs[..., m].ravel()
            frame[f"{label}_rank"] = self.target_ranks[..., m].ravel()
        return frame

    def mean_kl(self, lens: str = "logit") -> np.ndarray:
        """Mean KL(final ‖ lens) over the positions, per layer.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room was quiet", progress=False)
            >>> result.mean_kl().shape
            (2,)
        """
        return self.kl[self._lens(lens)].mean(-1)

    def chart(self, value: str = "top1_prob", lens: str = "logit"):
        """An altair heatmap of layers × positions, coloured by ``value`` (``"top1_prob"``, ``"kl"`` or a target's
        ``"<label>_prob"`` / ``"<label>_rank"``), with the top-1 token written in each cell.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room was quiet", progress=False)
            >>> result.chart("kl").to_dict()["layer"][0]["mark"]["type"]
            'rect'
        """
        import altair as alt

        frame = self.to_dataframe()
        frame = frame[frame["lens"] == check_choice("lens", lens, self.lenses)]
        columns = [c for c in frame.columns if c.endswith(("_prob", "_rank")) or c == "kl"]
        check_choice("value", value, columns)
        frame = frame.assign(label=frame["position"].astype(str) + ": " + frame["token"].astype(str))
        order = list(dict.fromkeys(frame["label"]))
        base = alt.Chart(frame).encode(
            x=alt.X("label:N", sort=order, title="position"),
            y=alt.Y("layer:N", sort=list(reversed(self.layers)), title=None),
        )
        scale = alt.Scale(scheme="viridis", reverse=value.endswith("_rank"))
        rect = base.mark_rect().encode(
            color=alt.Color(f"{value}:Q", scale=scale),
            tooltip=[
                "layer",
                "position",
                "token",
                "top1",
                alt.Tooltip("top1_prob:Q", format=".3f"),
                alt.Tooltip("kl:Q", format=".3f"),
            ],
        )
        text = base.mark_text(fontSize=9).encode(text="top1:N")
        return (rect + text).properties(title=f"{lens} lens: {value}")

    # ------------------------------------------------------------------ display
    def widget(self, **options):
        """The lens widget: a layers × positions grid with hover, trajectories and a logit ↔ tuned switch.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> type(logit_lens(lm, lm_tokenizer, "The room", progress=False).widget()).__name__
            'LensWidget'
        """
        from interp_widgets.widgets import LensWidget

        return LensWidget(self, **options)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.widget()._repr_mimebundle_(include=include, exclude=exclude)

    def _display_(self):  # marimo's display protocol
        return self.widget()

    def __repr__(self) -> str:
        return (
            f"LensResult({len(self.tokens)} tokens, {len(self.layers)} layers, lenses={self.lenses}, "
            f"targets={self.target_labels})"
        )

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the result to one ``.safetensors`` file (arrays) whose header holds the rest as JSON. Never pickles.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room", progress=False)
            >>> again = LensResult.load(result.save(getfixture("tmp_path") / "lens.safetensors"))
            >>> again.tokens == result.tokens, bool(np.array_equal(again.kl, result.kl))
            (True, True)
        """
        from safetensors.numpy import save_file

        path = output_path(path)
        meta = {
            "format": _FORMAT,
            "version": _VERSION,
            **{f.name: getattr(self, f.name) for f in fields(self) if f.name not in (*self._ARRAYS, "targets")},
            "target_labels": self.targets.labels,  # the files keep 0.1's flat names
            "target_token_ids": self.targets.ids.tolist(),
        }
        arrays = {name: np.ascontiguousarray(getattr(self, name)) for name in self._ARRAYS}
        arrays["generated_mask"] = arrays["generated_mask"].astype(np.uint8)
        save_file(arrays, str(path), metadata={"interp_widgets": json.dumps(meta)})
        return path

    @classmethod
    def load(cls, path: str | Path) -> "LensResult":
        """Read a result written by :meth:`save`.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room", progress=False)
            >>> LensResult.load(result.save(getfixture("tmp_path") / "lens.safetensors")).layers
            ['layer:0', 'layer:1']
        """
        fix = "pass the path of a file written by LensResult.save(path)"
        metadata, arrays = read_safetensors(path, what="a saved LensResult", fix=fix)
        header = metadata.get("interp_widgets")
        meta = json.loads(header) if header else {}
        found = meta.pop("format", None)
        if found != _FORMAT:
            raise ValueError(f"{path} holds {found or 'no interp_widgets object'}, not a LensResult; {fix}")
        meta.pop("version", None)
        arrays["generated_mask"] = arrays["generated_mask"].astype(bool)
        targets = Targets(meta.pop("target_labels"), ids=meta.pop("target_token_ids", None))  # 0.1: no ids
        return cls(**meta, **arrays, targets=targets)
