"""One training configuration and one training loop for every sparse dictionary (the SAEs of :mod:`.sae`).

:class:`TrainingConfig` holds the settings every dictionary kind shares (Adam's learning rate, minibatch size, epoch
cap, early stopping, the monitoring sample, dead-concept resampling, seed, progress bar, device), with every default
in one place, validated once when it is built. :func:`train_dictionary` is the loop: it reads shuffled minibatches of
an :class:`~interp_widgets.concepts.ActivationStore` or an array (:class:`TrainingData`), takes Adam steps, measures
the loss on a fixed monitoring sample after each epoch, keeps the weights with the lowest monitoring loss, stops
early when that loss stops improving, and asks the dictionary to resample the concepts that did not fire.

What differs between dictionary kinds is supplied by the dictionary itself (see :class:`Dictionary`): its initial
weights, how a row is normalised before encoding, the loss of one batch (a :class:`Step`), the projection after an
optimiser step and the resampling of dead concepts. Two seams are there for kinds that do not reconstruct their input
with one loss:

- a *target* different from the input (``Y``, row-aligned with ``X``; a transcoder maps a layer's MLP input to its
  MLP output): the loop normalises it with ``dictionary._normalise_target`` and passes it to ``_loss`` as
  ``target=``; without ``Y`` the target is the normalised input itself and ``_loss(xn, w)`` is called;
- the loss is whatever ``_loss`` returns: several nested prefix losses (a Matryoshka SAE) are one ``_loss``.

Under ``torch.distributed`` (``torchrun``) the same loop trains data-parallel: each rank reads its part of every
minibatch and the ranks reduce what must be global (:class:`Ranks` gives the rule).

Example:
    >>> config = TrainingConfig(max_epochs=20, batch_size=128, progress=False)
    >>> config
    TrainingConfig(batch_size=128, max_epochs=20, progress=False)
    >>> from interp_widgets.concepts import SparseAutoencoder
    >>> sae = SparseAutoencoder(64, k=8, training=config).fit(store)
    >>> sae.fit_info_["epochs"], sae.training.max_epochs
    (20, 20)
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
from typing import Any, NamedTuple, Protocol
from collections.abc import Iterator

import numpy as np
import torch

from interp_widgets.validation import check_int, check_number


@dataclasses.dataclass(frozen=True, repr=False)
class TrainingConfig:
    """Training settings shared by every sparse dictionary; frozen, validated when built.

    Args:
        lr: Adam learning rate.
        batch_size: rows per optimiser step.
        max_epochs: epoch cap.
        patience, min_delta: stop after ``patience`` epochs without a relative improvement of ``min_delta`` in the
            monitoring loss; the weights with the lowest monitoring loss are kept.
        monitor_rows: size of the fixed monitoring sample (held out when fitting an array).
        resample_dead: at an epoch's end, reset the concepts that did not fire during it to badly reconstructed
            rows, and restart their Adam moments (the other concepts keep theirs).
        resample_rows: 0: "did not fire" means during the epoch. N >= 1: during the last N training rows, counted
            across epochs (for streamed fits whose epochs are short windows, where a rare concept looks dead in
            most windows).
        resample_stop_rows: resample only during the first this many training rows, so that the last resampled
            concepts have time to settle (0: until the last epoch).
        auxk_alpha: the weight of the auxiliary-k loss of TopK dictionaries (Gao et al. 2024, "Scaling and evaluating
            sparse autoencoders", appendix B.1; 1/32 there and in EleutherAI's sparsify): the concepts dead for
            ``dead_rows`` training rows reconstruct each row's residual with their top ``min(n_dead, width / 2)``
            pre-activations, which gives them gradient again. 0: off.
        dead_rows: training rows without firing after which a concept counts as dead for ``auxk_alpha``.
        seed: seed of the initialisation, the monitoring sample, the minibatch order and the resampling.
        restarts: train this many times from different initialisations (restart 0 from ``seed``, restart ``r``
            from a seed derived from ``(seed, r)``; the monitoring sample and the minibatch order stay those of
            ``seed``) and keep the run with the lowest monitoring loss, as scikit-learn's ``KMeans(n_init=)`` does.
            For losses with poor local minima, such as a Matryoshka SAE's nested prefixes (see
            :class:`~interp_widgets.concepts.MatryoshkaSAE`). Costs ``restarts`` fits; ``fit_info_`` records every
            restart's loss in ``restart_losses``.
        progress: show a progress bar (on rank 0 only when training across ranks).
        device: torch device for training (the fitted weights are kept on the CPU).
        distributed: train data-parallel across the ranks of ``torch.distributed`` (see :class:`Ranks`). None: when
            it is initialised with more than one rank; True: require it; False: train on this process's rows alone.

    A dictionary takes one as ``training=``, or the same names as keyword arguments (``SparseAutoencoder(64,
    lr=3e-3)``), which override the fields of ``training`` (or of the defaults).

    Example:
        >>> TrainingConfig(lr=3e-3, max_epochs=20)  # the repr lists the fields that differ from the defaults
        TrainingConfig(lr=0.003, max_epochs=20)
        >>> TrainingConfig(batch_size=0)
        Traceback (most recent call last):
        ...
        ValueError: batch_size must be an integer >= 1, got 0
    """

    lr: float = 1e-3
    batch_size: int = 1024
    max_epochs: int = 50
    patience: int = 3
    min_delta: float = 1e-3
    monitor_rows: int = 8192
    resample_dead: bool = True
    resample_rows: int = 0
    resample_stop_rows: int = 0
    auxk_alpha: float = 0.0
    dead_rows: int = 10_000_000
    seed: int = 0
    restarts: int = 1
    progress: bool = True
    device: str = "cpu"
    distributed: bool | None = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_epochs", "patience", "dead_rows", "restarts"):
            check_int(name, getattr(self, name), minimum=1)
        for name in ("monitor_rows", "resample_rows", "resample_stop_rows"):
            check_int(name, getattr(self, name), minimum=0)
        check_int("seed", self.seed, minimum=0)
        for name in ("lr", "min_delta", "auxk_alpha"):
            check_number(name, getattr(self, name), minimum=0)
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError):
            raise ValueError(f"device must be a torch device such as 'cpu' or 'cuda', got {self.device!r}") from None
        if self.distributed not in (None, True, False):
            raise ValueError(f"distributed must be None, True or False, got {self.distributed!r}")

    def __repr__(self) -> str:
        changed = "".join(
            f", {field.name}={getattr(self, field.name)!r}"
            for field in dataclasses.fields(self)
            if getattr(self, field.name) != field.default
        )
        return f"TrainingConfig({changed[2:]})"

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The names of the settings, which dictionaries also accept as keyword arguments.

        Example:
            >>> TrainingConfig.field_names()[:3]
            ('lr', 'batch_size', 'max_epochs')
        """
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def resolve(cls, training: TrainingConfig | None, overrides: dict[str, Any], owner: str) -> TrainingConfig | None:
        """``training`` with the keyword arguments ``overrides`` applied (``training`` itself when there are none).

        ``overrides`` may hold only field names; another name raises a TypeError that names the closest field.
        ``owner`` (the class taking them) is named in the errors.

        Example:
            >>> TrainingConfig.resolve(None, {"lr": 3e-3}, "SparseAutoencoder")
            TrainingConfig(lr=0.003)
            >>> TrainingConfig.resolve(None, {"max_epoch": 3}, "SparseAutoencoder")
            Traceback (most recent call last):
            ...
            TypeError: SparseAutoencoder got an unexpected keyword argument 'max_epoch'; did you mean 'max_epochs'? (keyword arguments beyond its own are TrainingConfig fields: lr, batch_size, max_epochs, patience, min_delta, monitor_rows, resample_dead, resample_rows, resample_stop_rows, auxk_alpha, dead_rows, seed, restarts, progress, device, distributed)
        """
        names = cls.field_names()
        for key in overrides:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ";"
                raise TypeError(
                    f"{owner} got an unexpected keyword argument {key!r}{hint} (keyword arguments beyond its own "
                    f"are TrainingConfig fields: {', '.join(names)})"
                )
        if not overrides:
            return training
        if training is not None and not isinstance(training, cls):
            raise TypeError(f"training must be a TrainingConfig or None, got {training!r}")
        return dataclasses.replace(training or cls(), **overrides)


