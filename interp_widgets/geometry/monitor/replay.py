"""Replay: the monitor's measurements over a series of saved checkpoints on a fixed probe batch.

This is the paper's own protocol (arXiv 2604.08764 analyses released checkpoint series): for every checkpoint,
the true gradients of the training loss on one fixed probe batch (the same texts, masks and subsampled rows each
time), measured exactly as :class:`~interp_widgets.geometry.monitor.anisotropy_monitor.AnisotropyMonitor` measures live training.
The x axis counts checkpoints, and so does the fit window.

With ``fit="early"`` (default) the replay runs in two passes, since every checkpoint is available up front:

1. the checkpoints of the window (the first ``ceil(fit_fraction · n)``, 0.3 by default) are run to pool their
   activations; the proxy is fitted once on them and frozen;
2. every checkpoint, window included, is measured against that proxy. Window rows are in-sample for the proxy
   (reference A8: "early"); they carry ``fitting = 1``.

``fit="refit"`` and ``fit="fixed"`` run in one pass, as live.

Checkpoints run on private copies in eval mode (no dropout: the probe gradient is deterministic); the user's
models and state dicts are never modified.

Example (three saved checkpoints of the tiny GPT-2, its weights scaled a little more each time):
    >>> import copy, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     paths = []
    ...     for i in range(3):
    ...         checkpoint = copy.deepcopy(lm)
    ...         with torch.no_grad():
    ...             _ = [parameter.mul_(1 + 0.1 * i) for parameter in checkpoint.parameters()]
    ...         checkpoint.save_pretrained(f"{tmp}/step-{i}"); paths.append(f"{tmp}/step-{i}")
    ...     record = replay(paths, texts[:4], ["layer:1"], model=lm, tokenizer=lm_tokenizer, rank=4, n_controls=5,
    ...                     progress=False)
    >>> record, record.series("fitting")[1].tolist(), type(record.chart("energy_ratio")).__name__
    (GeometryLog(layers=['layer:1'], rows=3, last checkpoint 2), [1.0, 0.0, 0.0], 'LayerChart')
"""

from __future__ import annotations

import copy
from pathlib import Path
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from interp_widgets.tasks import TASKS, task_class

from interp_widgets.geometry.log.geometry_log import GeometryLog
from interp_widgets.geometry.alignment.schedule import DEFAULT_FIT_FRACTION, ProxySchedule
from interp_widgets.geometry.monitor.anisotropy_monitor import AnisotropyMonitor
from interp_widgets.geometry.monitor.config import MonitorConfig
from interp_widgets.validation import check_int

__all__ = ["replay", "probe_batches", "check_same_architecture"]

Checkpoint = str | Path | Mapping[str, torch.Tensor] | nn.Module


def probe_batches(
    texts: Sequence[str],
    tokenizer,
    task,
    *,
    labels: Sequence[int] | None = None,
    batch_size: int = 8,
    max_length: int | None = None,
    mlm_probability: float = 0.15,
    seed: int = 0,
) -> list[dict[str, torch.Tensor]]:
    """Tokenise a fixed probe set into padded batches with the training loss's labels for ``task`` (a task name, a
    key of :data:`interp_widgets.tasks.TASKS`, or a task class; its ``training_batch`` adds the labels):

    * ``"causal-lm"``: ``labels = input_ids`` with padding set to -100;
    * ``"masked-lm"``: a seeded ``mlm_probability`` share of the non-special tokens (at least one per text) is
      replaced by ``[MASK]`` and labelled; the same positions for every checkpoint;
    * ``"sequence-classification"``: ``labels`` (one class index per text) is required.

    Example:
        >>> batches = probe_batches(["a good film", "bad"], lm_tokenizer, "causal-lm", batch_size=2)
        >>> sorted(batches[0]), (batches[0]["labels"] == -100).tolist() == (batches[0]["attention_mask"] == 0).tolist()
        (['attention_mask', 'input_ids', 'labels'], True)
    """
    if isinstance(texts, str) or not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("probe_texts must be a non-empty list of strings")
    check_int("batch_size", batch_size, minimum=1)
    kind = TASKS[task] if isinstance(task, str) else task
    kind.check_training_labels(tokenizer, labels, len(texts))
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for start in range(0, len(texts), batch_size):
        chunk = list(texts[start : start + batch_size])
        enc = tokenizer(
            chunk, padding=True, truncation=max_length is not None, max_length=max_length, return_tensors="pt"
        )
        batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        chunk_labels = None if labels is None else list(labels[start : start + batch_size])
        batch = kind.training_batch(tokenizer, batch, chunk_labels, generator, mlm_probability)
        batches.append(batch)
    return batches


