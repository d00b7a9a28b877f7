"""A set of per-layer transcoders trained on your own model: one forward pass, a report, files in and out.

:meth:`TranscoderSet.fit` trains one :class:`~interp_widgets.concepts.Transcoder` per layer from **one** forward pass
over a corpus. Hooks capture each layer's (input, output) pairs (the input point ``mlp_in`` or ``resid_mid``, the
output ``mlp_out``; see :mod:`interp_widgets.concepts.transcoders`), which fill a bounded shuffle buffer of about
``buffer_tokens`` token rows per layer (it may exceed that by one run of texts of at most ``min(buffer_tokens,
max_batch_tokens)`` tokens, or by one longer text).
Each full buffer is one *window*: its rows are shuffled and every layer's transcoder takes its minibatch steps from
them (the same steps as :func:`~interp_widgets.concepts.training.train_dictionary`, through a
:class:`~interp_widgets.concepts.training.DictionaryTrainer` per layer); then the buffer is emptied and refilled. A
window is one epoch of the loop: the monitoring loss, the best weights, early stopping (``patience``, ``max_epochs``
windows at most) and the resampling of dead features (from the window's worst reconstructed rows; ``resample_rows`` of
:class:`~interp_widgets.concepts.training.TrainingConfig` counts silence across windows) happen after each. The monitoring sample is held out from the
first window (``monitor_rows`` rows, at most a tenth of it).

With ``checkpoint_dir=``, the state after every window (each trainer's weights, Adam state, best weights and random
generator, the position in the corpus) is written atomically to ``checkpoint_dir/checkpoint.safetensors``; calling
``fit`` again with the same arguments resumes from it. **Guarantee**: a run interrupted at any point and resumed
gives bit-identical transcoders to an uninterrupted run (the first window is recomputed on resume to rebuild the
monitoring sample, so a resumed run runs the texts of that window twice and the steps since the last checkpoint
again). Arguments that differ from the checkpoint's are refused.

Sets trained elsewhere load too: :meth:`TranscoderSet.from_sparsify` reads an EleutherAI sparsify run's folders
(``clt``-branch input/output normalisation folded in), and
:meth:`Transcoder.from_weights <interp_widgets.concepts.Transcoder.from_weights>` builds one layer's transcoder from
raw weights in circuit-tracer's layout, to be wrapped as ``TranscoderSet({layer: transcoder, ...})``.

Example:
    >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(32, k=4, max_epochs=5, progress=False),
    ...                         buffer_tokens=200)
    >>> tcs
    TranscoderSet(2 layers, 32 features each, topk, reads mlp_in, model unknown)
    >>> report = tcs.evaluate(lm, lm_tokenizer, texts[:10])
    >>> list(report.to_dataframe().columns[:4])
    ['layer', 'fvu', 'skip_fvu', 'fvu_ratio']
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch

from interp_widgets._inputs import check_texts
from interp_widgets.adapter import ModelAdapter
from interp_widgets.concepts._io import load_bundle, save_bundle
from interp_widgets._model_names import display_name, model_name_of, same_model_name
from interp_widgets.concepts.activations import _capture_pass, _kept_tokens, _padded_batches, _StopForward
from interp_widgets.concepts.training import DictionaryTrainer
from interp_widgets.concepts.transcoders import CIRCUIT_TRACER_HOOKS, INPUT_POINTS, Transcoder
from interp_widgets.interventions import intervene
from interp_widgets.layers import (
    BlockReplay,
    LayerPoint,
    UnsupportedModelError,
    blocks,
    evaluation,
    hidden_of,
    hooks,
    parallel_residual,
    resolve_layer,
)
from interp_widgets.tasks import task_for
from interp_widgets.validation import check_choice, check_int, check_number

_SET_KIND = "interp_widgets.TranscoderSet"
_CHECKPOINT_KIND = "interp_widgets.TranscoderSetCheckpoint"


# ---------------------------------------------------------------------------------------------- points and pairs
def transcoder_points(model, layer: int, input_point: str = "mlp_in") -> tuple[LayerPoint, LayerPoint]:
    """The (input, output) points of block ``layer``'s transcoder: ``layer:i.<input_point>`` and ``layer:i.mlp_out``.

    ``resid_mid`` does not exist on parallel-residual blocks: the error names ``mlp_in``.

    Example:
        >>> [point.name for point in transcoder_points(lm, 1)]
        ['layer:1.mlp_in', 'layer:1.mlp_out']
    """
    check_choice("input_point", input_point, INPUT_POINTS)
    if input_point == "resid_mid" and parallel_residual(model):
        raise UnsupportedModelError(
            f"{type(model).__name__} adds its attention and MLP outputs in parallel, so its blocks have no resid_mid "
            "for a transcoder to read; use input_point='mlp_in' (the MLP's input after its norm, circuit-tracer's "
            "mlp.hook_in)"
        )
    return resolve_layer(model, f"layer:{layer}.{input_point}"), resolve_layer(model, f"layer:{layer}.mlp_out")


def _layers_of(model, layers) -> list[int]:
    n = len(blocks(model)[1])
    if isinstance(layers, str):
        if layers != "all":
            raise ValueError(f"layers must be 'all', a block index or a list of them, got {layers!r}")
        return list(range(n))
    chosen = [layers] if isinstance(layers, (int, np.integer)) else list(layers)
    out = []
    for layer in chosen:
        check_int("layer", layer)
        if not -n <= int(layer) < n:
            raise ValueError(f"layer {layer} is out of range; this model has {n} blocks (0..{n - 1})")
        out.append(int(layer) % n)
    if not out or len(set(out)) != len(out):
        raise ValueError(f"layers must name distinct blocks, got {layers!r}")
    return sorted(out)


def _stream(
    model,
    tokenizer,
    texts: Sequence,
    layers: list[int],
    input_point: str,
    *,
    start: int = 0,
    stop: int | None = None,
    include_special: bool = False,
    max_batch_tokens: int = 8192,
    run_tokens: int | None = None,
) -> Iterator[tuple[int, np.ndarray, dict[int, tuple[np.ndarray, np.ndarray]]]]:
    """One forward pass per batch over ``texts[start:stop]``, in runs of consecutive texts of at most ``run_tokens``
    tokens (default ``max_batch_tokens``; a longer text is a run alone); yields ``(index after the run, text id of each row, {layer: (inputs, outputs)})``,
    rows in text order (padding and, without ``include_special``, special tokens dropped). The layers after the last
    one are not run; hooks are removed and modes restored when the generator is closed."""
    adapter = ModelAdapter(model, tokenizer, max_batch_tokens=max_batch_tokens)
    points = {layer: transcoder_points(model, layer, input_point) for layer in layers}
    last = layers[-1]
    run, skip_rows = task_for(adapter).activation_pass(points[last][1].module)
    captured: dict[tuple[int, int], torch.Tensor] = {}

    def recorder(key, stops):
        def hook(module, inputs, value):
            captured[key] = hidden_of(value).detach().float().cpu()
            if stops:
                raise _StopForward

        return hook

    fns = {}
    for layer, (inp, out) in points.items():
        fns[inp.name] = recorder((layer, 0), False)
        fns[out.name] = recorder((layer, 1), layer == last)
    stop = len(texts) if stop is None else stop
    run_tokens = max_batch_tokens if run_tokens is None else run_tokens
    with evaluation(model), hooks(model, fns):
        j, pending = start, None
        while j < stop:
            encodings, tokens = [], 0
            while j < stop:
                if pending is None:
                    try:
                        pending = adapter.encode(texts[j])
                    except (TypeError, ValueError) as err:
                        raise type(err)(f"text {j}: {err}") from None
                if encodings and tokens + len(pending) > run_tokens:
                    break
                encodings.append(pending)
                tokens, pending, j = tokens + len(pending), None, j + 1
            per_text: dict[int, list] = {}
            for batch, ids, mask in _padded_batches(adapter, encodings):
                with torch.inference_mode():  # only around the pass: the caller trains between yields
                    _capture_pass(run, ids, mask, adapter.device, captured)
                for row, i in enumerate(batch):
                    enc = encodings[i]
                    keep = np.flatnonzero(_kept_tokens(enc, include_special))
                    per_text[i] = [
                        {
                            layer: tuple(
                                captured[(layer, side)][row, skip_rows : skip_rows + len(enc)][keep].numpy()
                                for side in (0, 1)
                            )
                            for layer in layers
                        },
                        len(keep),
                    ]
            first = j - len(encodings)
            order = range(len(encodings))
            text_ids = np.concatenate([np.full(per_text[i][1], first + i) for i in order])
            pairs = {
                layer: tuple(np.concatenate([per_text[i][0][layer][side] for i in order]) for side in (0, 1))
                for layer in layers
            }
            yield j, text_ids, pairs


def collect_transcoder_pairs(
    model,
    tokenizer,
    texts,
    layers="all",
    *,
    input_point: str = "mlp_in",
    include_special: bool = False,
    max_batch_tokens: int = 8192,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Every layer's (input, output) rows over ``texts`` from one forward pass per batch: ``{layer: (X, Y)}``.

    Rows are tokens in text order (special tokens dropped unless ``include_special``), as
    :func:`~interp_widgets.concepts.collect_activations` of ``layer:i.<input_point>`` and ``layer:i.mlp_out`` gives
    them one layer at a time.

    Example:
        >>> pairs = collect_transcoder_pairs(lm, lm_tokenizer, texts[:3])
        >>> {layer: (X.shape, Y.shape) for layer, (X, Y) in pairs.items()}
        {0: ((76, 32), (76, 32)), 1: ((76, 32), (76, 32))}
    """
    texts = _texts(texts)
    chosen = _layers_of(model, layers)
    parts = {layer: ([], []) for layer in chosen}
    gen = _stream(model, tokenizer, texts, chosen, input_point, include_special=include_special,
                  max_batch_tokens=max_batch_tokens)  # fmt: skip
    try:
        for _, _, pairs in gen:
            for layer, (X, Y) in pairs.items():
                parts[layer][0].append(X)
                parts[layer][1].append(Y)
    finally:
        gen.close()
    return {layer: (np.concatenate(xs), np.concatenate(ys)) for layer, (xs, ys) in parts.items()}