class Step(NamedTuple):
    """What a dictionary's loss gives the loop for one batch of normalised rows."""

    loss: torch.Tensor  #: the scalar to minimise
    active: torch.Tensor  #: ``(n_concepts,)``: in how many rows each concept fired
    residual: torch.Tensor  #: target − prediction (rows × features, normalised units)


class Dictionary(Protocol):
    """The pieces a dictionary kind supplies to :func:`train_dictionary` (the SAEs of :mod:`.sae` implement them).

    ``x`` and ``y`` are float32 tensors on the training device; ``w`` is the dict of weight tensors that the loop
    optimises (every tensor in it is trained).
    """

    n_concepts: int

    def _init_weights(self, x: torch.Tensor, y: torch.Tensor | None, generator: torch.Generator) -> dict:
        """Initial weights from the monitoring sample's inputs ``x`` and targets ``y`` (None: the input)."""

    def _normalise(self, x: torch.Tensor, w: dict) -> torch.Tensor:
        """The encoder input of raw rows ``x``."""

    def _normalise_target(self, y: torch.Tensor, w: dict) -> torch.Tensor:
        """The normalised target of raw target rows ``y`` (needed only by kinds trained with a target)."""

    def _loss(self, xn: torch.Tensor, w: dict, target: torch.Tensor | None = None) -> Step:
        """The loss of one batch; ``target`` None means the normalised input ``xn`` itself."""

    def _after_step(self, w: dict) -> None:
        """Project the weights after an optimiser step (in place, without gradient)."""

    def _auxk_loss(self, xn: torch.Tensor, w: dict, residual: torch.Tensor, dead: torch.Tensor) -> torch.Tensor:
        """The auxiliary-k loss (``TrainingConfig.auxk_alpha``; needed only by kinds that take it): how well the
        ``dead`` concepts (indices) reconstruct the detached ``residual``."""

    def _resample(
        self, w: dict, dead: torch.Tensor, inputs: torch.Tensor, residual: torch.Tensor, generator: torch.Generator
    ) -> int:
        """Reset the ``dead`` concepts from the monitoring rows' encoder ``inputs`` and ``residual``; return how
        many were reset."""