def _load_checkpoint(checkpoint: Checkpoint, template: nn.Module | None) -> nn.Module:
    """A private copy of the checkpoint's model (never the user's object)."""
    if isinstance(checkpoint, nn.Module):
        return copy.deepcopy(checkpoint)
    if template is None:
        raise ValueError("state dicts and checkpoint paths need model= (a model of the same architecture)")
    if isinstance(checkpoint, Mapping):
        state = checkpoint
    else:
        path = Path(checkpoint)
        if path.is_dir():
            _check_directory_architecture(path, template)
            return type(template).from_pretrained(path).to(next(template.parameters()).device)
        if not path.is_file():
            raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
        if path.suffix == ".safetensors":
            from interp_widgets._files import read_safetensors

            state = read_safetensors(
                path,
                what="a model checkpoint",
                framework="pt",
                fix="pass a state dict saved with safetensors.torch.save_file",
            )[1]
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    model = copy.deepcopy(template)
    result = model.load_state_dict(state, strict=False)
    # tied weights (e.g. GPT-2's lm_head = wte) are stored once by safetensors: accept a missing key if it shares
    # storage with a loaded one
    tensors = dict(model.state_dict(keep_vars=True))
    loaded = {tensors[key].data_ptr() for key in state if key in tensors}
    missing = [key for key in result.missing_keys if tensors[key].data_ptr() not in loaded]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"checkpoint does not match the model: missing {missing[:8]}, unexpected "
            f"{list(result.unexpected_keys)[:8]}; pass model= of the checkpoints' architecture"
        )
    return model


def _signature(model: nn.Module) -> tuple[str, dict[str, tuple[int, ...]]]:
    """A model's architecture: its class and the name and shape of every parameter."""
    return type(model).__name__, {name: tuple(p.shape) for name, p in model.named_parameters()}


def check_same_architecture(reference: nn.Module, model: nn.Module, index: int) -> None:
    """Refuse a checkpoint whose architecture differs from the first one, naming the first difference.

    Example:
        >>> import torch
        >>> check_same_architecture(torch.nn.Linear(4, 4), torch.nn.Linear(4, 3), 2)
        Traceback (most recent call last):
        ...
        ValueError: checkpoint 2 has a different architecture from checkpoint 0: parameter 'weight' has shape (3, 4) instead of (4, 4); replay the checkpoints of one training run (one architecture), with model= of that architecture
    """
    (kind_a, params_a), (kind_b, params_b) = _signature(reference), _signature(model)
    fix = "replay the checkpoints of one training run (one architecture), with model= of that architecture"
    if kind_a != kind_b:
        raise ValueError(f"checkpoint {index} is a {kind_b} but checkpoint 0 is a {kind_a}; {fix}")
    for name in params_a.keys() | params_b.keys():
        if name not in params_b or name not in params_a:
            where = "lacks" if name not in params_b else "has an extra"
            raise ValueError(
                f"checkpoint {index} has a different architecture from checkpoint 0: it {where} "
                f"parameter {name!r}; {fix}"
            )
    for name, shape in params_a.items():
        if params_b[name] != shape:
            raise ValueError(
                f"checkpoint {index} has a different architecture from checkpoint 0: parameter "
                f"{name!r} has shape {params_b[name]} instead of {shape}; {fix}"
            )


