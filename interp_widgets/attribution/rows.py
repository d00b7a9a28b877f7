"""Batched scoring of rows built from explained inputs.

Every attribution method turns user inputs into :class:`~interp_widgets.tasks.ExplainedInput` objects (an encoding
plus the targets to explain, built by the model's task: :mod:`interp_widgets.tasks`), then evaluates "rows" (modified
copies of the input embeddings) through :func:`evaluate_rows`, which packs rows of equal length into forward passes
capped by ``max_batch_tokens``.

Example:
    >>> from interp_widgets.tasks import prepare_inputs
    >>> problems = prepare_inputs(adapter, ["Not bad."], target=None)
    >>> problems[0].target_labels, problems[0].target_probs.round(3), problems[0].length
    (['positive'], array([0.568]), 5)
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.tasks import ExplainedInput
from interp_widgets.validation import check_choice

SCORE_KINDS = ("logit", "probability", "log_probability")


def _scores_from_logits(
    logits: torch.Tensor, target_ids: torch.Tensor, kind: str, foil_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """Float32 scores ``(rows, K)`` of targets ``target_ids`` ``(rows, K)``: the logit, probability or log-probability.

    ``logits`` are ``(rows, K, vocab)`` (a language model's logits at each target's position, see
    :meth:`~interp_widgets.adapter.ModelAdapter.forward_embeds`) or ``(rows, classes)`` (a classifier's).

    With ``foil_ids`` ``(rows, K)`` the score is the difference ``score(target) − score(foil)`` from the same logits.
    For log probabilities that difference is the logit difference exactly (the log-normaliser cancels), so it is
    computed from the logits, without a softmax over the vocabulary.
    """
    logits = logits.float()
    if logits.dim() == 2:
        logits = logits[:, None, :]
    index = target_ids.to(logits.device).clamp(min=0)
    if foil_ids is not None:
        foil = foil_ids.to(logits.device).clamp(min=0)
        if kind == "probability":
            logits = torch.softmax(logits, dim=-1)
        logits = logits.expand(-1, index.shape[1], -1)
        return logits.gather(-1, index[..., None])[..., 0] - logits.gather(-1, foil[..., None])[..., 0]
    if kind == "probability":
        logits = torch.softmax(logits, dim=-1)
    elif kind == "log_probability":
        logits = torch.log_softmax(logits, dim=-1)
    return logits.expand(-1, index.shape[1], -1).gather(-1, index[..., None])[..., 0]


def check_score_kind(kind: str) -> str:
    check_choice("score", kind, SCORE_KINDS)
    return kind


# ---------------------------------------------------------------------------------------------- batched evaluation
@dataclass
class RowChunk:
    """Rows ``start:stop`` of input ``item`` evaluated in one forward pass."""

    item: int
    start: int
    stop: int


def plan_chunks(
    adapter: ModelAdapter, lengths: Sequence[int], n_rows: Sequence[int], splits: Sequence[int | None] | None = None
) -> Iterator[list[RowChunk]]:
    """Pack the rows of every input into forward passes that hold one sequence length each.

    Rows of inputs with equal length (and, for encoder–decoder inputs, equal source length ``splits``) share passes
    of at most ``max_batch_tokens`` tokens; rows of different lengths never do, so no compute is spent on padding and no attention mask is needed. The rows of one length are spread
    evenly over the fewest passes that fit (``34`` rows with room for ``32`` run as ``17 + 17``, not ``32 + 2``).

    Example:
        >>> [[(c.item, c.start, c.stop) for c in b] for b in plan_chunks(adapter, [5, 6, 5], [3, 3, 3])]
        [[(0, 0, 3), (2, 0, 3)], [(1, 0, 3)]]
        >>> small = ModelAdapter(model, tokenizer, max_batch_tokens=32 * 5)  # 32 rows of 5 tokens per pass
        >>> [[(c.item, c.start, c.stop) for c in b] for b in plan_chunks(small, [5], [34])]
        [[(0, 0, 17)], [(0, 17, 34)]]
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: dict[tuple[int, int], list[int]] = {}
    for i in order:
        if n_rows[i] > 0:  # encoder–decoder rows share a pass only with rows split at the same source length
            split = -1 if splits is None or splits[i] is None else int(splits[i])
            groups.setdefault((int(lengths[i]), split), []).append(i)
    for (length, _), items in groups.items():
        total = sum(n_rows[i] for i in items)
        n_passes = -(-total // adapter.rows_per_batch(length))
        per_pass = -(-total // n_passes)
        batch: list[RowChunk] = []
        used = 0
        for i in items:
            start = 0
            while start < n_rows[i]:
                take = min(per_pass - used, n_rows[i] - start)
                batch.append(RowChunk(i, start, start + take))
                used += take
                start += take
                if used == per_pass:
                    yield batch
                    batch, used = [], 0
        if batch:
            yield batch


def _row_foils(problems, items: np.ndarray, chosen: np.ndarray) -> torch.Tensor | None:
    """The foil id of every row and target slot of a pass ``(rows, K)``, or None when no input of the pass has a
    contrast."""
    has = [problems[i].foil_ids is not None for i in np.unique(items)]
    if not any(has):
        return None
    if not all(has):
        raise ValueError("a pass mixes inputs with and without a contrast; give every input a foil or none")
    return torch.as_tensor(np.stack([problems[i].foil_ids[row] for i, row in zip(items, chosen)]))


def evaluate_rows(
    adapter: ModelAdapter,
    problems: Sequence[ExplainedInput],
    n_rows: Sequence[int],
    build_rows: Callable[[int, int, int], tuple[torch.Tensor, np.ndarray]],
    consume: Callable[[RowChunk, torch.Tensor, torch.Tensor | None], None],
    *,
    score: str,
    with_grad: bool,
    progress=None,
) -> None:
    """Evaluate rows of modified embeddings for many inputs in few large batches.

    ``build_rows(item, start, stop)`` returns embeddings ``(rows, T, D)`` and the targets (indices into
    ``problems[item].target_ids``) of each row: either one target per row, shape ``(rows,)``, or several,
    shape ``(rows, K)`` with ``-1`` for an unused slot. ``consume(chunk, scores, grads)`` receives the float32 row
    scores ``(rows,)`` or ``(rows, K)`` (NaN in unused slots) and, with ``with_grad``, the gradient of each score with
    respect to its row's embeddings, ``(rows, T, D)`` or ``(rows, K, T, D)`` (zero in unused slots); both stay on
    the model's device. Passes hold rows of one length (see :func:`plan_chunks`). A row's score is
    ``score(target) − score(foil)`` when its input has a contrast (``foil_ids``).

    Only the logits that are scored are computed (each row's target positions, see
    :meth:`~interp_widgets.adapter.ModelAdapter.forward_embeds`). A row with ``K`` targets runs forward once and
    its ``K`` gradients come from one backward pass batched over the targets (``torch.autograd.grad`` with
    ``is_grads_batched``), so the targets of one text (the tokens of a generation, several classes) share every
    forward pass. The passes are counted in the adapter's :meth:`~interp_widgets.adapter.ModelAdapter.counting`.

    Example:
        >>> from interp_widgets.tasks import prepare_inputs
        >>> problems = prepare_inputs(adapter, ["Not bad."], target="positive")
        >>> x = adapter.embed(torch.as_tensor(problems[0].encoding.input_ids)[None])[0].detach()
        >>> alphas = torch.linspace(0, 1, 5)  # five rows: the input embeddings scaled from 0 to 1
        >>> def build(item, start, stop):
        ...     return alphas[start:stop, None, None] * x, np.zeros(stop - start, dtype=np.int64)
        >>> seen = []
        >>> def consume(chunk, scores, grads):
        ...     seen.append((chunk.item, np.round(scores.double().numpy(), 3).tolist(), tuple(grads.shape)))
        >>> evaluate_rows(adapter, problems, [5], build, consume, score="probability", with_grad=True)
        >>> seen
        [(0, [0.628, 0.626, 0.608, 0.585, 0.568], (5, 5, 32))]

        Several targets per row: one forward pass, one batched backward pass, a gradient per target.

        >>> two = prepare_inputs(adapter, ["Not bad."], target=["negative", "positive"])
        >>> def build_both(item, start, stop):
        ...     return x.expand(stop - start, -1, -1), np.array([[0, 1]] * (stop - start))
        >>> with adapter.counting() as count:
        ...     evaluate_rows(adapter, two, [1], build_both, consume, score="probability", with_grad=True)
        >>> seen[-1], count
        ((0, [[0.149, 0.568]], (1, 2, 5, 32)), PassCount(forward=1, forward_rows=1, backward=1, backward_rows=2))
    """
    splits = [p.source_length for p in problems]
    for batch in plan_chunks(adapter, [p.length for p in problems], n_rows, splits):
        split = {"source_length": splits[batch[0].item]} if splits[batch[0].item] is not None else {}
        pieces = [build_rows(chunk.item, chunk.start, chunk.stop) for chunk in batch]
        x = (pieces[0][0] if len(pieces) == 1 else torch.cat([rows for rows, _ in pieces])).detach()
        single = np.ndim(pieces[0][1]) == 1
        width = max(1 if single else np.shape(t)[1] for _, t in pieces)
        slots = np.full((len(x), width), -1, dtype=np.int64)
        offset = 0
        for _, targets in pieces:
            targets = np.asarray(targets, dtype=np.int64).reshape(len(targets), -1)
            slots[offset : offset + len(targets), : targets.shape[1]] = targets
            offset += len(targets)
        items = np.concatenate([np.full(c.stop - c.start, c.item) for c in batch])
        valid = slots >= 0
        first = np.where(valid.any(1), slots[np.arange(len(slots)), valid.argmax(1)], 0)
        chosen = np.where(valid, slots, first[:, None])  # unused slots score a real target, then are dropped
        target_ids = np.stack([problems[i].target_ids[row] for i, row in zip(items, chosen)])
        positions = np.stack([problems[i].target_positions[row] for i, row in zip(items, chosen)])
        target_ids = torch.as_tensor(target_ids)
        positions = torch.as_tensor(positions).clamp(min=0)
        foil_ids = _row_foils(problems, items, chosen)
        valid_t = torch.as_tensor(valid)
        if with_grad:
            x.requires_grad_(True)
            with torch.enable_grad():
                logits = adapter.forward_embeds(x, positions=positions, **split)
                row_scores = _scores_from_logits(logits, target_ids, score, foil_ids)
                grads = _gradients(adapter, row_scores, x, valid_t.to(row_scores.device))
            row_scores = row_scores.detach()
        else:
            with torch.inference_mode():
                logits = adapter.forward_embeds(x, positions=positions, **split)
                row_scores = _scores_from_logits(logits, target_ids, score, foil_ids)
            grads = None
        row_scores = row_scores.masked_fill(~valid_t.to(row_scores.device), float("nan"))
        if single:
            row_scores = row_scores[:, 0]
            grads = None if grads is None else grads[:, 0]
        offset = 0
        for chunk in batch:
            n = chunk.stop - chunk.start
            consume(chunk, row_scores[offset : offset + n], None if grads is None else grads[offset : offset + n])
            offset += n
        if progress is not None:
            progress.update(offset)
        # Nothing of a pass outlives it: its rows, logits (and their graph) and gradients are dropped before the
        # next pass is built, and the memory they held goes back to the system (see release_freed_memory).
        del pieces, x, logits, row_scores, grads
        release_freed_memory()


def release_freed_memory() -> None:
    """Return the C heap's free pages to the operating system (glibc's ``malloc_trim``; elsewhere nothing).

    After a pass frees its activations, glibc keeps the freed heap pages resident: once a freed block of up to
    32 MB was a separate mapping, glibc raises its mapping threshold, and later tensors below it come from the heap,
    whose free pages it keeps. Repeated passes then grow the resident memory beyond what one pass uses (IG at 256
    steps on a 512-token MiniLM input: 1.2-1.4x one pass of ``max_batch_tokens``, see
    ``benchmarks/attribution.py``). Trimming after each pass releases those pages; it changes no allocator setting.

    Example:
        >>> release_freed_memory()
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=None)
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, Windows, musl)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):
        return None


def _gradients(adapter: ModelAdapter, scores: torch.Tensor, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Gradients ``(rows, K, T, D)`` of every valid score ``(rows, K)`` with respect to its row of ``x``.

    One backward pass for one target per row; for several, one backward pass batched over the targets
    (``is_grads_batched``, a vmap over the backward graph), falling back to one pass per target for models whose
    operations vmap cannot batch."""
    rows, width = scores.shape
    if width == 1:
        (grads,) = torch.autograd.grad(scores[valid].sum(), x)
        adapter.count_backward(1, int(valid.sum()))
        return grads[:, None]
    columns = torch.nonzero(valid.any(0)).reshape(-1).tolist()
    eye = torch.eye(width, dtype=scores.dtype, device=scores.device)[columns]  # (used columns, K)
    grad_outputs = eye[:, None, :] * valid[None].to(scores.dtype)  # (used columns, rows, K)
    try:
        (batched,) = torch.autograd.grad(scores, x, grad_outputs=grad_outputs, is_grads_batched=True, retain_graph=True)
        passes = 1
    except RuntimeError:  # an operation without a vmap rule: one backward pass per target column
        batched = torch.stack(
            [torch.autograd.grad(scores, x, grad_outputs=g, retain_graph=True)[0] for g in grad_outputs]
        )
        passes = len(columns)
    adapter.count_backward(passes, int(valid.sum()))
    if len(columns) == width:
        return batched.transpose(0, 1)
    grads = torch.zeros((rows, width, *x.shape[1:]), dtype=batched.dtype, device=batched.device)
    grads[:, columns] = batched.transpose(0, 1)
    return grads
