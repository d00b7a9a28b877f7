"""The parent → children hierarchy of a nested dictionary (a Matryoshka SAE), and the absorption rate of each parent.

The concepts of a Matryoshka SAE come in groups (``groups_``: the nested prefixes), early groups coarse and later
ones refining them. A concept ``c`` is a *child* of a concept ``p`` in an earlier group when

- ``P(p > 0 | c > 0) ≥ min_conditional``: whenever the child fires, the parent almost always fires too, and
- ``cos(W_dec[c], W_dec[p]) ≥ min_cosine``: the child's decoder direction leans towards the parent's.

Each child hangs under its *best* parent: of those that pass both thresholds, the one with the highest conditional
probability (ties broken by the cosine). A child can itself be the parent of a concept in a later group, so the
result is a forest over the groups.

The *absorption rate* of a parent is the fraction of rows in which one of its children fires and it does not:
the child has absorbed the parent there (Chanin et al., 2024, "A is for Absorption"). This is only a **proxy** for
Chanin et al.'s measure, which asks a linear probe for the parent's concept (the ground truth) where the parent
latent fails to fire; here the children stand in for the probe, so a parent whose concept is present without any
child firing counts nothing, and a child that absorbed the parent completely (``P(p > 0 | c > 0)`` below
``min_conditional``) is not attached and counts nothing either.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from interp_widgets.validation import check_number

_CHUNK = 4096  # rows per block of an array of codes
_KIDS = 1024  # candidate children scored at once (a few 1024 × n_concepts float64 matrices)


@dataclasses.dataclass(frozen=True)
class ConceptHierarchy:
    """Parent → children links between the groups of a nested dictionary (see :func:`concept_hierarchy`).

    Attributes:
        parent_of: child concept → its parent concept.
        children: parent concept → its children, by decreasing ``P(parent > 0 | child > 0)``.
        conditional: child → ``P(parent > 0 | child > 0)`` for its parent.
        cosine: child → the cosine between its decoder row and its parent's.
        absorption: parent → the fraction of rows in which one of its children fires and it does not (a proxy for
            Chanin et al.'s probe-based absorption; see the module docstring).
        groups: the group of every concept.
        min_conditional, min_cosine: the thresholds used.
    """

    parent_of: dict[int, int]
    children: dict[int, list[int]]
    conditional: dict[int, float]
    cosine: dict[int, float]
    absorption: dict[int, float]
    groups: np.ndarray = dataclasses.field(repr=False)
    min_conditional: float = 0.8
    min_cosine: float = -0.1

    @property
    def parents(self) -> list[int]:
        """The concepts that have at least one child, in index order."""
        return sorted(self.children)

    @property
    def roots(self) -> list[int]:
        """Parents that are nobody's child: the tops of the trees."""
        return [p for p in self.parents if p not in self.parent_of]

    def to_dict(self) -> dict:
        """A JSON-ready form: ``{"parents": {p: {"children": [...], "absorption": rate}}, "links": [...]}``.

        Example:
            >>> codes = np.array([[1, 1, 0], [1, 0, 1], [0, 0, 0], [1, 1, 0]], dtype=np.float32)
            >>> decoder = np.array([[1, 0], [0.8, 0.6], [0.6, 0.8]], dtype=np.float32)
            >>> concept_hierarchy(codes, decoder, [0, 1, 1]).to_dict()["parents"]
            {0: {'children': [1, 2], 'absorption': 0.0}}
        """
        return {
            "parents": {p: {"children": list(cs), "absorption": self.absorption[p]} for p, cs in self.children.items()},
            "links": [
                {"child": c, "parent": p, "conditional": self.conditional[c], "cosine": self.cosine[c]}
                for c, p in sorted(self.parent_of.items())
            ],
            "min_conditional": self.min_conditional,
            "min_cosine": self.min_cosine,
        }


def concept_hierarchy(
    codes, decoder, groups, *, min_conditional: float = 0.8, min_cosine: float = -0.1
) -> ConceptHierarchy:
    """Hang each concept under its best parent in an earlier group: ``P(p > 0 | c > 0) ≥ min_conditional`` and
    ``cos(W_dec[c], W_dec[p]) ≥ min_cosine``; report each parent's absorption rate (a proxy, see the module docstring).

    Args:
        codes: ``(rows, n_concepts)`` concept coefficients (a concept fires where its coefficient is > 0), or a
            function of no arguments that returns an iterator of such blocks of rows (it is called twice), so that
            the codes of many rows never sit in memory at once.
        decoder: ``(n_concepts, features)`` decoder rows (``components_``).
        groups: the group of each concept (``MatryoshkaSAE.groups_``); parents come from strictly earlier groups.
        min_conditional: threshold on ``P(parent > 0 | child > 0)``, in ``[0, 1]``.
        min_cosine: threshold on the cosine of the decoder rows, in ``[-1, 1]``.

    Memory: a block of rows plus the ``n_concepts × n_concepts`` co-firing counts (float32: 1 GB at 16k concepts).
    Concepts that never fire have no parent. :meth:`MatryoshkaSAE.hierarchy
    <interp_widgets.concepts.MatryoshkaSAE.hierarchy>` calls this with the SAE's own codes, decoder and groups.

    Note: why ``min_cosine`` defaults to -0.1 and not 0.3. The child's decoder row of a Matryoshka SAE holds what its
    parent does not reconstruct, so it barely leans towards the parent. On the toy of Bussmann et al. (2025),
    orthogonal parent and child directions, ``tests/concepts/test_sae_matryoshka.py`` measures the planted links'
    cosines within 0.01 of 0 and no link at 0.3 (the encoder rows' child-parent cosines, medians 0.0-0.09, separate
    no better). On SmolLM2 layer 15 (``benchmarks/concepts.py --parts matryoshka``: 16,384 latents, prefixes 1k-16k,
    200k rows) the 320 links that ``P(parent | child) ≥ 0.8`` allows have cosines from -0.013 (10th percentile) to
    0.145 (90th), median 0.064: 0.3 keeps 10 of them, -0.1 keeps all 320. So the conditional firing test carries the
    signal, and the default cosine gate only refuses a child that points away from its parent.

    Example:
        >>> codes = np.array([[2, 1, 0], [1, 0, 3], [0, 0, 0], [0, 1, 0]], dtype=np.float32)
        >>> decoder = np.array([[1, 0], [0.8, 0.6], [0.6, 0.8]], dtype=np.float32)
        >>> tree = concept_hierarchy(codes, decoder, [0, 1, 1], min_conditional=0.5)
        >>> tree.children, tree.conditional, tree.absorption  # concept 1 fires without 0 in one of its two rows
        ({0: [2, 1]}, {1: 0.5, 2: 1.0}, {0: 0.333...})
        >>> concept_hierarchy(codes, decoder, [0, 1, 1], min_conditional=0.8).children  # 1 is not attached
        {0: [2]}
        >>> blocks = lambda: iter([codes[:2], codes[2:]])  # the same, from blocks of rows
        >>> concept_hierarchy(blocks, decoder, [0, 1, 1], min_conditional=0.5).absorption
        {0: 0.333...}
    """
    check_number("min_conditional", min_conditional, minimum=0)
    if min_conditional > 1:
        raise ValueError(f"min_conditional must be a probability in [0, 1], got {min_conditional!r}")
    check_number("min_cosine", min_cosine, minimum=-1)
    if min_cosine > 1:
        raise ValueError(f"min_cosine must be a cosine in [-1, 1], got {min_cosine!r}")
    if callable(codes):
        blocks = codes
    else:
        codes = np.asarray(codes)
        if codes.ndim != 2:
            raise ValueError(f"codes must be (rows, n_concepts), got shape {codes.shape}")

        def blocks():
            return (codes[start : start + _CHUNK] for start in range(0, len(codes), _CHUNK))

    decoder = torch.as_tensor(np.asarray(decoder, dtype=np.float32))
    groups = np.asarray(groups, dtype=np.int64)
    n = decoder.shape[0]
    if decoder.ndim != 2 or groups.shape != (n,):
        raise ValueError(
            f"decoder must be (n_concepts, features) and groups (n_concepts,); got {tuple(decoder.shape)} and "
            f"{groups.shape}"
        )
    # co-firing counts, accumulated over blocks of rows (float32 sums of 0/1 are exact below 2**24 rows)
    counts = torch.zeros(n, dtype=torch.float64)
    co = torch.zeros(n, n, dtype=torch.float32)
    for block in blocks():
        fired = torch.from_numpy(_fired(block, n)).float()
        counts += fired.sum(0).double()
        co += fired.T @ fired
    unit = decoder / decoder.norm(dim=1, keepdim=True).clamp_min(1e-12)
    g = torch.from_numpy(groups)
    parent_of, conditional, cosine = {}, {}, {}
    for start in range(0, n, _KIDS):
        kids = torch.arange(start, min(n, start + _KIDS))
        cond = co[kids].double() / counts[kids, None].clamp_min(1)
        cos = (unit[kids] @ unit.T).double()
        ok = (cond >= min_conditional) & (cos >= min_cosine) & (g[None, :] < g[kids, None]) & (counts[kids, None] > 0)
        best_cond = torch.where(ok, cond, torch.tensor(-1.0, dtype=torch.float64)).max(1, keepdim=True).values
        tie = ok & (cond == best_cond)
        best = torch.where(tie, cos, torch.tensor(-2.0, dtype=torch.float64)).argmax(1)
        for row in torch.nonzero(ok.any(1)).flatten().tolist():
            c, p = int(kids[row]), int(best[row])
            parent_of[c], conditional[c], cosine[c] = p, float(cond[row, p]), float(cos[row, p])
    children: dict[int, list[int]] = {}
    for c in sorted(parent_of, key=lambda c: (parent_of[c], -conditional[c], c)):
        children.setdefault(parent_of[c], []).append(c)
    children = dict(sorted(children.items()))
    hits = dict.fromkeys(children, 0)
    rows = dict.fromkeys(children, 0)
    if children:
        for block in blocks():
            fired = _fired(block, n)
            for p, kids in children.items():
                any_child = fired[:, kids].any(1)
                rows[p] += int(any_child.sum())
                hits[p] += int((any_child & ~fired[:, p]).sum())
    absorption = {p: hits[p] / rows[p] if rows[p] else 0.0 for p in children}
    return ConceptHierarchy(
        parent_of=parent_of,
        children=children,
        conditional=conditional,
        cosine=cosine,
        absorption=absorption,
        groups=groups,
        min_conditional=float(min_conditional),
        min_cosine=float(min_cosine),
    )


def _fired(block, n: int) -> np.ndarray:
    block = block.detach().cpu().numpy() if isinstance(block, torch.Tensor) else np.asarray(block)
    if block.ndim != 2 or block.shape[1] != n:
        raise ValueError(f"codes must be (rows, n_concepts={n}) blocks, got shape {block.shape}")
    return np.ascontiguousarray(block > 0)


__all__ = ["ConceptHierarchy", "concept_hierarchy"]