def _check_directory_architecture(path: Path, template: nn.Module) -> None:
    """A Hugging Face checkpoint directory must hold the template's architecture (``from_pretrained`` would
    otherwise initialise mismatched weights at random, with a mere warning)."""
    config = getattr(template, "config", None)
    file = path / "config.json"
    if config is None or not file.is_file():
        return
    import json

    saved = json.loads(file.read_text())
    for key in ("model_type", "hidden_size", "n_embd", "num_hidden_layers", "n_layer", "vocab_size"):
        if key in saved and hasattr(config, key) and saved[key] != getattr(config, key):
            raise ValueError(
                f"checkpoint {str(path)!r} has {key} = {saved[key]!r} but model= has "
                f"{getattr(config, key)!r}: the checkpoints come from different architectures; replay "
                f"the checkpoints of one training run, with model= of that architecture"
            )


def replay(
    checkpoints: Sequence[Checkpoint],
    probe_texts: Sequence[str] | None,
    layers: Sequence[str | int],
    *,
    model: nn.Module | None = None,
    tokenizer=None,
    labels: Sequence[int] | None = None,
    batches: Sequence[Mapping[str, torch.Tensor]] | None = None,
    batch_size: int = 8,
    max_length: int | None = None,
    config: MonitorConfig | None = None,
    progress: bool = True,
    **overrides,
) -> GeometryLog:
    """Measure every checkpoint on a fixed probe batch; returns a :class:`GeometryLog` with ``x_label="checkpoint"``.

    Args:
        checkpoints: in training order: Hugging Face model directories, ``.safetensors`` / torch weight files
            (loaded with ``weights_only=True``), state dicts, or models.
        probe_texts: the fixed probe set (tokenised with ``tokenizer``), or None when ``batches`` is given.
        layers: layer specs, as for :class:`~interp_widgets.geometry.monitor.anisotropy_monitor.AnisotropyMonitor`.
        model: architecture template for state dicts and paths (never modified); also gives the task.
        tokenizer: tokenizer for ``probe_texts``.
        labels: class indices of the probe texts (sequence classifiers).
        batches: ready probe batches (dicts of model inputs with ``labels``), instead of texts.
        batch_size, max_length: tokenisation of the probe.
        config: the monitor's settings (:class:`~interp_widgets.geometry.monitor.config.MonitorConfig`), with
            ``**overrides`` by name as for the monitor. ``total_steps``, ``every`` and ``spectrum_every`` are the
            replay's own (the fit window counts checkpoints; every checkpoint is measured, with every metric) and
            are left unset. ``max_tokens`` caps rows per checkpoint (the same rows every time).
        progress: show a tqdm progress bar.

    Example:
        >>> import torch, transformers
        >>> config = transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=16)
        >>> models = [transformers.GPT2LMHeadModel(config) for _ in range(3)]
        >>> batch = {"input_ids": torch.randint(0, 50, (2, 8)), "attention_mask": torch.ones(2, 8, dtype=torch.long)}
        >>> batch["labels"] = batch["input_ids"]
        >>> record = replay(models, None, ["layer:0"], batches=[batch], rank=2, n_controls=5, progress=False)
        >>> record.x_label, record.steps.tolist(), record.series("fitting")[1].tolist()
        ('checkpoint', [0, 1, 2], [1.0, 0.0, 0.0])
    """
    from tqdm.auto import tqdm

    config = replay_config(config, overrides)
    checkpoints = list(checkpoints)
    if not checkpoints:
        raise ValueError("checkpoints is empty; pass the saved checkpoints in training order")
    template = model if model is not None else next((c for c in checkpoints if isinstance(c, nn.Module)), None)
    if template is None:
        raise ValueError("pass model= (a model of the checkpoints' architecture)")
    if batches is None:
        if probe_texts is None or tokenizer is None:
            raise ValueError("pass probe_texts= with tokenizer=, or ready batches=")
        batches = probe_batches(
            probe_texts,
            tokenizer,
            task_class(template),
            labels=labels,
            batch_size=batch_size,
            max_length=max_length,
            seed=config.seed,
        )
    elif probe_texts is not None:
        raise ValueError("pass either probe_texts or batches, not both")
    batches = [dict(batch) for batch in batches]
    if not batches or any("labels" not in batch for batch in batches):
        raise ValueError("every probe batch needs labels (the training loss is measured)")
    n = len(checkpoints)
    window = None
    reference = None  # the first checkpoint's architecture: every other one must match it
    if config.fit == "early":
        window = ProxySchedule("early", config.rank, total_steps=n, fit_fraction=config.fit_fraction).fit_window[1]
        fitter = AnisotropyMonitor(
            template, layers, config.with_overrides(total_steps=window, fit_fraction=1.0, representation=False)
        )
        bar = tqdm(total=window + n, disable=not progress, desc="replay")
        for index in range(window):
            loaded = _load_checkpoint(checkpoints[index], model)
            reference = loaded if reference is None else reference
            check_same_architecture(reference, loaded, index)
            _measure_checkpoint(fitter, loaded, batches, index)
            bar.update()
        fitter.fit_now()
        fixed = fitter.tangent_proxies()
        del fitter
        monitor = AnisotropyMonitor(
            template, layers, config.with_overrides(fit="fixed", basis=fixed, fit_fraction=None)
        )
        fraction = DEFAULT_FIT_FRACTION if config.fit_fraction is None else config.fit_fraction
        monitor.meta.update(fit="early", fit_fraction=fraction, fit_window=[0, window], total_steps=n)
    else:
        monitor = AnisotropyMonitor(template, layers, config)
        bar = tqdm(total=n, disable=not progress, desc="replay")
    try:
        for index, checkpoint in enumerate(checkpoints):
            loaded = _load_checkpoint(checkpoint, model)
            reference = loaded if reference is None else reference
            check_same_architecture(reference, loaded, index)
            _measure_checkpoint(monitor, loaded, batches, index)
            if window is not None:
                monitor.log(index, fitting=1.0 if index < window else 0.0)
            bar.update()
    finally:
        bar.close()
    return monitor.history.snapshot()