def _adam(params, lr: float) -> torch.optim.Adam:
    """Adam with the fused kernel where torch has one for the device (one pass over each parameter instead of six:
    0.25 s → 0.04 s per step for a 16k × 576 SAE on one CPU thread); the same update up to float rounding."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):  # no fused kernel for this device or dtype
        return torch.optim.Adam(params, lr=lr)


class Ranks:
    """The ranks of a ``torch.distributed`` process group that train one dictionary data-parallel.

    Every rank holds the same dictionary, the same monitoring sample and the same data (an array, or a store that
    every rank opens: :func:`~interp_widgets.concepts.collect_activations` with a ``process_group`` returns the
    whole store on every rank), and reads only its part of each minibatch. The rule that makes a run equal a
    single-process one on the same data and seed, up to the order of float summation:

    - the minibatches are the single-process ones; rank ``r`` of ``W`` takes the ``r``-th of ``W`` contiguous,
      near-equal row ranges of each (:meth:`part`), so the union of the ranks' rows, in rank order, is the batch;
    - each rank's loss (a mean over its rows) is weighted by its share of the batch's rows and the gradients are
      summed across ranks (the weighted average: the gradient of the batch's mean) before every Adam step;
    - the concepts' firing counts (dead concepts, the auxiliary-k loss's ``dead_rows``) and the training loss are
      summed across ranks;
    - BatchTopK keeps the ``round(k · B)`` largest activations of the whole batch of ``B`` rows: the ranks
      all-gather their own ``k · B`` largest candidates and keep what reaches the global ``k · B``-th largest
      (:meth:`kth_largest`; an exact tie at that value keeps every tied activation, ``topk`` would keep some);
    - the initial weights, the weights after resampling and the monitoring loss and FVU are rank 0's, broadcast
      (every rank evaluates the same monitoring sample, so early stopping decides the same on every rank).

    Example (a one-process gloo group; under ``torchrun --nproc-per-node 2`` every rank runs the same
    ``SparseAutoencoder(...).fit(store)`` and training splits itself, not run here):
        >>> import torch.distributed as dist
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> try:
        ...     ranks = Ranks(dist.group.WORLD)
        ...     print(ranks.world, ranks.part(10), ranks.kth_largest(torch.tensor([3.0, 1.0, 2.0]), 2))
        ... finally:
        ...     dist.destroy_process_group()
        1 slice(0, 10, None) 2.0
    """

    def __init__(self, group=None):
        import torch.distributed as dist

        self.dist = dist
        self.group = dist.group.WORLD if group is None else group
        self.rank, self.world = dist.get_rank(self.group), dist.get_world_size(self.group)
        self.source = dist.get_global_rank(self.group, 0)
        self.rows = 0  #: the rows of the whole minibatch being stepped on (all ranks)

    @classmethod
    def resolve(cls, config: TrainingConfig, process_group=None) -> Ranks | None:
        """The ranks to train across: ``process_group``, else the default group when ``config.distributed`` asks
        for it (None: when ``torch.distributed`` is initialised with more than one rank); None for one process.

        Example:
            >>> Ranks.resolve(TrainingConfig()) is None  # torch.distributed is not initialised here
            True
        """
        dist = torch.distributed
        ready = dist.is_available() and dist.is_initialized()
        if process_group is not None:
            return cls(process_group)
        if config.distributed is False:
            return None
        if config.distributed and not ready:
            raise RuntimeError(
                "distributed=True but torch.distributed is not initialised: launch with torchrun and call "
                "torch.distributed.init_process_group() first, or pass distributed=None"
            )
        if not ready or dist.get_world_size() == 1 and not config.distributed:
            return None
        return cls()

    def part(self, n_rows: int) -> slice:
        """This rank's contiguous range of a batch of ``n_rows`` rows (the first ``n_rows % world`` ranks get one
        row more)."""
        size, extra = divmod(int(n_rows), self.world)
        start = self.rank * size + min(self.rank, extra)
        return slice(start, start + size + (self.rank < extra))

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """All-reduce ``tensor`` in place by summation; returns it."""
        self.dist.all_reduce(tensor, group=self.group)
        return tensor

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        """Overwrite ``tensor`` with rank 0's, in place; returns it."""
        self.dist.broadcast(tensor, src=self.source, group=self.group)
        return tensor

    def kth_largest(self, values: torch.Tensor, k: int) -> float:
        """The ``k``-th largest of the union of every rank's ``values`` (a flat tensor; -inf when fewer)."""
        local = values.detach().reshape(-1).float()
        top = torch.full((k,), -math.inf, dtype=local.dtype, device=local.device)
        n = min(k, local.numel())
        if n:
            top[:n] = local.topk(n).values
        blocks = [torch.empty_like(top) for _ in range(self.world)]
        self.dist.all_gather(blocks, top, group=self.group)
        return float(torch.cat(blocks).topk(k).values[-1])

    def same_everywhere(self, tensor: torch.Tensor | None, what: str) -> None:
        """Raise on every rank when ``tensor`` (a checksum is compared) differs between ranks."""
        check = torch.zeros(2, dtype=torch.float64, device=tensor.device if tensor is not None else "cpu")
        if tensor is not None:
            total = float(tensor.double().sum()) + tensor.numel()
            check[0], check[1] = total, -total
        self.dist.all_reduce(check, op=self.dist.ReduceOp.MAX, group=self.group)
        if float(check[0]) != -float(check[1]):
            raise ValueError(
                f"the ranks have different {what}: data-parallel training needs the same data on every rank (each "
                "reads its part of every minibatch); pass the whole array or store on every rank (a store collected "
                "with process_group= is the whole store on every rank), or pass distributed=False"
            )


