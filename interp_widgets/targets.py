"""What a result explains or tracks: its targets (labels, token or class ids, probabilities) and the one lookup from a
target given by the user (a row index or a label) to its row.

Every result and view resolves targets here, by one set of rules (:meth:`Targets.index`):

- ``None`` is the first target;
- an int is a row index, negative ones counting from the end as in Python (``-1``: the last);
- a str is a label: an exact match first, else the first label that matches ignoring case;
- anything else (a bool, a float) is a TypeError, and an unknown label or an index out of range a ValueError that
  names the valid labels and indices.

This is a core module (numpy only), so compute packages and views both use it.

Example:
    >>> targets = Targets(["negative", "positive"], ids=[0, 2], probs=[0.2, 0.7])
    >>> targets.index("positive"), targets.index(-2), targets.index("Negative"), targets.index()
    (1, 0, 0, 0)
    >>> targets.index("neutral")
    Traceback (most recent call last):
    ...
    ValueError: unknown target 'neutral'; valid labels are ['negative', 'positive'] (or indices 0..1, -1 the last)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Contrast", "Targets"]


@dataclass(frozen=True, eq=False)
class Targets:
    """The ``n`` targets of a result: ``labels``, ``ids`` (token or class ids, ``-1`` where none) and ``probs``
    (the model's probability of each, NaN where none).

    Example:
        >>> targets = Targets(["positive"], probs=[0.63])
        >>> len(targets), targets.ids.tolist(), targets.label(0)
        (1, [-1], 'positive')
    """

    labels: list[str]
    ids: np.ndarray | None = None
    probs: np.ndarray | None = None

    def __post_init__(self) -> None:
        labels = [str(label) for label in self.labels]
        n = len(labels)
        ids = np.full(n, -1, np.int64) if self.ids is None else np.asarray(self.ids, dtype=np.int64).reshape(-1)
        probs = np.full(n, np.nan) if self.probs is None else np.asarray(self.probs, dtype=np.float64).reshape(-1)
        for name, values in (("ids", ids), ("probs", probs)):
            if len(values) != n:
                raise ValueError(f"target {name} has {len(values)} entries for {n} targets")
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "probs", probs)

    def __len__(self) -> int:
        return len(self.labels)

    def __repr__(self) -> str:
        return f"Targets({self.labels})"

    def index(self, target: int | str | None = None, *, name: str = "target") -> int:
        """The row of ``target``: ``None`` (the first), a row index (negative from the end) or a label (exact,
        else ignoring case). ``name`` names the target in the error messages.

        Example:
            >>> Targets(["a", "b", "c"]).index(-1), Targets(["a", "b", "c"]).index("B")
            (2, 1)
            >>> Targets(["a", "b"]).index(2)
            Traceback (most recent call last):
            ...
            ValueError: target index 2 is out of range; valid indices are 0..1 (or -2..-1 from the end) for ['a', 'b']
        """
        n = len(self.labels)
        if target is None:
            if not n:
                raise ValueError(f"there is no {name} to choose: this result has no targets")
            return 0
        if isinstance(target, np.generic):
            target = target.item()
        if isinstance(target, str):
            if target in self.labels:
                return self.labels.index(target)
            folded = [i for i, label in enumerate(self.labels) if label.lower() == target.lower()]
            if folded:
                return folded[0]
            raise ValueError(
                f"unknown {name} {target!r}; valid labels are {self.labels} (or indices 0..{n - 1}, -1 the last)"
            )
        if isinstance(target, bool) or not isinstance(target, int):
            raise TypeError(f"{name} must be an int (a row index), a label or None; got {type(target).__name__}")
        if not -n <= target < n:
            raise ValueError(
                f"{name} index {target} is out of range; valid indices are 0..{n - 1} (or {-n}..-1 from the end) "
                f"for {self.labels}"
            )
        return target % n

    def label(self, target: int | str | None = None) -> str:
        """The label of one target (given as :meth:`index` takes it).

        Example:
            >>> Targets(["negative", "positive"]).label(-1)
            'positive'
        """
        return self.labels[self.index(target)]

    def most_probable(self) -> int:
        """The row of the most probable target (the first row when no probability is known).

        Example:
            >>> Targets(["a", "b", "c"], probs=[0.1, float("nan"), 0.5]).most_probable()
            2
        """
        known = np.flatnonzero(np.isfinite(self.probs))
        return int(known[np.argmax(self.probs[known])]) if len(known) else 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (``labels``, ``ids``, ``probs`` as lists; NaN stays NaN).

        Example:
            >>> Targets(["a"], ids=[3], probs=[0.5]).to_dict()
            {'labels': ['a'], 'ids': [3], 'probs': [0.5]}
        """
        return {"labels": list(self.labels), "ids": self.ids.tolist(), "probs": self.probs.tolist()}

    def take(self, rows: Sequence[int]) -> Targets:
        """The targets of some rows, in that order.

        Example:
            >>> Targets(["a", "b", "c"], ids=[1, 2, 3]).take([2, 0]).ids.tolist()
            [3, 1]
        """
        rows = list(rows)
        return Targets([self.labels[r] for r in rows], ids=self.ids[rows], probs=self.probs[rows])


@dataclass
class Contrast:
    """The foils of a contrastive explanation, whose scores explain ``score(target) − score(foil)``: ``foils`` are
    :class:`Targets` (one foil per explained target), ``alignment`` the index of each foil in the foil continuation
    (negative: a prompt token counted from the end of the prompt; see :mod:`interp_widgets.tasks.foils`), ``text``
    the foil continuation as given.

    Example:
        >>> contrast = Contrast(Targets([" loud"], ids=[7], probs=[0.1]), alignment=[0], text=" loud")
        >>> contrast.foils.labels, contrast.alignment.tolist()
        ([' loud'], [0])
    """

    foils: Targets
    alignment: np.ndarray | None = None
    text: str | None = None

    def __post_init__(self):
        if self.alignment is not None:
            self.alignment = np.asarray(self.alignment, dtype=np.int64).reshape(-1)

    def with_probs(self, probs: Sequence[float]) -> Contrast:
        """The same foils with the model's probability of each.

        Example:
            >>> Contrast(Targets(["a"], ids=[1]), [0], "a").with_probs([0.25]).foils.probs.tolist()
            [0.25]
        """
        return Contrast(Targets(self.foils.labels, ids=self.foils.ids, probs=probs), self.alignment, self.text)