def replay_config(config: MonitorConfig | None, overrides) -> MonitorConfig:
    """The monitor settings of a replay: ``config`` with ``overrides``, measured at every checkpoint with every
    metric (``every=1``, ``spectrum_every=1``) and counted in checkpoints; ``total_steps``, ``every`` and
    ``spectrum_every`` are the replay's own, so setting them is refused.

    Example:
        >>> replay_config(None, {"rank": 4}).spectrum_every, replay_config(None, {}).x_label
        (1, 'checkpoint')
        >>> replay_config(None, {"total_steps": 10})
        Traceback (most recent call last):
        ...
        ValueError: replay sets total_steps itself (the fit window counts checkpoints); leave it unset
    """
    config = MonitorConfig.resolve(config, overrides)
    default = MonitorConfig()
    for name, why in (("total_steps", "the fit window counts checkpoints"), ("every", "every checkpoint is measured")):
        if getattr(config, name) != getattr(default, name):
            raise ValueError(f"replay sets {name} itself ({why}); leave it unset")
    if config.spectrum_every != default.spectrum_every:
        raise ValueError("replay sets spectrum_every itself (every metric at every checkpoint); leave it unset")
    return config.with_overrides(spectrum_every=1, x_label="checkpoint")


def _measure_checkpoint(monitor: AnisotropyMonitor, model: nn.Module, batches, index: int) -> None:
    """Forward and backward the probe batches through ``model`` (eval mode) and record checkpoint ``index``."""
    model.eval()
    device = next(model.parameters()).device
    monitor.attach(model)
    monitor.reseed()  # the same subsampled rows at every checkpoint
    with monitor:
        monitor.track(index)
        for batch in batches:
            outputs = model(**{key: value.to(device) for key, value in batch.items()})
            if getattr(outputs, "loss", None) is None:
                raise ValueError("the model returned no loss for a probe batch; include labels in every batch")
            outputs.loss.backward()
        monitor.step()