class TrainingData:
    """The fixed monitoring sample and each epoch's shuffled minibatches of input rows ``X`` and target rows ``Y``.

    A store is sampled for monitoring (those rows are trained on too); an array of at least 20 rows holds out a
    tenth of its rows (at most ``monitor_rows``) for monitoring. ``Y`` (None: the target is the input) must be
    row-aligned with ``X`` and of the same kind: two arrays, or two stores with the same rows in the same chunks (the
    minibatches of both are drawn with the same seed).

    Example:
        >>> data = TrainingData(store.to_numpy(), None, TrainingConfig(batch_size=256, monitor_rows=50))
        >>> data.note, data.monitor[0].shape, [x.shape for x, _ in data.batches(epoch=0)]
        ('held-out rows', (50, 32), [(242, 32), (242, 32), (241, 32)])
    """

    def __init__(self, X, Y, config: TrainingConfig, ranks: Ranks | None = None):
        from interp_widgets.concepts.activations import ActivationStore
        from interp_widgets.concepts.decompositions import _as_matrix

        self.config, self.ranks = config, ranks
        if isinstance(X, ActivationStore):
            if Y is not None:
                self._check_aligned_stores(X, Y)
            self.monitor = self._both(lambda store: store.sample(config.monitor_rows, seed=config.seed), X, Y)
            self._stores = (X, Y)
            self.note = "random sample of the store (also trained on)"
            return
        X = _as_matrix(X)
        if Y is not None:
            if isinstance(Y, ActivationStore):
                raise TypeError("X is an array but the target Y is an ActivationStore; pass two arrays or two stores")
            Y = _as_matrix(Y, name="Y")
            if len(Y) != len(X):
                raise ValueError(
                    f"the target Y has {len(Y)} rows but X has {len(X)}; pass one target row per input row"
                )
        order = np.random.default_rng(config.seed).permutation(len(X))
        n_monitor = min(config.monitor_rows, len(X) // 10) if len(X) >= 20 else 0
        monitor, train = (order[:n_monitor], order[n_monitor:]) if n_monitor else (slice(None), slice(None))
        self.monitor = self._both(lambda rows: rows[monitor], X, Y)
        self._arrays = self._both(lambda rows: rows[train], X, Y)
        self._stores = None
        self.note = "held-out rows" if n_monitor else "training rows (too few to hold out)"

    @staticmethod
    def _both(read, X, Y) -> tuple[np.ndarray, np.ndarray | None]:
        return read(X), None if Y is None else read(Y)

    @staticmethod
    def _check_aligned_stores(X, Y) -> None:
        from interp_widgets.concepts.activations import ActivationStore

        if not isinstance(Y, ActivationStore):
            raise TypeError("X is an ActivationStore but the target Y is not; pass two arrays or two stores")
        if len(X) != len(Y) or X.in_memory != Y.in_memory or not np.array_equal(X._bounds, Y._bounds):
            raise ValueError(
                f"the target store ({len(Y)} rows) is not row-aligned with the input store ({len(X)} rows): collect "
                "both from the same texts in one pass, so that they have the same rows in the same chunks"
            )

    def batches(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        """The ``(inputs, targets)`` minibatches of one epoch (targets None without ``Y``), shuffled with the seed
        ``config.seed + epoch``. Across :class:`Ranks`, this rank's part of each of those minibatches."""
        seed, size, ranks = self.config.seed + epoch, self.config.batch_size, self.ranks
        if self._stores is not None:
            X, Y = self._stores
            if ranks is not None:  # read only this rank's rows of each batch
                for rows in X.minibatch_rows(size, seed=seed):
                    mine = rows[ranks.part(len(rows))]
                    yield X[mine], None if Y is None else Y[mine]
                return
            targets = Y.minibatches(size, seed=seed) if Y is not None else itertools.repeat(None)
            yield from zip(X.minibatches(size, seed=seed), targets)
            return
        X, Y = self._arrays
        for rows in np.array_split(np.random.default_rng(seed).permutation(len(X)), max(1, math.ceil(len(X) / size))):
            if ranks is not None:
                rows = rows[ranks.part(len(rows))]
            yield X[rows], None if Y is None else Y[rows]


@dataclasses.dataclass
class TrainingRun:
    """What :func:`train_dictionary` returns: the best weights, the monitoring sample and the record of the run."""

    weights: dict[str, torch.Tensor]  #: the weights with the lowest monitoring loss (detached, on the device)
    monitor: tuple[torch.Tensor, torch.Tensor | None]  #: the monitoring sample's raw inputs and targets
    note: str  #: where the monitoring sample came from
    history: list[dict[str, Any]]  #: one record per epoch
    best_monitor_loss: float
    stopped_early: bool
    restart_losses: list[float] | None = None  #: with ``restarts`` > 1: each restart's lowest monitoring loss

    def summary(self) -> dict[str, Any]:
        """The ``fit_info_`` entries of the run: ``history``, ``epochs``, ``best_monitor_loss``, ``stopped_early``,
        and ``restart_losses`` and ``restart`` (the index of the kept one) when there were restarts.

        Example:
            >>> from interp_widgets.concepts import SparseAutoencoder
            >>> sae = SparseAutoencoder(16, k=2, training=TrainingConfig(max_epochs=2, progress=False))
            >>> sae.k_, sae.preprocessing_ = 2, {"center": False, "normalize_activations": "none", "apply_b_dec_to_input": True}
            >>> run = train_dictionary(sae, store, config=sae.training, label="SAE topk 16")
            >>> sorted(run.summary()), run.summary()["epochs"]
            (['best_monitor_loss', 'epochs', 'history', 'stopped_early'], 2)
        """
        summary = {
            "history": self.history,
            "epochs": len(self.history),
            "best_monitor_loss": self.best_monitor_loss,
            "stopped_early": self.stopped_early,
        }
        if self.restart_losses is not None:
            summary["restart_losses"] = list(self.restart_losses)
            summary["restart"] = int(np.argmin(self.restart_losses))
        return summary


class DictionaryTrainer:
    """The steps of the one training loop, for a caller that supplies the minibatches itself.

    :func:`train_dictionary` drives one trainer over the epochs of a :class:`TrainingData`;
    :class:`~interp_widgets.concepts.TranscoderSet` drives one trainer per layer from a stream of forward passes, an
    "epoch" there being one window of the shuffle buffer. Both take the same steps: :meth:`step` (an Adam step on one
    minibatch), :meth:`end_epoch` (the monitoring loss and FVU, the best weights, early stopping and resampling) and
    :meth:`run` (the :class:`TrainingRun`). :meth:`state_dict` / :meth:`load_state_dict` hold everything a resumed
    run needs (weights, Adam's state, the best weights, the random generator, the counters), so that a run resumed
    from them takes exactly the steps of an uninterrupted one. With ``ranks=`` (:class:`Ranks`) every rank builds one
    from the same monitoring sample and steps on its part of each minibatch; the steps are collective.

    Example:
        >>> from interp_widgets.concepts import SparseAutoencoder
        >>> sae = SparseAutoencoder(16, k=2, progress=False)
        >>> sae.k_, sae.preprocessing_ = 2, {"center": False, "normalize_activations": "none", "apply_b_dec_to_input": True}
        >>> X = torch.as_tensor(store.to_numpy())
        >>> trainer = DictionaryTrainer(sae, sae.training_config, X[:100])
        >>> trainer.step(X[100:228]); record = trainer.end_epoch()
        >>> record["epoch"], trainer.stopped, trainer.run().summary()["epochs"]
        (0, False, 1)
    """

    def __init__(
        self, dictionary: Dictionary, config: TrainingConfig, monitor_x, monitor_y=None, *, ranks: Ranks | None = None
    ):
        self.dictionary, self.config, self.ranks = dictionary, config, ranks
        self.device = torch.device(config.device)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.monitor_x, self.monitor_y = (
            None if rows is None else self._tensor(rows) for rows in (monitor_x, monitor_y)
        )
        if ranks is not None:
            ranks.same_everywhere(self.monitor_x, "monitoring samples")
            ranks.same_everywhere(self.monitor_y, "monitoring targets")
        self.w = dictionary._init_weights(self.monitor_x, self.monitor_y, self.generator)
        self._broadcast_weights()
        for weight in self.w.values():
            weight.requires_grad_(True)
        self.optimizer = _adam(self.w.values(), config.lr)
        self.history: list[dict[str, Any]] = []
        self.best, self.reference, self.best_weights, self.stale = math.inf, math.inf, None, 0
        self._fired = torch.zeros(dictionary.n_concepts, dtype=torch.long, device=self.device)
        self._since_fired = torch.zeros(dictionary.n_concepts, dtype=torch.long, device=self.device)
        self._total, self._steps, self._rows = 0.0, 0, 0
        if config.auxk_alpha and not getattr(dictionary, "_takes_auxk", False):
            raise ValueError(
                f"auxk_alpha applies to TopK dictionaries (activation 'topk' or 'batchtopk'); "
                f"{type(dictionary).__name__} with activation {getattr(dictionary, 'activation', None)!r} does not "
                "take it: pass auxk_alpha=0 or resample_dead=True"
            )

    def _broadcast_weights(self) -> None:
        """Across ranks: every rank takes rank 0's weights (the same up to float rounding already)."""
        if self.ranks is not None:
            with torch.no_grad():
                for weight in self.w.values():
                    self.ranks.broadcast(weight.data)

    def _tensor(self, rows) -> torch.Tensor:
        if isinstance(rows, torch.Tensor):
            return rows.detach().to(self.device, torch.float32)
        return torch.as_tensor(np.asarray(rows, dtype=np.float32), device=self.device)

    @property
    def stopped(self) -> bool:
        """Whether training has ended: early stopping fired or ``max_epochs`` epochs have ended."""
        return self.stale >= self.config.patience or len(self.history) >= self.config.max_epochs

    def _loss(self, xn: torch.Tensor, y: torch.Tensor | None) -> tuple[Step, torch.Tensor]:
        if y is None:
            return self.dictionary._loss(xn, self.w), xn
        target = self.dictionary._normalise_target(y, self.w)
        return self.dictionary._loss(xn, self.w, target=target), target

    @property
    def dead(self) -> torch.Tensor:
        """The indices of the concepts that have not fired for ``dead_rows`` training rows (the auxiliary-k loss's
        concepts)."""
        return torch.nonzero(self._since_fired >= self.config.dead_rows).flatten()

    def step(self, x, y=None) -> None:
        """One Adam step on the raw input rows ``x`` and target rows ``y`` (None: the input).

        Across :class:`Ranks`, ``x`` and ``y`` are this rank's part of the minibatch; every rank must call it.
        """
        ranks, x = self.ranks, self._tensor(x)
        n_rows, share = x.shape[0], 1.0
        if ranks is not None:
            ranks.rows = int(ranks.sum(torch.tensor([n_rows], dtype=torch.long, device=self.device)))
            share = n_rows / max(ranks.rows, 1)
            self.dictionary._ranks = ranks  # BatchTopK selects over the whole batch (during this step only)
        try:
            xn = self.dictionary._normalise(x, self.w)
            step, _ = self._loss(xn, None if y is None else self._tensor(y))
        finally:
            if ranks is not None:
                del self.dictionary._ranks
        loss = step.loss
        if self.config.auxk_alpha:
            dead = self.dead
            if len(dead):
                loss = loss + self.config.auxk_alpha * self.dictionary._auxk_loss(xn, self.w, step.residual, dead)
        if n_rows == 0:  # a rank without rows in a short last batch adds nothing but takes part in the all-reduce
            loss = sum((weight * 0).sum() for weight in self.w.values())
        self.optimizer.zero_grad(set_to_none=True)
        (loss * share if share != 1.0 else loss).backward()
        active, batch_loss = step.active, float(step.loss.detach()) if n_rows else 0.0
        if ranks is not None:
            self._sum_gradients()
            loss_share = torch.tensor([batch_loss * share], dtype=torch.float64, device=active.device)
            packed = ranks.sum(torch.cat([active.to(torch.float64), loss_share]))
            active, batch_loss, n_rows = packed[:-1].round().long(), float(packed[-1]), ranks.rows
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)  # freed now: many trainers stepping in turn hold no stale grads
        with torch.no_grad():
            self.dictionary._after_step(self.w)
            self._fired += active
            self._since_fired += n_rows
            self._since_fired[active > 0] = 0
        self._rows += n_rows
        self._total, self._steps = self._total + batch_loss, self._steps + 1

    def _sum_gradients(self) -> None:
        """Sum the ranks' gradients (of losses weighted by their share of the batch) in one all-reduce."""
        weights = list(self.w.values())
        grads = [torch.zeros_like(w) if w.grad is None else w.grad for w in weights]
        flat = self.ranks.sum(torch.cat([g.reshape(-1) for g in grads]))
        start = 0
        for weight, grad in zip(weights, grads):
            # in the weight's own memory layout (a transposed encoder stays transposed): fused Adam pairs a weight's
            # and its gradient's elements by storage, not by index
            weight.grad = torch.empty_like(weight).copy_(flat[start : start + grad.numel()].view(grad.shape))
            start += grad.numel()

    def end_epoch(self, sample=None) -> dict[str, Any]:
        """Close an epoch: measure the monitoring sample, keep the best weights, count stale epochs, resample the
        concepts that did not fire; returns the epoch's record (also appended to ``history``).

        ``sample``: the raw ``(inputs, targets)`` rows (targets None for a dictionary of its input) whose badly
        reconstructed rows resampled concepts start from; None: the monitoring sample. A streamed fit passes the
        window it has just trained on: more rows than the monitoring sample, and new ones every window."""
        config, dictionary = self.config, self.dictionary
        with torch.no_grad():
            monitor_n = dictionary._normalise(self.monitor_x, self.w)
            monitored, target = self._loss(monitor_n, self.monitor_y)
            residual = monitored.residual
            fvu = float(residual.pow(2).sum() / (target - target.mean(0)).pow(2).sum().clamp_min(1e-12))
        monitor_loss = float(monitored.loss)
        if self.ranks is not None:  # rank 0's numbers decide, so early stopping stops every rank together
            numbers = self.ranks.broadcast(torch.tensor([monitor_loss, fvu], dtype=torch.float64, device=self.device))
            monitor_loss, fvu = float(numbers[0]), float(numbers[1])
        dead = torch.nonzero(self._fired == 0).flatten()
        epoch = len(self.history)
        record = {
            "epoch": epoch,
            "train_loss": self._total / max(self._steps, 1),
            "monitor_loss": monitor_loss,
            "monitor_fvu": fvu,
            "dead": int(len(dead)),
            "resampled": 0,
        }
        if config.auxk_alpha:  # the concepts the auxiliary-k loss trains now
            record["auxk_dead"] = int(len(self.dead))
        if monitor_loss < self.best:
            self.best = monitor_loss
            best = self.best_weights
            if best is None or best.keys() != self.w.keys() or any(best[n].shape != t.shape for n, t in self.w.items()):
                self.best_weights = {name: t.detach().clone() for name, t in self.w.items()}
            else:  # in place: no new allocation per epoch (30 SmolLM2 transcoders hold 0.6 GB of them)
                for name, t in self.w.items():
                    self.best_weights[name].copy_(t.detach())
        if monitor_loss < self.reference * (1 - config.min_delta):
            self.reference, self.stale = monitor_loss, 0
        else:
            self.stale += 1
        stale = (self._since_fired >= config.resample_rows) if config.resample_rows else (self._fired == 0)
        resample = torch.nonzero(stale).flatten()
        if (
            config.resample_dead
            and len(resample)
            and epoch < config.max_epochs - 1
            and self.stale < config.patience
            and (not config.resample_stop_rows or self._rows < config.resample_stop_rows)
        ):
            if sample is not None:
                with torch.no_grad():
                    sample_x, sample_y = sample
                    monitor_n = dictionary._normalise(self._tensor(sample_x), self.w)
                    step, _ = self._loss(monitor_n, None if sample_y is None else self._tensor(sample_y))
                    residual = step.residual
            record["resampled"] = dictionary._resample(self.w, resample, monitor_n, residual, self.generator)
            self._broadcast_weights()
            self._restart_moments(resample)
            self._since_fired[resample] = 0
        self.history.append(record)
        self._fired.zero_()
        self._total, self._steps = 0.0, 0
        return record

    def _restart_moments(self, concepts: torch.Tensor) -> None:
        """Zero the Adam moments of the resampled ``concepts`` (every weight's entries along its concept axis,
        ``Dictionary._concept_axes``); a dictionary that does not name its axes restarts Adam as a whole."""
        axes = getattr(self.dictionary, "_concept_axes", None)
        if axes is None:
            self.optimizer = _adam(self.w.values(), self.config.lr)
            return
        with torch.no_grad():
            for name, weight in self.w.items():
                state = self.optimizer.state.get(weight)
                if name not in axes or not state:
                    continue
                for moment in ("exp_avg", "exp_avg_sq"):
                    state[moment].index_fill_(axes[name], concepts.to(state[moment].device), 0.0)

    def run(self) -> TrainingRun:
        """The :class:`TrainingRun` so far: the best weights (the current ones before any epoch has ended)."""
        return TrainingRun(
            weights={name: t.detach().clone() for name, t in (self.best_weights or self.w).items()},
            monitor=(self.monitor_x, self.monitor_y),
            note="",
            history=list(self.history),
            best_monitor_loss=self.best,
            stopped_early=self.stale >= self.config.patience,
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs, as tensors and plain values (see :meth:`load_state_dict`)."""
        return {
            "w": {name: t.detach().clone() for name, t in self.w.items()},
            "optimizer": self.optimizer.state_dict(),
            "best_weights": self.best_weights,
            "generator": self.generator.get_state(),
            "history": list(self.history),
            "counters": [self.best, self.reference, self.stale, self._total, self._steps],
            "fired": self._fired.clone(),
            "since_fired": self._since_fired.clone(),
            "rows": self._rows,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (the dictionary's monitoring sample is not part of it)."""
        with torch.no_grad():
            for name, t in state["w"].items():
                self.w[name].copy_(t)
        self.optimizer = _adam(self.w.values(), self.config.lr)
        self.optimizer.load_state_dict(state["optimizer"])
        self.best_weights = state["best_weights"]
        self.generator.set_state(state["generator"])
        self.history = list(state["history"])
        self.best, self.reference, self.stale, self._total, self._steps = state["counters"]
        self._fired = state["fired"].clone().to(self.device)
        if "since_fired" in state:  # absent from checkpoints written before the auxiliary-k loss
            self._since_fired = state["since_fired"].clone().to(self.device)
        self._rows = int(state.get("rows", 0))  # absent from checkpoints written before resample_rows


def train_dictionary(
    dictionary: Dictionary, X, Y=None, *, config: TrainingConfig, label: str, process_group=None
) -> TrainingRun:
    """Train ``dictionary`` on input rows ``X`` (array, tensor or ActivationStore) and target rows ``Y`` (None: the
    input itself) with the settings of ``config``; ``label`` titles the progress bar.

    Data-parallel across the ranks of ``process_group`` (or of the default ``torch.distributed`` group, as
    ``config.distributed`` says): every rank passes the same ``X`` and ``Y``, reads its part of each minibatch and
    gets the same weights back (:class:`Ranks` gives the rule). Under ``torchrun --nproc-per-node 2 script.py``,
    a script that calls ``init_process_group`` and then ``SparseAutoencoder(...).fit(store)`` trains that way.

    Each epoch: Adam steps over shuffled minibatches, the loss and the fraction of variance of the target left
    unexplained (FVU) on the monitoring sample, then early stopping and the resampling of concepts that did not fire
    (the steps of :class:`DictionaryTrainer`).

    Example:
        >>> from interp_widgets.concepts import JumpReLUSAE
        >>> sae = JumpReLUSAE(16, max_epochs=3, progress=False)
        >>> sae.preprocessing_ = {"center": False, "normalize_activations": "none", "apply_b_dec_to_input": True}
        >>> run = train_dictionary(sae, store.to_numpy(), config=sae.training, label="SAE jumprelu 16")
        >>> run.note, sorted(run.weights), [record["epoch"] for record in run.history]
        ('held-out rows', ['W_dec', 'W_enc', 'b_dec', 'b_enc', 'threshold'], [0, 1, 2])
    """
    from tqdm.auto import tqdm

    ranks = Ranks.resolve(config, process_group)
    data = TrainingData(X, Y, config, ranks)
    show = config.progress and (ranks is None or ranks.rank == 0)
    best, losses = None, []
    for restart in range(config.restarts):
        restart_config = dataclasses.replace(config, seed=restart_seed(config.seed, restart))
        trainer = DictionaryTrainer(dictionary, restart_config, *data.monitor, ranks=ranks)
        desc = label if config.restarts == 1 else f"{label} (restart {restart + 1}/{config.restarts})"
        bar = tqdm(total=config.max_epochs, desc=desc, unit="epoch", disable=not show)
        for epoch in range(config.max_epochs):
            for x, y in data.batches(epoch):
                trainer.step(x, y)
            record = trainer.end_epoch()
            bar.update(1)
            bar.set_postfix(loss=f"{record['monitor_loss']:.4g}", dead=record["dead"])
            if trainer.stale >= config.patience:
                # finished, not failed: a bar closed short of its total turns red in notebooks
                bar.total = len(trainer.history)
                bar.set_postfix_str(
                    f"loss={record['monitor_loss']:.4g}, stopped early: no {config.min_delta:.0e} "
                    f"relative improvement in {config.patience} epochs"
                )
                bar.refresh()
                break
        bar.close()
        run = trainer.run()
        losses.append(float(run.best_monitor_loss))
        if best is None or run.best_monitor_loss < best.best_monitor_loss:  # the first of equal losses stays
            best = run
    best.note = data.note
    best.stopped_early = len(best.history) < config.max_epochs
    best.restart_losses = losses if config.restarts > 1 else None
    return best


def restart_seed(seed: int, restart: int) -> int:
    """The initialisation seed of restart ``restart`` of a fit seeded ``seed`` (``TrainingConfig.restarts``):
    ``seed`` itself for restart 0, so that one restart is the plain fit; otherwise a 63-bit seed derived from both,
    so that the restarts of nearby seeds do not share initialisations.

    Example:
        >>> restart_seed(3, 0), restart_seed(0, 3) != restart_seed(3, 0), restart_seed(1, 1) == restart_seed(1, 1)
        (3, True, True)
    """
    if restart == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed), int(restart)]).generate_state(2, np.uint64)[0] >> np.uint64(1))
