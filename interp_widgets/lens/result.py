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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from interp_widgets._files import output_path, read_saved
from interp_widgets._flat import group_flat, install_flat_properties, replace_flat
from interp_widgets.targets import Targets
from interp_widgets.text_units import TokenLayout, joined_layout
from interp_widgets.validation import check_choice, check_int

__all__ = ["FLAT_ATTRIBUTES", "LensPositions", "LensReadout", "LensResult", "LensRun", "Vocabulary"]

_FORMAT = "interp_widgets.LensResult"
_VERSION = 2  # 2: the token layout (text, offsets, special tokens, word and sentence ids) is saved too


@dataclass
class LensPositions:
    """What each of the ``T`` positions of a lens is: its token id (``token_ids``), the token id of each of the ``M``
    targets there (``target_ids`` ``(T, M)``: column 0 the next token, for a masked LM the token itself, ``-1``
    where there is none; then one column per ``targets=`` token), which tokens were generated (``generated_mask``,
    none by default) and how many tokens the prompt has (``prompt_length``; a continuation follows it).

    Example:
        >>> from interp_widgets.lens import logit_lens
        >>> positions = logit_lens(lm, lm_tokenizer, "The room", max_new_tokens=1, progress=False).positions
        >>> positions.prompt_length, positions.generated_mask.tolist(), positions.target_ids.shape
        (2, [False, False, True], (3, 1))
    """

    token_ids: np.ndarray
    target_ids: np.ndarray
    generated_mask: np.ndarray | None = None
    prompt_length: int = 0

    def __post_init__(self):
        self.token_ids = np.asarray(self.token_ids, dtype=np.int64).reshape(-1)
        n = len(self.token_ids)
        self.target_ids = np.asarray(self.target_ids, dtype=np.int64)
        if self.target_ids.ndim != 2 or len(self.target_ids) != n:
            raise ValueError(
                f"target_ids has shape {self.target_ids.shape}; it needs one row per position, ({n}, targets)"
            )
        if self.generated_mask is None:
            self.generated_mask = np.zeros(n, bool)
        self.generated_mask = np.asarray(self.generated_mask, dtype=bool).reshape(-1)
        if len(self.generated_mask) != n:
            raise ValueError(f"generated_mask has {len(self.generated_mask)} entries for {n} positions")
        self.prompt_length = check_int("prompt_length", self.prompt_length, minimum=0, maximum=n)

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass
class LensReadout:
    """What the lenses read in every cell of ``N`` lenses × ``L`` layers × ``T`` positions: the top-k token ids and
    probabilities (``top_ids``, ``top_probs``: ``(N, L, T, k)``), KL(final ‖ lens) in nats (``kl``: ``(N, L, T)``;
    final is the model's own output distribution), and each of the ``M`` targets' probability (NaN where no target)
    and rank (1 = top, 0 = none) (``target_probs``, ``target_ranks``: ``(N, L, T, M)``).

    Example:
        >>> from interp_widgets.lens import logit_lens
        >>> readout = logit_lens(lm, lm_tokenizer, "The room", top_k=3, progress=False).readout
        >>> readout.shape, readout.top_ids.shape, readout.target_ranks.shape
        ((1, 2, 2), (1, 2, 2, 3), (1, 2, 2, 1))
    """

    top_ids: np.ndarray
    top_probs: np.ndarray
    kl: np.ndarray
    target_probs: np.ndarray
    target_ranks: np.ndarray

    def __post_init__(self):
        for name in ("top_ids", "top_probs", "kl", "target_probs", "target_ranks"):
            setattr(self, name, np.asarray(getattr(self, name)))
        if self.kl.ndim != 3:
            raise ValueError(f"kl has shape {self.kl.shape}; it needs (lenses, layers, positions)")
        for name in ("top_ids", "top_probs", "target_probs", "target_ranks"):
            value = getattr(self, name)
            if value.shape[:3] != self.kl.shape or value.ndim != 4:
                raise ValueError(f"{name} has shape {value.shape}; it needs {self.kl.shape} + (one axis more,)")
        if self.top_ids.shape != self.top_probs.shape:
            raise ValueError(f"top_ids has shape {self.top_ids.shape} but top_probs {self.top_probs.shape}")
        if self.target_probs.shape != self.target_ranks.shape:
            raise ValueError(
                f"target_probs has shape {self.target_probs.shape} but target_ranks {self.target_ranks.shape}"
            )

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(N, L, T)``: lenses, layers and positions.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> logit_lens(lm, lm_tokenizer, "The room was quiet", progress=False).readout.shape
            (1, 2, 6)
        """
        return self.kl.shape


@dataclass
class Vocabulary:
    """The decoded text of every token id a result mentions: ``ids`` (ascending, each once) and their ``text``.

    Example:
        >>> vocab = Vocabulary([3, 7], ["a", " b"])
        >>> vocab.text_of(7)
        ' b'
    """

    ids: np.ndarray
    text: list[str]

    def __post_init__(self):
        self.ids = np.asarray(self.ids, dtype=np.int64).reshape(-1)
        self.text = list(self.text)
        if len(self.text) != len(self.ids):
            raise ValueError(f"vocab_text has {len(self.text)} entries for {len(self.ids)} vocab_ids")
        if len(self.ids) > 1 and not bool((np.diff(self.ids) > 0).all()):
            raise ValueError("vocab_ids must be ascending with each id once (np.unique of the ids gives that)")

    def __len__(self) -> int:
        return len(self.ids)

    def text_of(self, token_id: int) -> str:
        """The decoded text of one token id (a KeyError if the result does not mention it).

        Example:
            >>> Vocabulary([3, 7], ["a", " b"]).text_of(4)
            Traceback (most recent call last):
            ...
            KeyError: 'token id 4 does not occur in this result'
        """
        index = int(np.searchsorted(self.ids, int(token_id)))
        if index >= len(self.ids) or self.ids[index] != int(token_id):
            raise KeyError(f"token id {int(token_id)} does not occur in this result")
        return self.text[index]


@dataclass
class LensRun:
    """How a lens ran: its ``lenses`` (``["logit"]`` or ``["logit", "tuned"]``), the ``layers`` it read (canonical
    names of residual-stream points: ``layer:i``, ``layer:i.resid_mid``), the model (``model_name``, its class), the
    model's ``task`` and the call's ``params`` (``top_k``, the head, the vocabulary size …).

    Example:
        >>> from interp_widgets.lens import logit_lens
        >>> run = logit_lens(lm, lm_tokenizer, "The room", progress=False).run
        >>> run.lenses, run.layers, run.model_name, run.layer_index(-1)
        (['logit'], ['layer:0', 'layer:1'], 'GPT2LMHeadModel', 1)
    """

    lenses: list[str]
    layers: list[str]
    model_name: str = ""
    task: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.lenses, self.layers, self.params = list(self.lenses), list(self.layers), dict(self.params)

    def lens_index(self, lens: str) -> int:
        """The index of a lens by name.

        Example:
            >>> LensRun(["logit", "tuned"], ["layer:0"]).lens_index("tuned")
            1
        """
        return self.lenses.index(check_choice("lens", lens, self.lenses))

    def layer_index(self, layer: int | str) -> int:
        """The index of a layer given by name or index (negative from the end).

        Example:
            >>> LensRun(["logit"], ["layer:0", "layer:1"]).layer_index("layer:1")
            1
        """
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


#: Each flat attribute of a :class:`LensResult` (0.1's fields, and the names in its saved files) as ``(part,
#: attribute of the part)``: ``result.top_ids`` is ``result.readout.top_ids``. The one table behind the read-only
#: properties, :meth:`LensResult.from_flat`, :meth:`LensResult.replace` and the saved files.
FLAT_ATTRIBUTES: dict[str, tuple[str, str]] = {
    **{name: ("layout", name) for name in ("text", "tokens", "offsets", "special_mask", "word_ids", "sentence_ids")},
    **{name: ("positions", name) for name in ("token_ids", "target_ids", "generated_mask", "prompt_length")},
    "target_labels": ("targets", "labels"), "target_token_ids": ("targets", "ids"),
    **{name: ("readout", name) for name in ("top_ids", "top_probs", "kl", "target_probs", "target_ranks")},
    "vocab_ids": ("vocab", "ids"), "vocab_text": ("vocab", "text"),
    **{name: ("run", name) for name in ("layers", "lenses", "model_name", "task", "params")},
}  # fmt: skip


@dataclass
class LensResult:
    """A logit (and optionally tuned) lens over a text: ``N`` lenses × ``L`` layers × ``T`` positions.

    A result is made of a few parts: the ``layout`` of the ``T`` tokens (a
    :class:`~interp_widgets.text_units.TokenLayout`: the text, the decoded tokens, their character spans, special
    tokens, word and sentence ids), the ``positions`` (:class:`LensPositions`: token ids, each target's token id at
    each position, generated tokens, prompt length), the ``M`` ``targets``
    (:class:`~interp_widgets.targets.Targets`: their names and token ids, ``-1`` for the next token, which varies by
    position), the ``readout`` of every cell (:class:`LensReadout`: top-k ids and probabilities, KL(final ‖ lens),
    the targets' probabilities and ranks), the ``vocab`` (:class:`Vocabulary`: the decoded text of every token id
    the result mentions) and the ``run`` (:class:`LensRun`: lenses, layers, model, task, parameters). The parts'
    values read as flat attributes too (``tokens``, ``top_ids``, ``kl``, ``target_labels``, ``layers`` …); see
    :data:`FLAT_ATTRIBUTES`.

    Example:
        >>> from interp_widgets.lens import logit_lens
        >>> result = logit_lens(lm, lm_tokenizer, "The room was quiet", progress=False)
        >>> result.top_tokens(layer=-1, position=0)[0][0] == result.token_text(result.top_ids[0, -1, 0, 0])
        True
        >>> result.layout.text, result.tokens == result.layout.tokens, result.kl is result.readout.kl
        ('The room was quiet', True, True)
    """

    layout: TokenLayout
    positions: LensPositions
    targets: Targets
    readout: LensReadout
    vocab: Vocabulary
    run: LensRun

    def __post_init__(self):
        N, L, T = self.readout.shape
        if len(self.layout) != len(self.positions):
            raise ValueError(f"the layout has {len(self.layout)} tokens but there are {len(self.positions)} token ids")
        if T != len(self.positions):
            raise ValueError(f"the readout has {T} positions for {len(self.positions)} tokens")
        if (N, L) != (len(self.run.lenses), len(self.run.layers)):
            raise ValueError(
                f"the readout has {N} lenses × {L} layers; the run names {self.run.lenses} × {len(self.run.layers)}"
            )
        M = len(self.targets)
        for name, found in (("target_ids", self.positions.target_ids.shape[1]),
                            ("target_probs", self.readout.target_probs.shape[-1])):  # fmt: skip
            if found != M:
                raise ValueError(f"{name} has {found} targets; there are {M} ({self.targets.labels})")

    @classmethod
    def from_flat(cls, **values: Any) -> LensResult:
        """A result from flat values, by the names of :data:`FLAT_ATTRIBUTES` (0.1's constructor and saved files);
        ``targets=`` (a :class:`~interp_widgets.targets.Targets`) may stand for ``target_labels`` and
        ``target_token_ids``. Without ``text`` and ``offsets`` (0.1 kept neither), the text is the tokens joined.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room was quiet", progress=False)
            >>> flat = {name: getattr(result, name) for name in FLAT_ATTRIBUTES}
            >>> LensResult.from_flat(**flat)
            LensResult(6 tokens, 2 layers, lenses=['logit'], targets=['next token'])
            >>> del flat["text"], flat["offsets"]
            >>> LensResult.from_flat(**flat).layout.offsets[:2].tolist()  # 0.1: the tokens joined
            [[0, 3], [3, 8]]
        """
        values = dict(values)
        targets = values.pop("targets", None)
        if targets is not None:
            if not isinstance(targets, Targets):
                raise TypeError(f"targets must be a Targets (interp_widgets.targets), got {type(targets).__name__}")
            if {"target_labels", "target_token_ids"} & set(values):
                raise TypeError("pass targets= or target_labels= (with target_token_ids=), not both")
        grouped = group_flat(FLAT_ATTRIBUTES, values, what="lens result", extra=("targets",))
        layout = grouped.get("layout", {})
        if "text" not in layout and "offsets" not in layout and "tokens" in layout:  # 0.1 kept the tokens only
            layout = joined_layout(**layout)
        else:
            layout = TokenLayout(**layout)
        if targets is None:
            found = grouped.get("targets", {})
            targets = Targets(found.get("labels", []), ids=found.get("ids"))  # 0.1's early files: no ids
        return cls(
            layout=layout,
            positions=LensPositions(**grouped.get("positions", {})),
            targets=targets,
            readout=LensReadout(**grouped.get("readout", {})),
            vocab=Vocabulary(**grouped.get("vocab", {})),
            run=LensRun(**grouped.get("run", {})),
        )

    def replace(self, **changes) -> LensResult:
        """A copy with some values changed, by part (``run=``) or by flat name (``model_name=``, ``kl=``); the parts
        not changed are shared.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room", progress=False)
            >>> result.replace(model_name="renamed").model_name, result.model_name
            ('renamed', 'GPT2LMHeadModel')
        """
        return replace_flat(self, FLAT_ATTRIBUTES, changes, what="lens result")

    # ------------------------------------------------------------------ look-ups
    def token_text(self, token_id: int) -> str:
        """The decoded text of a token id the result mentions (:meth:`Vocabulary.text_of`).

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room", progress=False)
            >>> result.token_text(result.token_ids[0]) == result.tokens[0]
            True
        """
        return self.vocab.text_of(token_id)

    def _position(self, position: int) -> int:
        return check_int("position", position, minimum=-len(self.tokens), maximum=len(self.tokens) - 1)

    def top_tokens(self, *, layer, position: int, lens: str = "logit") -> list[tuple[str, float]]:
        """The top-k ``(token text, probability)`` of one cell.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room", top_k=2, progress=False)
            >>> len(result.top_tokens(layer="layer:0", position=1))
            2
        """
        n, l, t = self.run.lens_index(lens), self.run.layer_index(layer), self._position(position)
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

        n, m, t = self.run.lens_index(lens), self.targets.index(target), self._position(position)
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
        lookup = dict(zip(self.vocab.ids.tolist(), self.vocab.text))
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
        return self.kl[self.run.lens_index(lens)].mean(-1)

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
    # Saved files hold the flat values (FLAT_ATTRIBUTES): arrays in the safetensors body, the rest as JSON.
    _ARRAYS = ("offsets", "special_mask", "word_ids", "sentence_ids", "token_ids", "target_ids", "generated_mask",
               "top_ids", "top_probs", "kl", "target_probs", "target_ranks", "vocab_ids")  # fmt: skip
    _BOOLS = ("special_mask", "generated_mask")

    def save(self, path: str | Path) -> Path:
        """Write the result to one ``.safetensors`` file (arrays) whose header holds the rest as JSON. Never pickles.

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room", progress=False)
            >>> again = LensResult.load(result.save(getfixture("tmp_path") / "lens.safetensors"))
            >>> again.tokens == result.tokens, bool(np.array_equal(again.kl, result.kl)), again.layout.text
            (True, True, 'The room')
        """
        from safetensors.numpy import save_file

        path = output_path(path)
        meta = {"format": _FORMAT, "version": _VERSION}
        arrays = {}
        for name in FLAT_ATTRIBUTES:
            value = getattr(self, name)
            if name in self._ARRAYS:
                arrays[name] = np.ascontiguousarray(value, dtype=np.uint8 if name in self._BOOLS else None)
            else:
                meta[name] = value.tolist() if isinstance(value, np.ndarray) else value
        save_file(arrays, str(path), metadata={"interp_widgets": json.dumps(meta)})
        return path

    @classmethod
    def load(cls, path: str | Path) -> LensResult:
        """Read a result written by :meth:`save` (also by interp_widgets 0.1, whose files have no text and offsets).

        Example:
            >>> from interp_widgets.lens import logit_lens
            >>> result = logit_lens(lm, lm_tokenizer, "The room", progress=False)
            >>> LensResult.load(result.save(getfixture("tmp_path") / "lens.safetensors")).layers
            ['layer:0', 'layer:1']
        """
        meta, arrays = read_saved(path, name="LensResult", format=_FORMAT, versions=(1, _VERSION))
        for name in cls._BOOLS:
            if name in arrays:
                arrays[name] = arrays[name].astype(bool)
        return cls.from_flat(**meta, **arrays)


install_flat_properties(LensResult, FLAT_ATTRIBUTES)