def _texts(texts) -> list:
    if not isinstance(texts, str) and hasattr(texts, "__iter__") and not isinstance(texts, (bytes, dict)):
        texts = list(texts)
    check_texts(texts, name="texts", call='TranscoderSet.fit(model, tokenizer, ["a text", ...])')
    texts = [texts] if isinstance(texts, str) else texts
    if not texts:
        raise ValueError("no texts given; pass a non-empty list of strings")
    return texts


# ---------------------------------------------------------------------------------------------- checkpoints
def _flatten(value, key: str, tensors: dict[str, torch.Tensor]):
    """JSON of ``value`` with every tensor moved into ``tensors`` under a path key (dict keys keep their type)."""
    if isinstance(value, torch.Tensor):
        tensors[key] = value.detach().cpu().contiguous()
        return {"__tensor__": key}
    if isinstance(value, dict):
        return {"__dict__": [[k, _flatten(v, f"{key}.{k}", tensors)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [_flatten(v, f"{key}.{i}", tensors) for i, v in enumerate(value)]
    return value


def _unflatten(value, tensors: dict[str, torch.Tensor]):
    if isinstance(value, dict) and "__tensor__" in value:
        return tensors[value["__tensor__"]]
    if isinstance(value, dict) and "__dict__" in value:
        return {k: _unflatten(v, tensors) for k, v in value["__dict__"]}
    if isinstance(value, list):
        return [_unflatten(v, tensors) for v in value]
    return value


def _save_state(path: Path, state: dict, **extra) -> None:
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    meta = json.dumps({"format": _CHECKPOINT_KIND, **extra, "state": _flatten(state, "s", tensors)})
    save_file(tensors, str(path), metadata={"interp_widgets": meta})


def _load_state(path: Path) -> tuple[dict, dict]:
    """(the file's metadata, its state) of a checkpoint file; a ValueError naming the fix if it cannot be read."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    try:
        with safe_open(str(path), framework="pt") as handle:
            meta = json.loads((handle.metadata() or {})["interp_widgets"])
        tensors = load_file(str(path))
    except Exception as err:  # noqa: BLE001 - any unreadable file is reported the same way
        raise ValueError(
            f"the checkpoint {path} cannot be read ({err}); delete its folder to start again from the beginning"
        ) from None
    if meta.get("format") != _CHECKPOINT_KIND:
        raise ValueError(f"{path} is not a TranscoderSet checkpoint; pass another checkpoint_dir")
    return meta, _unflatten(meta["state"], tensors)


def _write_checkpoint(directory: Path, state: dict, trainers: dict) -> None:
    """Write ``state`` and each trainer's state (``{name: trainer}``, one file each, written one at a time so that
    only one trainer's copy is in memory). ``checkpoint.safetensors`` is replaced last and names the trainer files of
    its generation: an interruption leaves the previous checkpoint whole."""
    directory.mkdir(parents=True, exist_ok=True)
    main = directory / "checkpoint.safetensors"
    generation = 0
    if main.exists():
        try:
            generation = int(_load_state(main)[0].get("generation", -1)) + 1
        except ValueError:
            pass
    files = {}
    for name, trainer in trainers.items():
        files[name] = f"trainer-{name}.{generation}.safetensors"
        _save_state(directory / files[name], trainer.state_dict())
    tmp = directory / "checkpoint.safetensors.tmp"
    _save_state(tmp, state, generation=generation, trainer_files=files)
    os.replace(tmp, main)  # atomic: the commit point of this generation
    for old in directory.glob("trainer-*.safetensors"):
        if old.name not in files.values():
            old.unlink()


def _read_checkpoint(directory: Path) -> tuple[dict, Callable[[str], dict]] | None:
    """The saved state and a function that reads one trainer's state by name (read one at a time); None if there is
    no checkpoint."""
    path = directory / "checkpoint.safetensors"
    if not path.exists():
        return None
    meta, state = _load_state(path)
    files = meta.get("trainer_files", {})

    def trainer_state(name: str) -> dict:
        if name not in files:
            raise ValueError(f"the checkpoint {path} has no state for layer {name}; delete its folder to start again")
        return _load_state(directory / files[name])[1]

    return state, trainer_state


def _fingerprint(
    model, texts, layers, input_point, templates, buffer_tokens, include_special, max_batch_tokens, window_passes
):
    digest = hashlib.sha256()
    for text in texts:
        digest.update(json.dumps(text, sort_keys=True).encode())
        digest.update(b"\0")

    def settings(template: Transcoder) -> dict:
        params = {
            k: (dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v) for k, v in template.get_params().items()
        }
        # progress and distributed do not change what a run computes; restarts is always 1 here (refused otherwise)
        # and is left out so that checkpoints written before it existed still resume
        for name in ("progress", "distributed", "restarts"):
            params.pop(name, None)
            if isinstance(params.get("training"), dict):
                params["training"].pop(name, None)
        return params

    per_layer = {str(layer): settings(template) for layer, template in templates.items()}
    first = next(iter(per_layer.values()))
    # one template for every layer is recorded as before, so that older checkpoints still resume
    params = first if all(p == first for p in per_layer.values()) else per_layer
    return {
        "model": type(model).__name__,
        "model_name": display_name(model_name_of(model)),
        "texts": digest.hexdigest(),
        "n_texts": len(texts),
        "layers": layers,
        "input_point": input_point,
        "transcoder": params,
        "buffer_tokens": buffer_tokens,
        "include_special": include_special,
        "max_batch_tokens": max_batch_tokens,
        **({"window_passes": window_passes} if window_passes != 1 else {}),  # older checkpoints have none: 1
    }


def check_model_identity(
    model, model_name: str | None, n_layers: int, *, subject: str, them: str, fix: str = "", named: str = "made for"
) -> int:
    """Raise a ValueError naming the fix if ``model`` is not the model named ``model_name`` (when both names are
    known) or has not ``n_layers`` blocks; return its width. ``subject`` starts each message ("these transcoders
    were"), ``named`` says how the name was given ("trained on"), ``them`` refers back to it and ``fix`` adds a remedy. Shared by every transcoder set's ``check_model``.

    Example:
        >>> check_model_identity(lm, None, 3, subject="this set was", them="it")
        Traceback (most recent call last):
        ...
        ValueError: this set was made for a model of 3 blocks; this one has 2: use it with the model it was made for
    """
    extra = f", {fix}" if fix else ""
    expected, actual = model_name, display_name(model_name_of(model))
    if expected and actual and not same_model_name(expected, actual):
        raise ValueError(
            f"{subject} {named} {expected!r}, not {actual!r}; use {them} with {expected}{extra}, or set "
            "model_name = None if it is the same model renamed"
        )
    blocks_here = len(blocks(model)[1])
    if blocks_here != n_layers:
        raise ValueError(
            f"{subject} made for a model of {n_layers} blocks; this one has {blocks_here}: use {them} with the model "
            f"{'they were' if them == 'them' else 'it was'} made for{extra}"
        )
    return _width(model)


# ---------------------------------------------------------------------------------------------- the set
class TranscoderSet:
    """One fitted :class:`~interp_widgets.concepts.Transcoder` per layer of one model, reading one input point.

    Build one with :meth:`fit` or :meth:`load`; ``TranscoderSet({layer: transcoder}, input_point=, model_name=,
    n_layers=, d_model=)`` wraps transcoders fitted elsewhere.

    Example:
        >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=2, progress=False))
        >>> tcs.layers, tcs[1].n_concepts, tcs.fit_info["windows"]
        ([0, 1], 16, 1)
    """

    def __init__(
        self,
        transcoders: dict[int, Transcoder],
        *,
        input_point: str = "mlp_in",
        model_name: str | None = None,
        n_layers: int | None = None,
        d_model: int | None = None,
        fit_info: dict | None = None,
    ):
        check_choice("input_point", input_point, INPUT_POINTS)
        if not transcoders:
            raise ValueError("a TranscoderSet needs at least one transcoder")
        for layer, tc in transcoders.items():
            if not isinstance(tc, Transcoder) or not tc.is_fitted:
                raise TypeError(f"layer {layer}: expected a fitted Transcoder, got {tc!r}")
        self.transcoders = {int(layer): tc for layer, tc in sorted(transcoders.items())}
        self.input_point = input_point
        self.model_name = model_name
        first = next(iter(self.transcoders.values()))
        self.d_model = int(d_model if d_model is not None else first.n_features_in_)
        self.n_layers = int(n_layers if n_layers is not None else max(self.transcoders) + 1)
        self.fit_info = dict(fit_info or {})
        #: seconds :meth:`fit` spent streaming and training, summed over the runs that resumed it (None: not fitted
        #: here, or read from a file)
        self.fit_seconds: float | None = None

    @property
    def layers(self) -> list[int]:
        """The block indices that have a transcoder."""
        return list(self.transcoders)

    def __getitem__(self, layer: int) -> Transcoder:
        if layer not in self.transcoders:
            raise KeyError(f"no transcoder for layer {layer}; this set has layers {self.layers}")
        return self.transcoders[layer]

    def __len__(self) -> int:
        return len(self.transcoders)

    def __repr__(self) -> str:
        widths = sorted({tc.n_concepts for tc in self.transcoders.values()})
        kinds = sorted({tc.activation for tc in self.transcoders.values()})
        each = f"{widths[0]} features each" if len(widths) == 1 else f"{widths} features"
        return (
            f"TranscoderSet({len(self)} layers, {each}, {'/'.join(kinds)}, reads {self.input_point}, "
            f"model {self.model_name or 'unknown'})"
        )

    # ------------------------------------------------------------------ training
    @classmethod
    def fit(
        cls,
        model,
        tokenizer,
        texts,
        layers="all",
        *,
        transcoder: Transcoder | None = None,
        input_point: str = "mlp_in",
        buffer_tokens: int = 10_000,
        window_passes: int = 1,
        checkpoint_dir: str | Path | None = None,
        checkpoint_every: float = 0.0,
        include_special: bool = False,
        max_batch_tokens: int = 8192,
        callback: Callable[[int], None] | None = None,
        process_group=None,
    ) -> TranscoderSet:
        """Train a transcoder for every layer in ``layers`` from one forward pass over ``texts``.

        Args:
            model, tokenizer: a Hugging Face decoder and its tokenizer; the model is left untouched (modes restored,
                hooks removed, also on errors).
            texts: the training corpus (strings or chat conversations).
            layers: ``"all"``, a block index or a list of them.
            transcoder: the settings of every layer's transcoder, an unfitted :class:`~interp_widgets.concepts.
                Transcoder` (cloned per layer): width, activation, ``k``, skip term and its ``training`` (learning
                rate, batch size, ``max_epochs`` windows, patience, ``monitor_rows``, seed, progress bar, device).
                Or a mapping from layer to one, for settings that differ by layer (a skip term on some layers
                only); their ``training`` must be equal. Default: ``Transcoder(8 * d_model, activation="topk", k=32)``.
            input_point: ``"mlp_in"`` (the MLP's input after its norm) or ``"resid_mid"``.
            buffer_tokens: token rows per layer in the shuffle buffer (the buffer holds ``2 × buffer_tokens ×
                len(layers) × d_model`` floats; 10k tokens × 30 layers × 576 × 2 × 4 bytes ≈ 1.4 GB).
            window_passes: how many times each window's rows are trained on, reshuffled each time: more steps for
                each forward pass over the corpus, which on a CPU costs more than the steps (SmolLM2: one pass of
                30 layers' steps takes about half the forward pass's time).
            checkpoint_dir: a directory for the checkpoint; ``fit`` resumes from it. It is written at the end of a
                window: the first, then the first once ``checkpoint_every`` seconds have passed since the last one
                (0: every window), and the last.
            checkpoint_every: seconds between checkpoints (a 30-layer SmolLM2 checkpoint of 4,096-feature
                transcoders holds 1.8 GB of weights and Adam state and takes about 15 s to write).
            include_special: train on special tokens (BOS…) too.
            max_batch_tokens: padded tokens per forward pass at most.
            callback: called with the number of steps taken so far after every step (every layer's step on one
                minibatch); an exception it raises stops the run (the checkpoint keeps the last window).
            process_group: a ``torch.distributed`` group to train layer-parallel (sparsify's
                ``--distribute_modules``): every rank streams the same texts but captures and trains only its layers,
                rank ``r`` of ``W`` the ``r``-th of ``W`` contiguous groups of ``layers`` (there must be at least
                ``W`` layers), and every rank returns the whole set, gathered. Each layer's transcoder equals the
                single-process one up to float rounding (the same windows, monitoring rows and minibatches). The checkpoint of rank
                ``r`` is ``checkpoint_dir/rank-<r>-of-<W>``; ``fit_info`` counts the windows, steps and rows of the
                rank that ran longest, a transcoder's ``fit_info_["rows"]`` those of its own rank.

        Example:
            >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, layers=[1],
            ...                         transcoder=Transcoder(16, activation="jumprelu", max_epochs=2, progress=False))
            >>> tcs.layers, tcs[1].layer_, tcs[1].activation
            ([1], 'layer:1.mlp_in', 'jumprelu')
        """
        from sklearn.base import clone
        from tqdm.auto import tqdm

        texts = _texts(texts)
        chosen = everything = _layers_of(model, layers)
        rank, world = 0, 1
        if process_group is not None:
            import torch.distributed as dist

            rank, world = dist.get_rank(process_group), dist.get_world_size(process_group)
            if world > len(chosen):
                raise ValueError(
                    f"layer-parallel training needs at least one layer per rank: {len(chosen)} layers for {world} "
                    "ranks; train fewer ranks or more layers"
                )
            chosen = [list(group) for group in np.array_split(chosen, world)][rank]
            chosen = [int(layer) for layer in chosen]
        points = {layer: transcoder_points(model, layer, input_point) for layer in chosen}
        check_int("buffer_tokens", buffer_tokens, minimum=1)
        check_int("window_passes", window_passes, minimum=1)
        check_number("checkpoint_every", checkpoint_every, minimum=0)
        width = _width(model)
        templates = _templates(transcoder, chosen, width)
        config = next(iter(templates.values())).training_config
        fingerprint = _fingerprint(
            model,
            texts,
            chosen,
            input_point,
            templates,
            buffer_tokens,
            include_special,
            max_batch_tokens,
            window_passes,
        )
        directory = None if checkpoint_dir is None else Path(checkpoint_dir)
        if directory is not None and world > 1:
            directory = directory / f"rank-{rank:05d}-of-{world}"
        checkpointed = None if directory is None else _read_checkpoint(directory)
        saved, trainer_state = checkpointed if checkpointed is not None else (None, None)
        if saved is not None and saved["fingerprint"] != fingerprint:
            changed = sorted(k for k in fingerprint if saved["fingerprint"].get(k) != fingerprint[k])
            raise ValueError(
                f"the checkpoint in {directory} belongs to another run (different {', '.join(changed)}); pass the "
                "same arguments to resume it, or another checkpoint_dir (or delete it) to start again"
            )

        def windows(start: int, stop: int | None = None) -> Iterator[tuple[int, dict]]:
            gen = _stream(model, tokenizer, texts, chosen, input_point, start=start, stop=stop,
                          include_special=include_special, max_batch_tokens=max_batch_tokens,
                          run_tokens=min(max_batch_tokens, buffer_tokens))  # fmt: skip
            try:
                parts, rows = [], 0
                for end, _, pairs in gen:
                    parts.append(pairs)
                    rows += len(next(iter(pairs.values()))[0])
                    if rows >= buffer_tokens:
                        window, parts, rows = _join(parts, chosen), [], 0  # the parts go before the window trains
                        yield end, window
                        del window
                if parts:
                    window, parts = _join(parts, chosen), []
                    yield len(texts) if stop is None else stop, window
            finally:
                gen.close()

        def make_trainers(first: dict) -> tuple[dict, np.ndarray, int]:
            n = len(next(iter(first.values()))[0])
            order = np.random.default_rng(config.seed).permutation(n)
            n_monitor = min(config.monitor_rows, n // 10) if n >= 20 else 0
            monitor, train = (order[:n_monitor], order[n_monitor:]) if n_monitor else (order, order)
            trainers = {}
            for layer, (X, Y) in first.items():
                tc = clone(templates[layer])
                tc._begin()
                trainers[layer] = DictionaryTrainer(tc, config, X[monitor], Y[monitor])
            return trainers, np.sort(train), n_monitor

        state = {"window": 0, "position": 0, "first_end": None, "steps": 0, "rows": 0, "seconds": 0.0}
        trainers: dict[int, DictionaryTrainer] = {}
        n_monitor = 0
        if saved is not None:
            state = {key: saved.get(key, state[key]) for key in state}
            again = windows(0, state["first_end"])
            try:
                _, first = next(again)  # the first window again: it holds the monitoring sample
            finally:
                again.close()
            trainers, _, n_monitor = make_trainers(first)
            del first  # the trainers copied their monitoring rows
            for layer, trainer in trainers.items():
                trainer.load_state_dict(trainer_state(str(layer)))
        bar = tqdm(total=len(texts), desc=f"transcoders ({len(chosen)} layers)", unit="text",
                   disable=not config.progress or rank > 0, initial=state["position"])  # fmt: skip
        finished = bool(trainers) and all(t.stopped for t in trainers.values())  # resumed after the end
        stream = windows(len(texts) if finished else state["position"])

        def checkpoint() -> None:
            _write_checkpoint(
                directory, {**state, "fingerprint": fingerprint}, {str(k): t for k, t in trainers.items()}
            )

        written, clock = -math.inf, time.monotonic()  # the first window is always checkpointed
        unsaved = False
        try:
            with torch.random.fork_rng(devices=[]):  # the model's and the user's random state stay as they were
                for end, pairs in stream:
                    train_rows = None
                    if state["window"] == 0:
                        trainers, train_rows, n_monitor = make_trainers(pairs)
                        state["first_end"] = end
                    n_rows = len(next(iter(pairs.values()))[0])
                    train_rows = np.arange(n_rows) if train_rows is None else train_rows
                    order = np.concatenate([
                        train_rows[np.random.default_rng([config.seed, state["window"], *([p] if p else [])])
                                   .permutation(len(train_rows))]
                        for p in range(window_passes)
                    ])  # fmt: skip
                    active = {layer: t for layer, t in trainers.items() if not t.stopped}
                    for batch in np.array_split(order, max(1, math.ceil(len(order) / config.batch_size))):
                        for layer, trainer in active.items():
                            X, Y = pairs[layer]
                            trainer.step(X[batch], Y[batch])
                        state["steps"] += 1
                        if callback is not None:
                            callback(state["steps"])
                    records = {layer: trainer.end_epoch(sample=pairs[layer]) for layer, trainer in active.items()}
                    state["window"] += 1
                    state["rows"] += len(order)
                    bar.update(end - state["position"])
                    state["position"] = end
                    now = time.monotonic()
                    state["seconds"] += now - clock  # streaming and training time, summed over resumed runs
                    clock, unsaved = now, True
                    if records:
                        fvu = float(np.median([r["monitor_fvu"] for r in records.values()]))
                        bar.set_postfix(steps=state["steps"], median_fvu=f"{fvu:.3g}")
                    del pairs  # before the next window is streamed: one window in memory at a time
                    if all(t.stopped for t in trainers.values()):
                        break
                    if directory is not None and now - written >= checkpoint_every:
                        checkpoint()
                        written, clock, unsaved = time.monotonic(), time.monotonic(), False
            if directory is not None and unsaved:
                checkpoint()  # the last window: a report or save that fails after this does not train again
        finally:
            stream.close()  # removes the hooks now, also when a step or the callback raised
            bar.close()
        if not trainers:
            raise ValueError("the texts gave no token rows to train on; pass texts with tokens that are not special")
        name = display_name(model_name_of(model))
        fitted = {}
        for layer, trainer in trainers.items():
            tc = trainer.dictionary
            run = trainer.run()
            tc.fit_info_ = {"rows": state["rows"], "monitor": "held-out rows of the first window"}
            tc._finish_run(run)
            tc.layer_ = points[layer][0].name
            tc.model_name_ = name
            tc._set_affine_decoder()
            tc.n_features_in_ = int(tc.weights_["W_enc"].shape[0])
            fitted[layer] = tc
        info = {"windows": state["window"], "steps": state["steps"], "rows": state["rows"], "monitor_rows": n_monitor}
        seconds = state["seconds"]
        if world > 1:  # every rank gets every rank's transcoders
            gathered = [None] * world
            dist.all_gather_object(gathered, (fitted, info, seconds), group=process_group)
            fitted = {layer: part[0][layer] for part in gathered for layer in part[0]}
            fitted = {layer: fitted[layer] for layer in everything}
            info = {key: max(part[1][key] for part in gathered) for key in info}
            seconds = max(part[2] for part in gathered)
        fitted_set = cls(fitted, input_point=input_point, model_name=name, n_layers=len(blocks(model)[1]),
                         d_model=width, fit_info=info)  # fmt: skip
        fitted_set.fit_seconds = round(seconds, 1)  # summed over resumed runs (kept in the checkpoint)
        return fitted_set

    def replacement_weights(self, layer: int) -> dict[str, torch.Tensor]:
        """Layer ``layer``'s weights as the replacement model uses them (raw units, :meth:`Transcoder.folded
        <interp_widgets.concepts.Transcoder.folded>`), with ``W_dec`` (n, 1, d): the one layer it writes to, in the
        layout of :meth:`CrossLayerTranscoderSet.replacement_weights
        <interp_widgets.circuits.CrossLayerTranscoderSet.replacement_weights>` (column ``j`` writes to layer
        ``layer + j``).

        Example:
            >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1, progress=False))
            >>> tcs.replacement_weights(1)["W_dec"].shape
            torch.Size([16, 1, 32])
        """
        w = self[layer].folded()
        w["W_dec"] = w["W_dec"][:, None]
        return w

    # ------------------------------------------------------------------ checks
    def check_model(self, model) -> None:
        """Raise a ValueError naming the fix if ``model`` is not the model (name, width, depth) this set was made for.

        Example:
            >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1, progress=False))
            >>> tcs.check_model(lm)  # the model it was trained on: nothing to say
            >>> tcs.n_layers = 3  # as if made for a deeper model
            >>> tcs.check_model(lm)
            Traceback (most recent call last):
            ...
            ValueError: these transcoders were made for a model of 3 blocks; this one has 2: use them with the model they were made for, or train a set for this one (TranscoderSet.fit)
        """
        width = check_model_identity(
            model, self.model_name, self.n_layers, subject="these transcoders were", them="them",
            fix="or train a set for this one (TranscoderSet.fit)", named="trained on",
        )  # fmt: skip
        for layer, tc in self.transcoders.items():
            if tc.n_features_in_ != width or tc.n_outputs_ != width:
                raise ValueError(
                    f"the transcoder of layer {layer} reads width {tc.n_features_in_} and writes {tc.n_outputs_}, but "
                    f"this model's layers have width {width}: use the set with the model it was trained on, or train "
                    "a set for this one (TranscoderSet.fit)"
                )

    # ------------------------------------------------------------------ report
    def evaluate(
        self, model, tokenizer, texts, *, max_tokens: int = 20_000, include_special: bool = False,
        max_batch_tokens: int = 8192, progress: bool = False,
    ) -> TranscoderReport:  # fmt: skip
        """Report every layer on held-out ``texts`` (tokens up to ``max_tokens``): FVU, L0, dead fraction, the
        next-token loss with that layer's transcoder spliced in (and with its MLP output zeroed), and the FVU of a
        skip-only baseline: the least-squares affine map from input to output, cross-fitted on two halves of the
        texts (each half predicted by the map fitted on the other).

        The transcoder replaces ``mlp_out`` (with :func:`~interp_widgets.interventions.intervene`) at the tokens it
        was trained on (without ``include_special``, special tokens keep the true MLP output). The losses are means
        over every next-token prediction of the texts whose tokens were measured (the last may pass ``max_tokens``);
        they take one forward pass over those texts plus ``2 × len(self)`` runs that start at the spliced layer's
        block (the blocks below it are recorded once, :class:`~interp_widgets.layers.BlockReplay`; a model that cannot
        be replayed so runs whole passes), and ``progress`` shows a bar of them.

        Example:
            >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=2, progress=False))
            >>> report = tcs.evaluate(lm, lm_tokenizer, texts[-8:])
            >>> report.tokens, len(report.to_dataframe())
            (339, 2)
        """
        self.check_model(model)
        texts = _texts(texts)
        check_int("max_tokens", max_tokens, minimum=1)
        d = self.d_model + 1
        stats = {
            layer: {
                "rss": 0.0, "y": np.zeros(self.d_model), "yy": 0.0, "n": 0, "l0": 0.0,
                "fired": np.zeros(tc.n_concepts, bool), "xtx": np.zeros((2, d, d)), "xty": np.zeros((2, d, self.d_model)),
                "yty": np.zeros(2),
            }
            for layer, tc in self.transcoders.items()
        }  # fmt: skip
        used = 0
        gen = _stream(model, tokenizer, texts, self.layers, self.input_point, include_special=include_special,
                      max_batch_tokens=max_batch_tokens)  # fmt: skip
        try:
            for end, text_ids, pairs in gen:
                take = min(len(text_ids), max_tokens - stats[self.layers[0]]["n"])
                for layer, (X, Y) in pairs.items():
                    X, Y, ids = X[:take], Y[:take], text_ids[:take]
                    s, tc = stats[layer], self.transcoders[layer]
                    with torch.no_grad():
                        codes = tc.transform(X)
                        pred = tc.predict(X)
                    s["rss"] += float(((Y - pred).astype(np.float64) ** 2).sum())
                    s["y"] += Y.sum(0, dtype=np.float64)
                    s["yy"] += float((Y.astype(np.float64) ** 2).sum())
                    s["n"] += len(Y)
                    s["l0"] += float((codes > 0).sum())
                    s["fired"] |= (codes > 0).any(0)
                    Xa = np.hstack([X, np.ones((len(X), 1), np.float32)]).astype(np.float64)
                    for fold in (0, 1):
                        rows = ids % 2 == fold
                        s["xtx"][fold] += Xa[rows].T @ Xa[rows]
                        s["xty"][fold] += Xa[rows].T @ Y[rows].astype(np.float64)
                        s["yty"][fold] += float((Y[rows].astype(np.float64) ** 2).sum())
                used = end
                if stats[self.layers[0]]["n"] >= max_tokens:
                    break
        finally:
            gen.close()
        columns: dict[str, list] = {key: [] for key in ("fvu", "skip_fvu", "l0", "dead_fraction")}
        for layer in self.layers:
            s = stats[layer]
            total = s["yy"] - float((s["y"] ** 2).sum()) / max(s["n"], 1)
            columns["fvu"].append(s["rss"] / max(total, 1e-12))
            rss = 0.0
            for fold in (0, 1):
                other = 1 - fold
                ridge = 1e-6 * np.trace(s["xtx"][other]) / d * np.eye(d)
                W = np.linalg.solve(s["xtx"][other] + ridge, s["xty"][other])
                rss += s["yty"][fold] - 2 * float((W * s["xty"][fold]).sum()) + float((W * (s["xtx"][fold] @ W)).sum())
            columns["skip_fvu"].append(rss / max(total, 1e-12))
            columns["l0"].append(s["l0"] / max(s["n"], 1))
            columns["dead_fraction"].append(float(1 - s["fired"].mean()))
        losses = self._losses(model, tokenizer, texts[:used], include_special, max_batch_tokens, progress)
        return TranscoderReport(
            layers=self.layers,
            metrics=columns,
            loss_clean=losses["clean"],
            loss_spliced=losses["spliced"],
            loss_zero=losses["zero"],
            tokens=int(stats[self.layers[0]]["n"]),
            model_name=self.model_name,
            input_point=self.input_point,
        )

    def _losses(self, model, tokenizer, texts, include_special, max_batch_tokens, progress=False) -> dict:
        """The mean next-token loss over ``texts``: clean, each layer spliced, each layer's MLP output zeroed."""
        from tqdm.auto import tqdm

        adapter = ModelAdapter(model, tokenizer, max_batch_tokens=max_batch_tokens)
        encodings = [adapter.encode(text) for text in texts]
        sums = {"clean": 0.0, "spliced": np.zeros(len(self)), "zero": np.zeros(len(self))}
        count = 0
        batches = list(_padded_batches(adapter, encodings))
        replayable = None
        bar = tqdm(total=len(batches) * (1 + 2 * len(self)), desc="transcoder report: spliced losses", unit="pass",
                   disable=not progress)  # fmt: skip
        with evaluation(model), torch.no_grad(), bar:
            for batch, ids, mask in batches:
                spliced_at = torch.zeros(ids.shape, dtype=torch.bool)
                for row, i in enumerate(batch):
                    spliced_at[row, : len(encodings[i])] = torch.from_numpy(_kept_tokens(encodings[i], include_special))
                ids, mask, spliced_at = ids.to(adapter.device), mask.to(adapter.device), spliced_at.to(adapter.device)
                scored = mask[:, 1:].bool() & mask[:, :-1].bool()

                def loss_of(logits: torch.Tensor) -> float:
                    each = torch.nn.functional.cross_entropy(
                        logits[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none"
                    )
                    bar.update(1)
                    return float(each[scored].sum())

                clean: dict[str, torch.Tensor] = {}
                replay = BlockReplay.record(  # the spliced runs start at their own block: the ones below are shared
                    model,
                    lambda: clean.setdefault(
                        "logits", model(input_ids=ids, attention_mask=mask, use_cache=False).logits
                    ),
                )
                if replay is None and not clean:
                    clean["logits"] = model(input_ids=ids, attention_mask=mask).logits
                if replayable is None:  # checked once: block 0 on gives the model's own logits
                    replayable = replay is not None and torch.allclose(
                        replay.logits(0).float(), clean["logits"].float(), atol=1e-4, rtol=0
                    )

                def loss(start: int) -> float:
                    if replayable:
                        return loss_of(replay.logits(start))
                    return loss_of(model(input_ids=ids, attention_mask=mask).logits)

                sums["clean"] += loss_of(clean.pop("logits"))
                count += int(scored.sum())
                for j, (layer, tc) in enumerate(self.transcoders.items()):
                    inp, out = transcoder_points(model, layer, self.input_point)
                    seen: dict[str, torch.Tensor] = {}

                    def keep_input(module, inputs, value):
                        seen["x"] = hidden_of(value)

                    def splice(hidden, tc=tc):
                        pred = tc.predict_torch(seen["x"].float()).to(hidden.dtype)
                        return torch.where(spliced_at[..., None], pred, hidden)

                    with hooks(model, {inp.name: keep_input}), intervene(model, {out.name: splice}):
                        sums["spliced"][j] += loss(layer)
                    with intervene(model, {out.name: lambda hidden: torch.where(spliced_at[..., None], 0.0, hidden)}):
                        sums["zero"][j] += loss(layer)
        count = max(count, 1)
        return {
            "clean": sums["clean"] / count,
            "spliced": list(sums["spliced"] / count),
            "zero": list(sums["zero"] / count),
        }

    # ------------------------------------------------------------------ our own file
    def save(self, path: str | Path) -> Path:
        """Write the set to one safetensors file (never pickle): every layer's weights, the model's name, the
        widths and a checksum of the weights, which :meth:`load` verifies.

        Example:
            >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1, progress=False))
            >>> again = TranscoderSet.load(tcs.save(getfixture("tmp_path") / "tcs.safetensors"), model=lm)
            >>> again, bool(np.allclose(again[1].predict(np.ones((1, 32), np.float32)), tcs[1].predict(np.ones((1, 32), np.float32))))
            (TranscoderSet(2 layers, 16 features each, topk, reads mlp_in, model unknown), True)
        """
        arrays, layers = {}, {}
        for layer, tc in self.transcoders.items():
            tc_arrays, extra = tc._state()
            for name, value in tc_arrays.items():
                arrays[f"layer.{layer}.{name}"] = np.asarray(value)
            params = tc.get_params()
            layers[str(layer)] = {
                "params": params,
                "extra": extra,
                "fit_info": tc.fit_info_,
                "layer": tc.layer_,
                "n_features_in": tc.n_features_in_,
                "shapes": {name: list(np.shape(v)) for name, v in tc_arrays.items() if name.startswith("sae.")},
            }
        meta = {
            "model_name": self.model_name,
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "input_point": self.input_point,
            "output_point": "mlp_out",
            "fit_info": self.fit_info,
            "layers": layers,
            "checksum": _checksum(arrays),
        }
        return save_bundle(path, _SET_KIND, arrays, meta)

    @classmethod
    def load(cls, path: str | Path, *, model=None) -> TranscoderSet:
        """Read a set written by :meth:`save`; with ``model``, refuse a set made for another model or width
        (:meth:`check_model`). A file whose weights no longer match their checksum is refused as corrupted.

        Example:
            >>> TranscoderSet.load(getfixture("tmp_path") / "missing.safetensors")
            Traceback (most recent call last):
            ...
            FileNotFoundError: ...
        """
        from interp_widgets.concepts.training import TrainingConfig

        arrays, meta = load_bundle(path, _SET_KIND)
        if meta.get("checksum") != _checksum(arrays):
            raise ValueError(
                f"{path} is corrupted: its weights do not match the checksum written with them; save the set again "
                "(TranscoderSet.save) or train it again (TranscoderSet.fit)"
            )
        transcoders = {}
        for layer, entry in meta["layers"].items():
            params = dict(entry["params"])
            if isinstance(params.get("training"), dict):
                params["training"] = TrainingConfig(**params["training"])
            tc = Transcoder(**params)
            prefix = f"layer.{layer}."
            own = {name[len(prefix) :]: value for name, value in arrays.items() if name.startswith(prefix)}
            tc._restore(own, entry["extra"])
            tc.fit_info_ = entry["fit_info"]
            tc.layer_ = entry["layer"]
            tc.model_name_ = meta["model_name"]
            tc.n_features_in_ = int(entry["n_features_in"])
            transcoders[int(layer)] = tc
        out = cls(transcoders, input_point=meta["input_point"], model_name=meta["model_name"],
                  n_layers=meta["n_layers"], d_model=meta["d_model"], fit_info=meta.get("fit_info"))  # fmt: skip
        if model is not None:
            out.check_model(model)
        return out

    # ------------------------------------------------------------------ EleutherAI sparsify folders
    @classmethod
    def from_sparsify(cls, folder: str | Path, *, model=None, layers=None, progress: bool = True) -> TranscoderSet:
        """Load the MLP transcoders of an EleutherAI sparsify run (PyPI ``eai-sparsify``; not the PyPI ``sparsify``).

        ``folder`` holds one folder per hookpoint, ``layers.{i}.mlp`` or ``model.layers.{i}.mlp`` (``h.{i}.mlp`` for
        GPT-2), each with ``cfg.json`` and ``sae.safetensors`` as ``SparseCoder.save_to_disk`` writes them (a
        single hookpoint folder is read alone). Each must be a transcoder (``transcode: true``) with sparsify's
        ``topk`` activation (ReLU, then the top ``k``: the same features as our top ``k`` then ReLU); it reads
        the MLP's input after the block's norm, so the set's input point is ``"mlp_in"``. Folders of sparsify's
        ``clt`` branch with ``in_norm`` / ``out_norm`` have that normalisation folded into the weights, so the
        transcoders read and predict the model's own activations (see :mod:`interp_widgets.circuits._sparsify`).

        Args:
            folder: the run's folder (sparsify's ``save_dir/run_name``) or one hookpoint folder.
            model: the model the transcoders were trained on; given, each layer must exist in it, its hookpoint
                must be that block's MLP and its width the model's, and the set records the model's name.
            layers: block indices to load (default: every hookpoint folder, which must then be consecutive
                blocks: a gap is refused as a likely partial copy; name the layers to load a set with gaps).
            progress: a tqdm bar over the layers.

        Example:
            >>> from safetensors.torch import save_file
            >>> run, g = getfixture("tmp_path") / "run", torch.Generator().manual_seed(0)
            >>> for i in range(2):  # a tiny sparsify run on lm (GPT-2, d = 32): 64 latents, k = 4
            ...     (run / f"h.{i}.mlp").mkdir(parents=True)
            ...     _ = (run / f"h.{i}.mlp" / "cfg.json").write_text('{"activation": "topk", "num_latents": 64, '
            ...         '"k": 4, "skip_connection": false, "transcode": true, "d_in": 32}')
            ...     save_file({"encoder.weight": torch.randn(64, 32, generator=g), "encoder.bias": torch.zeros(64),
            ...                "W_dec": torch.randn(64, 32, generator=g), "b_dec": torch.zeros(32)},
            ...               str(run / f"h.{i}.mlp" / "sae.safetensors"))
            >>> TranscoderSet.from_sparsify(run, model=lm, progress=False)
            TranscoderSet(2 layers, 64 features each, topk, reads mlp_in, model unknown)
        """
        from tqdm.auto import tqdm

        from interp_widgets.circuits._sparsify import hookpoint_folders, read_hookpoint

        folders = hookpoint_folders(folder)
        if layers is None:
            found = list(folders)
            gaps = sorted(set(range(found[0], found[-1] + 1)) - set(found))
            if gaps:
                raise ValueError(
                    f"{folder} has transcoders for blocks {found} but not for {gaps}, so the set would have gaps "
                    f"(a partial copy?); add the missing folders, or pass layers={found} to load these anyway"
                )
            chosen = found
        else:
            chosen = [layers] if isinstance(layers, (int, np.integer)) else list(layers)
            for layer in chosen:
                check_int("layer", layer, minimum=0)
            if not chosen or len(set(chosen)) != len(chosen):
                raise ValueError(f"layers must name distinct blocks, got {layers!r}")
            absent = [layer for layer in chosen if layer not in folders]
            if absent:
                raise FileNotFoundError(
                    f"{folder} has no hookpoint folder for blocks {absent}; it has blocks {list(folders)}"
                )
            chosen = sorted(int(layer) for layer in chosen)
        n_blocks = None if model is None else len(blocks(model)[1])
        width = None if model is None else _width(model)
        name = None if model is None else display_name(model_name_of(model))
        transcoders = {}
        for layer in tqdm(chosen, desc="sparsify transcoders", unit="layer", disable=not progress):
            path = folders[layer]
            if model is not None:
                if layer >= n_blocks:
                    raise ValueError(
                        f"{path.name} is for block {layer}, but this model has {n_blocks} blocks (0..{n_blocks - 1}): "
                        "load the folder with the model it was trained on"
                    )
                mlp = transcoder_points(model, layer)[0].module
                if _submodule(model, path.name) is not mlp:
                    raise ValueError(
                        f"{path.name} is not the MLP of block {layer} of {type(model).__name__} (no module of that "
                        "name, or another one): load the folder with the model it was trained on"
                    )
            tc, _ = read_hookpoint(path, layer)
            if width is not None and (tc.n_features_in_ != width or tc.n_outputs_ != width):
                raise ValueError(
                    f"{path.name} reads and writes width {tc.n_features_in_}, but this model's layers have width "
                    f"{width}: load the folder with the model it was trained on"
                )
            tc.model_name_ = name
            transcoders[layer] = tc
        d_model = next(iter(transcoders.values())).n_features_in_
        widths = {tc.n_features_in_ for tc in transcoders.values()}
        if len(widths) > 1:
            raise ValueError(f"{folder} mixes transcoders of widths {sorted(widths)}; they come from several models")
        info = {"source": "sparsify", "folder": str(Path(folder).resolve()),
                "hookpoints": {str(layer): folders[layer].name for layer in chosen}}  # fmt: skip
        out = cls(transcoders, input_point="mlp_in", model_name=name, d_model=d_model, fit_info=info,
                  n_layers=n_blocks if n_blocks is not None else max(chosen) + 1)  # fmt: skip
        if model is not None:
            out.check_model(model)
        return out

    def checksum(self) -> str:
        """A SHA-256 digest of every layer's weights (the checksum :meth:`save` writes): it names this set in the
        feature explanations' cache (:meth:`explain`).

        Example:
            >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1, progress=False))
            >>> tcs.checksum() == TranscoderSet.load(tcs.save(getfixture("tmp_path") / "t.safetensors")).checksum()
            True
        """
        arrays = {}
        for layer, tc in self.transcoders.items():
            for name, value in tc._state()[0].items():
                arrays[f"layer.{layer}.{name}"] = np.asarray(value)
        return _checksum(arrays)

    # ------------------------------------------------------------------ feature explanations
    def explain(
        self,
        model,
        tokenizer,
        texts,
        *,
        n_examples: int = 10,
        window: int = 8,
        layers="all",
        bins: int = 64,
        vocab_top: int = 10,
        labeller=None,
        cache_dir: str | Path | None = None,
        include_special: bool = False,
        max_batch_tokens: int = 8192,
        progress: bool = True,
    ):
        """Explain every feature over ``texts`` from **one** forward pass for all layers: its top activating
        contexts, density and histogram, its decoder's vocabulary projection and a label
        (:class:`~interp_widgets.circuits.features.FeatureExplanations`; the module
        :mod:`interp_widgets.circuits.features` says how each is computed).

        Args:
            model, tokenizer: the model the set was trained on (checked) and its tokenizer; the model is untouched.
            texts: the corpus (strings or chat conversations).
            n_examples: top contexts per feature; ``window``: tokens either side of each (same text only).
            layers: ``"all"`` (the set's layers), a layer of the set or a list of them.
            bins: histogram bins (a power of two); ``vocab_top``: tokens of each side of the vocabulary projection.
            labeller: ``labeller(feature, examples) -> str`` for every feature that fired (e.g.
                :class:`~interp_widgets.concepts.LMLabeler`, about a second a feature on a CPU: rather label a
                graph's features, ``graph.with_explanations(explained, labeller=...)``); default: the top tokens.
            cache_dir: a folder for the cache file, keyed by the set's :meth:`checksum`, the corpus and the
                settings; a second call reads it and runs no model (a labeller not yet applied to it is applied and
                the file updated). A corrupted cache file is refused with the fix.
            include_special: explain special tokens (BOS …) too; ``max_batch_tokens``: padded tokens per pass.
            progress: a tqdm bar over the texts.

        Example:
            >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=2, progress=False))
            >>> explained = tcs.explain(lm, lm_tokenizer, texts[:20], n_examples=3, progress=False,
            ...                         cache_dir=getfixture("tmp_path"))
            >>> explained.run.n_tokens, explained.layers[0].top_values.shape
            (657, (16, 3))
            >>> tcs.explain(lm, lm_tokenizer, texts[:20], n_examples=3, progress=False,
            ...             cache_dir=getfixture("tmp_path")).run.key == explained.run.key  # read from the cache
            True
        """
        from interp_widgets.circuits.features import explain_set

        self.check_model(model)
        texts = _texts(texts)
        if isinstance(layers, str):
            if layers != "all":
                raise ValueError(f"layers must be 'all', a layer of the set or a list of them, got {layers!r}")
            chosen = self.layers
        else:
            chosen = sorted({int(layer) for layer in ([layers] if isinstance(layers, (int, np.integer)) else layers)})
            missing = [layer for layer in chosen if layer not in self.layers]
            if missing or not chosen:
                raise ValueError(f"layers {missing or layers} have no transcoder in this set; it has {self.layers}")
        check_int("max_batch_tokens", max_batch_tokens, minimum=1)

        def stream(layers):
            return _stream(model, tokenizer, texts, layers, self.input_point, include_special=include_special,
                           max_batch_tokens=max_batch_tokens)  # fmt: skip

        return explain_set(self, model, tokenizer, texts, layers=chosen, stream=stream, n_examples=n_examples,
                           window=window, bins=bins, vocab_top=vocab_top, include_special=include_special,
                           labeller=labeller, cache_dir=cache_dir, progress=progress)  # fmt: skip

    # ------------------------------------------------------------------ circuit-tracer's files
    def to_circuit_tracer(
        self,
        directory: str | Path,
        *,
        model=None,
        tokenizer=None,
        texts=None,
        scan: str | None = None,
        max_batch_tokens: int = 8192,
    ) -> Path:
        """Write circuit-tracer 0.5.0's per-layer files: ``layer_{i}.safetensors`` and ``config.yaml``.

        ``config.yaml`` lists the files by absolute path (``transcoders:``; without that list circuit-tracer's
        ``load_transcoders(config)`` looks for them on the Hub), with ``model_kind: transcoder_set``, the hooks, the
        model's name and a ``scan`` name (default ``interp_widgets/<model>/<directory name>``). Move the directory
        and the paths must be written again.

        Each file holds ``W_enc`` (n, d), ``b_enc``, ``W_dec`` (n, d), ``b_dec``, ``W_skip`` (d, d) with a skip
        term, and JumpReLU's raw threshold ``activation_function.threshold`` (not its log): 0.5.0's loader builds a
        JumpReLU when that tensor is there and a plain ReLU otherwise, so ReLU sets load as they are. It never builds
        TopK from files: a TopK set written this way would load as ReLU. The export warns; build the set in Python
        with circuit-tracer's ``TopK(k)`` instead. That ``TopK`` keeps the ``k`` largest raw pre-activations, ours
        keeps them after a ReLU: the two agree only if every token has at least ``k`` positive pre-activations, which
        the export checks on ``texts`` (with ``model`` and ``tokenizer``) and refuses otherwise.
        circuit-tracer needs every layer from 0.

        Example:
            >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, activation="jumprelu", max_epochs=1, progress=False))
            >>> out = tcs.to_circuit_tracer(getfixture("tmp_path") / "ct")
            >>> sorted(p.name for p in out.iterdir())
            ['config.yaml', 'layer_0.safetensors', 'layer_1.safetensors']
        """
        from safetensors.torch import save_file

        if self.layers != list(range(self.n_layers)):
            raise ValueError(
                f"circuit-tracer needs a transcoder for every layer from 0 to {self.n_layers - 1}; this set has "
                f"{self.layers}: train the missing layers (TranscoderSet.fit(..., layers='all'))"
            )
        topk = sorted({tc.k_ for tc in self.transcoders.values() if tc.activation == "topk"})
        if topk:
            warnings.warn(
                "circuit-tracer 0.5.0 loads transcoder files without a threshold as ReLU, never as TopK: build this "
                f"set in Python with circuit-tracer's TopK(k={topk[0]}) and its own TranscoderSet(..., "
                "feature_input_hook=..., feature_output_hook=...) to use it as TopK",
                UserWarning,
                stacklevel=2,
            )
            if model is None or tokenizer is None or texts is None:
                raise ValueError(
                    "a TopK set agrees with circuit-tracer's TopK only where every token has at least k positive "
                    "pre-activations; pass model=, tokenizer= and texts= so that the export can check it"
                )
            short = self.topk_shortfall(model, tokenizer, texts, max_batch_tokens=max_batch_tokens)
            bad = {layer: frac for layer, frac in short.items() if frac > 0}
            if bad:
                listed = ", ".join(f"layer {layer}: {frac:.2%}" for layer, frac in bad.items())
                raise ValueError(
                    f"tokens with fewer than k positive pre-activations ({listed} of the tokens): circuit-tracer's "
                    "TopK would keep negative ones where ours keeps only positive ones; train a JumpReLU set "
                    "(Transcoder(activation='jumprelu')) for circuit-tracer, or a TopK set with a smaller k"
                )
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for layer, tc in self.transcoders.items():
            w = tc.folded()
            tensors = {name: w[name].float().contiguous() for name in ("W_enc", "W_dec", "b_enc", "b_dec")}
            if "W_skip" in w:
                tensors["W_skip"] = w["W_skip"].float().contiguous()
            if tc.activation == "jumprelu":
                tensors["activation_function.threshold"] = w["threshold"].float().contiguous()
            save_file(tensors, str(directory / f"layer_{layer}.safetensors"))
        config = {
            "model_kind": "transcoder_set",
            "model_name": self.model_name or "",
            "scan": scan or f"interp_widgets/{self.model_name or 'model'}/{directory.resolve().name}",
            "feature_input_hook": CIRCUIT_TRACER_HOOKS[self.input_point],
            "feature_output_hook": CIRCUIT_TRACER_HOOKS["mlp_out"],
        }
        # without a `transcoders` list, circuit-tracer looks for the files on the Hub: list them, as absolute paths
        files = "".join(
            f"  - {json.dumps(str((directory / f'layer_{i}.safetensors').resolve()))}\n" for i in self.layers
        )
        text = "".join(f"{k}: {json.dumps(v)}\n" for k, v in config.items()) + "transcoders:\n" + files
        (directory / "config.yaml").write_text(text)
        return directory

    def topk_shortfall(self, model, tokenizer, texts, *, max_batch_tokens: int = 8192) -> dict[int, float]:
        """For each TopK layer, the fraction of tokens of ``texts`` with fewer than ``k`` positive pre-activations.

        Example:
            >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1, progress=False))
            >>> sorted(tcs.topk_shortfall(lm, lm_tokenizer, texts[:4]))
            [0, 1]
        """
        self.check_model(model)
        layers = [layer for layer, tc in self.transcoders.items() if tc.activation == "topk"]
        short = {layer: 0 for layer in layers}
        n = 0
        if not layers:
            return {}
        for layer, (X, _) in collect_transcoder_pairs(
            model, tokenizer, texts, layers, input_point=self.input_point, max_batch_tokens=max_batch_tokens
        ).items():
            tc = self.transcoders[layer]
            w = tc.folded()
            pre = torch.from_numpy(X) @ w["W_enc"].T + w["b_enc"]
            short[layer] = int(((pre > 0).sum(1) < tc.k_).sum())
            n = len(X)
        return {layer: count / max(n, 1) for layer, count in short.items()}


def _templates(transcoder, layers: list[int], width: int) -> dict[int, Transcoder]:
    """The unfitted transcoder of every layer in ``layers`` from ``fit``'s ``transcoder=``: one for all, a mapping
    from layer to transcoder, or None (the default); their training settings must agree (the layers share the
    windows and minibatches)."""
    if transcoder is None:
        transcoder = Transcoder(8 * width, activation="topk", k=32)
    if isinstance(transcoder, Mapping):
        missing = [layer for layer in layers if layer not in transcoder]
        if missing:
            raise ValueError(
                f"transcoder has no entry for layers {missing}: a mapping needs an unfitted Transcoder for every "
                "layer trained, or pass one Transcoder for all"
            )
        templates = {layer: transcoder[layer] for layer in layers}
    else:
        templates = dict.fromkeys(layers, transcoder)
    for layer, template in templates.items():
        if not isinstance(template, Transcoder):
            raise TypeError(
                f"transcoder must be an unfitted Transcoder (the settings of each layer) or a mapping from layer to "
                f"one, got {template!r} for layer {layer}"
            )
        template._check_params()
    configs = {template.training_config for template in templates.values()}
    if len(configs) > 1:
        raise ValueError(
            "the layers' transcoders must share their training settings (learning rate, batch size, seed…): the "
            "layers train on the same windows and minibatches; give them equal training= settings"
        )
    restarts = next(iter(configs)).restarts
    if restarts != 1:
        raise ValueError(
            f"the transcoders have restarts={restarts}, but a TranscoderSet trains each layer once, from one stream "
            "of forward passes; pass restarts=1 (or fit one layer's Transcoder on stored activations, where "
            "restarts apply)"
        )
    return templates


def _width(model) -> int:
    config = getattr(model, "config", None)
    for key in ("hidden_size", "n_embd", "d_model"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    raise UnsupportedModelError(f"the config of {type(model).__name__} does not say its width (hidden_size)")


def _submodule(model, name: str):
    """The module ``name`` of ``model`` or of its base model (sparsify names hookpoints relative to the base
    model), or None."""
    for root in (model, getattr(model, "base_model", None)):
        if root is None:
            continue
        try:
            return root.get_submodule(name)
        except AttributeError:
            continue
    return None


def _join(parts: list[dict], layers: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    return {layer: tuple(np.concatenate([p[layer][side] for p in parts]) for side in (0, 1)) for layer in layers}


def _checksum(arrays: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        digest.update(name.encode())
        digest.update(str(value.dtype).encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------- the report
@dataclasses.dataclass
class TranscoderReport:
    """Per-layer quality of a :class:`TranscoderSet` on held-out tokens (:meth:`TranscoderSet.evaluate`).

    ``metrics`` holds, per layer: ``fvu`` (fraction of the output's variance left unexplained), ``skip_fvu`` (that of
    the cross-fitted least-squares affine map from input to output), ``l0`` (mean active features per token) and
    ``dead_fraction`` (features that never fired). ``loss_clean`` is the model's mean next-token loss; ``loss_spliced``
    and ``loss_zero`` are the losses with each layer's MLP output replaced by its transcoder, or zeroed.

    Example:
        >>> report = TranscoderReport([0], {"fvu": [0.2], "skip_fvu": [0.5], "l0": [8.0], "dead_fraction": [0.0]},
        ...                           3.0, [3.1], [4.0], 100)
        >>> report.to_dataframe()[["layer", "fvu_ratio", "loss_recovered"]].round(2).values.tolist()
        [[0.0, 0.4, 0.9]]
    """

    layers: list[int]
    metrics: dict[str, list[float]]
    loss_clean: float
    loss_spliced: list[float]
    loss_zero: list[float]
    tokens: int
    model_name: str | None = None
    input_point: str = "mlp_in"

    def to_dataframe(self):
        """One row per layer: ``layer``, ``fvu``, ``skip_fvu``, ``fvu_ratio`` (the goal is ≤ 0.5), ``l0``,
        ``dead_fraction``, ``loss_spliced``, ``loss_delta`` (over the clean loss), ``loss_zero`` and
        ``loss_recovered`` (1 − delta / (zero − clean)).

        Example:
            >>> TranscoderReport([3], {"fvu": [0.1], "skip_fvu": [0.4], "l0": [5.0], "dead_fraction": [0.1]},
            ...                  2.0, [2.2], [3.0], 50).to_dataframe()["loss_delta"].round(3).tolist()
            [0.2]
        """
        import pandas as pd

        frame = pd.DataFrame({"layer": self.layers, **{key: self.metrics[key] for key in ("fvu", "skip_fvu")}})
        frame["fvu_ratio"] = frame["fvu"] / frame["skip_fvu"].clip(lower=1e-12)
        frame["l0"] = self.metrics["l0"]
        frame["dead_fraction"] = self.metrics["dead_fraction"]
        frame["loss_spliced"] = self.loss_spliced
        frame["loss_delta"] = frame["loss_spliced"] - self.loss_clean
        frame["loss_zero"] = self.loss_zero
        gap = (frame["loss_zero"] - self.loss_clean).where(lambda g: g.abs() > 1e-12)
        frame["loss_recovered"] = 1 - frame["loss_delta"] / gap
        return frame

    def chart(self):
        """An altair chart: each layer's FVU beside the skip-only baseline's.

        Example:
            >>> TranscoderReport([0, 1], {"fvu": [0.2, 0.3], "skip_fvu": [0.5, 0.6], "l0": [8.0, 8.0],
            ...                  "dead_fraction": [0.0, 0.0]}, 3.0, [3.1, 3.2], [4.0, 4.0], 100).chart().mark
            'bar'
        """
        import altair as alt

        frame = self.to_dataframe()
        long = frame.melt(id_vars="layer", value_vars=["fvu", "skip_fvu"], var_name="what", value_name="FVU")
        long["what"] = long["what"].map({"fvu": "transcoder", "skip_fvu": "skip-only (least squares)"})
        return (
            alt.Chart(long)
            .mark_bar()
            .encode(
                x=alt.X("layer:O", title="layer"),
                xOffset="what:N",
                y=alt.Y("FVU:Q", title="fraction of variance unexplained"),
                color=alt.Color("what:N", title=None),
                tooltip=["layer", "what", alt.Tooltip("FVU:Q", format=".3f")],
            )
            .properties(title=f"Transcoders on {self.tokens} held-out tokens")
        )

    def save(self, path: str | Path) -> Path:
        """Write the report as JSON.

        Example:
            >>> report = TranscoderReport([0], {"fvu": [0.2], "skip_fvu": [0.5], "l0": [8.0], "dead_fraction": [0.0]},
            ...                           3.0, [3.1], [4.0], 100)
            >>> TranscoderReport.load(report.save(getfixture("tmp_path") / "r.json")) == report
            True
        """
        from interp_widgets._files import output_path

        path = output_path(path)
        path.write_text(json.dumps({"format": "interp_widgets.TranscoderReport", **dataclasses.asdict(self)}))
        return path

    @classmethod
    def load(cls, path: str | Path) -> TranscoderReport:
        """Read a report written by :meth:`save`.

        Example:
            >>> TranscoderReport.load(getfixture("tmp_path") / "none.json")
            Traceback (most recent call last):
            ...
            FileNotFoundError: ...
        """
        data = json.loads(Path(path).read_text())
        if data.pop("format", None) != "interp_widgets.TranscoderReport":
            raise ValueError(f"{path} is not a saved TranscoderReport; pass a file written by TranscoderReport.save")
        return cls(**data)

    def _repr_html_(self) -> str:
        frame = self.to_dataframe().round(4)
        title = html.escape(f"Transcoders of {self.model_name or 'a model'} on {self.tokens} held-out tokens")
        return f"<div><b>{title}</b> (clean loss {self.loss_clean:.4f}){frame.to_html(index=False, escape=True)}</div>"

    def __repr__(self) -> str:
        fvu = float(np.median(self.metrics["fvu"]))
        return f"TranscoderReport({len(self.layers)} layers, {self.tokens} tokens, median FVU {fvu:.3f})"
