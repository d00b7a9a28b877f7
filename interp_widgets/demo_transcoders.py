"""Transcoders for the embedded SmolLM2, trained on the shipped corpus and cached beside its dequantised weights.

``interp-widgets transcoders build`` (:func:`build_transcoders`) trains one TopK transcoder with a skip term per
layer of SmolLM2-135M-Instruct (:func:`~interp_widgets.demo.load_lm`) with
:meth:`~interp_widgets.circuits.TranscoderSet.fit`, from one forward pass over the train split of the shipped corpus
(:func:`~interp_widgets.demo.load_text_corpus`, shuffled; passes over it again with another shuffle when more
tokens are asked for than it holds), reports on held-out tokens of its test split
(:meth:`~interp_widgets.circuits.TranscoderSet.evaluate`), explains every feature by its top contexts over the first
200k training tokens (:meth:`~interp_widgets.circuits.TranscoderSet.explain`) and saves it all in the cache folder of
the dequantised model, ``<cache>/smollm2-v1-…/transcoders/<settings>/``: ``transcoders.safetensors``, ``report.json``,
``features.safetensors``, ``timings.json`` and ``build.json``. While it trains, ``checkpoint/`` holds the state after
the first window of the shuffle buffer and then every 10 minutes: rerun the same command after an interruption and it
resumes there (the checkpoint is deleted once the set is saved). :func:`load_transcoders` and
:func:`load_feature_explanations` read the cache, and say which command builds it when it is missing or corrupted.

The defaults (:data:`DEFAULT_BUILD`, ``transcoders-v4`` in the folder name's hash) aim at the budget of a 2-core CPU
(3 hours, 6 GB): 1M tokens (one pass over the train split) at 4,096 latents per layer, TopK k = 64 with a skip term
on every layer but layer 0, each window of the shuffle buffer trained on twice. Why, from experiments on 120k
training tokens of single layers (held-out on 20k test tokens; 2026-12-05):

- **k = 64** (v1–v3: 32). On layer 16, 8 passes: FVU 0.291 → 0.268 and a held-out dead fraction of 0.082 → 0.006.
  The v1 set (1M tokens, k = 32, trained before the encoder started centred) met the FVU goals (median 0.199, worst
  layer 0.286) but its middle layers missed "at most half the skip-only FVU" (11 layers above, the worst 0.574), and a
  median 39 % of each layer's features were silent on the 20k held-out tokens.
- **Two passes over each window.** The forward pass over the corpus costs about twice the 30 layers' steps at
  k = 32 (1.5 times at k = 64), so a second pass doubles the steps for about a third more time; on layer 16, doubling
  the steps (4 → 8 passes) took FVU from 0.326 to 0.291.
- **No skip term on layer 0**: see ``no_skip_layers``.
- The encoder starts centred on the input mean (since v3): features that point away from SmolLM2's large input mean
  otherwise never fire. Resampling silent features (``resample_rows``) and the auxiliary-k loss (``auxk_alpha``, 1.81
  times the time per step) are options, off by default: neither was needed at k = 64 on layer 16, and resampling
  hurt layer 28.

Expected time on a quiet 2-core machine: the fit at about 3 texts a second (v1, one pass at k = 32: 5.7), about two
hours for the 1M tokens, then the report's 61 spliced runs over 20k tokens and the explanations, each about a quarter
to half an hour. Per layer the trained weights are W_enc and W_dec (576 × 4,096 each), W_skip
(576 × 576) and the biases: 5.06M floats, 20 MB; over 30 layers 152M floats, 607 MB per copy. Training keeps five
copies (the weights, their gradients, Adam's two moments, the best weights so far): 3.0 GB, plus a copy of the
weights while a checkpoint is written. The model takes 0.54 GB and the shuffle buffer about 0.7 GB (4,096 + 1,024
tokens × 30 layers × (576 + 576) floats); v1 peaked at 5.5 GB. At 8,192 latents the five copies alone take 5.9 GB.

Example:
    >>> DEFAULT_BUILD.command()
    'interp-widgets transcoders build'

Not run here: the default build trains for hours::

    $ interp-widgets transcoders build
    python -c "from interp_widgets.demo_transcoders import load_transcoders; print(load_transcoders())"
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from interp_widgets.validation import check_int, check_number

SET_FILE = "transcoders.safetensors"
REPORT_FILE = "report.json"
BUILD_FILE = "build.json"
FEATURES_FILE = "features.safetensors"
TIMINGS_FILE = "timings.json"
CHECKPOINT_DIR = "checkpoint"
#: v4: k = 64, two passes over each window, no skip term on layer 0; v3: the encoder starts centred on the input mean (v2, never finished, also turned on the auxiliary-k loss)
_VERSION = "transcoders-v4"


@dataclasses.dataclass(frozen=True)
class TranscoderBuild:
    """The settings of a transcoder build (:func:`build_transcoders`); every default is :data:`DEFAULT_BUILD`'s.

    Args:
        tokens: training tokens (the train split holds about 1.24M; more tokens pass over it again, reshuffled).
        latents: features per layer.
        k: active features per token (TopK).
        layers: ``"all"`` or a tuple of block indices.
        skip: a linear skip term from the input to the output, on every layer but ``no_skip_layers``.
        no_skip_layers: layers trained without the skip term. Layer 0's MLP works as a lookup of the current token,
            which its features capture alone (held-out FVU 0.044 against the skip-only map's 0.104, k = 64); with a
            skip term, 46 % of its output went through the linear map, which a graph counts as error once the skip
            is folded into the error nodes, and layer 0's error nodes then held the largest share of the influence.
        lr, batch_size: Adam's learning rate and the rows per step.
        patience: windows without a 0.1 % better monitoring loss before a layer stops early.
        buffer_tokens: token rows per layer in the shuffle buffer (one window).
        window_passes: times each window is trained on (:meth:`~interp_widgets.circuits.TranscoderSet.fit`): the
            forward pass costs more than the steps, so a second pass doubles the steps for about a third more time.
        max_batch_tokens: tokens per forward pass (a window may exceed ``buffer_tokens`` by this many).
        resample_rows: at a window's end, features that have not fired for this many training rows (over the
            windows; each pass counts) restart from the window's worst reconstructed tokens, with fresh Adam moments
            (0: never, the default). Counting silence per window instead would resample every rare feature. Measured
            on 120k tokens of one layer, 8 passes (held-out dead fraction on 20k tokens, FVU): at 80k rows it helped
            layer 16 at k = 32 (0.125 → 0.046, FVU 0.326 → 0.326) but hurt layer 28, whose skip term leaves little
            to reconstruct, at k = 64 (0.303 → 0.524); k = 64 alone left layer 16 with 0.02 dead.
        resample_until: the fraction of the training rows after which resampling stops, so that the last resampled
            features have time to settle.
        auxk_alpha, dead_rows: the auxiliary-k loss (:class:`~interp_widgets.concepts.training.TrainingConfig`): the
            features that have not fired for ``dead_rows`` training tokens learn to reconstruct the residual, which
            gives them a gradient again (0: off, the default; see the module docstring for its measured cost).
        eval_tokens: held-out tokens of the report.
        explain_tokens: training tokens whose top activating contexts explain the features (0: no explanations).
        seed: the seed of the corpus shuffle and of the training.

    Example:
        >>> TranscoderBuild(tokens=2000, latents=64, layers=(0, 1)).folder_name()
        'topk64-skip-64x2-2000tok-3b6e772a'
        >>> TranscoderBuild(k=128, latents=64)
        Traceback (most recent call last):
        ...
        ValueError: k must be between 1 and latents=64, got 128
    """

    tokens: int = 1_000_000
    latents: int = 4096
    k: int = 64
    layers: str | tuple[int, ...] = "all"
    skip: bool = True
    no_skip_layers: tuple[int, ...] = (0,)
    lr: float = 1e-3
    batch_size: int = 512
    patience: int = 50
    buffer_tokens: int = 4096
    window_passes: int = 2
    max_batch_tokens: int = 1024
    resample_rows: int = 0
    resample_until: float = 0.7
    auxk_alpha: float = 0.0
    dead_rows: int = 20_000
    eval_tokens: int = 20_000
    explain_tokens: int = 200_000
    seed: int = 0

    def __post_init__(self) -> None:
        for name in (
            "tokens",
            "latents",
            "k",
            "batch_size",
            "patience",
            "buffer_tokens",
            "window_passes",
            "max_batch_tokens",
            "dead_rows",
        ):
            check_int(name, getattr(self, name), minimum=1)
        check_int("resample_rows", self.resample_rows, minimum=0)
        check_number("resample_until", self.resample_until, minimum=0, maximum=1)
        check_int("eval_tokens", self.eval_tokens, minimum=1)
        check_int("explain_tokens", self.explain_tokens, minimum=0)
        check_int("seed", self.seed, minimum=0)
        check_number("auxk_alpha", self.auxk_alpha, minimum=0)
        if self.k > self.latents:
            raise ValueError(f"k must be between 1 and latents={self.latents}, got {self.k}")
        if isinstance(self.no_skip_layers, str) or not all(isinstance(i, int) and i >= 0 for i in self.no_skip_layers):
            raise ValueError(f"no_skip_layers must be a tuple of block indices >= 0, got {self.no_skip_layers!r}")
        object.__setattr__(self, "no_skip_layers", tuple(sorted(set(self.no_skip_layers))))
        if self.layers != "all":
            if isinstance(self.layers, str) or not all(isinstance(i, int) and i >= 0 for i in self.layers):
                raise ValueError(f"layers must be 'all' or a tuple of block indices >= 0, got {self.layers!r}")
            object.__setattr__(self, "layers", tuple(sorted(set(self.layers))))
            if not self.layers:
                raise ValueError("layers must name at least one block; pass 'all' for every block")

    def folder_name(self) -> str:
        """The cache folder's name: the main settings, then a hash of all of them."""
        digest = hashlib.sha256(json.dumps([_VERSION, dataclasses.asdict(self)], sort_keys=True).encode())
        layers = "all" if self.layers == "all" else str(len(self.layers))
        skip = "-skip" if self.skip else ""
        return f"topk{self.k}{skip}-{self.latents}x{layers}-{self.tokens}tok-{digest.hexdigest()[:8]}"

    def command(self, out: str | Path | None = None, *, rebuild: bool = False) -> str:
        """The ``interp-widgets transcoders build`` command line of these settings (the Python call when a setting
        differs that the command line does not take).

        Example:
            >>> TranscoderBuild(tokens=2000, layers=(0, 1)).command()
            'interp-widgets transcoders build --tokens 2000 --layers 0,1'
            >>> TranscoderBuild(lr=3e-4).command()
            'interp_widgets.demo_transcoders.build_transcoders(lr=0.0003)'
        """
        flags = ("tokens", "latents", "k", "eval_tokens", "explain_tokens")
        changed = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                   if getattr(self, f.name) != getattr(DEFAULT_BUILD, f.name)}  # fmt: skip
        if set(changed) - {*flags, "layers"}:
            if out is not None:
                changed["out"] = str(out)
            if rebuild:
                changed["rebuild"] = True
            return f"interp_widgets.demo_transcoders.build_transcoders({', '.join(f'{k}={v!r}' for k, v in changed.items())})"
        parts = ["interp-widgets transcoders build"]
        parts += [f"--{name.replace('_', '-')} {changed[name]}" for name in flags if name in changed]
        if "layers" in changed:
            parts.append("--layers " + ",".join(map(str, self.layers)))
        if out is not None:
            parts.append(f"--out {json.dumps(str(out))}")
        if rebuild:
            parts.append("--rebuild")
        return " ".join(parts)


#: the default build: 1M tokens, 4,096 latents per layer, TopK 64 with a skip term, every layer
DEFAULT_BUILD = TranscoderBuild()
#: the tour notebook's stand-in where the default set is not built: minutes on 2 cores, coarser features
QUICK_BUILD = TranscoderBuild(tokens=40_000, latents=1024, eval_tokens=2_000, explain_tokens=20_000)


@dataclasses.dataclass
class BuiltTranscoders:
    """What :func:`build_transcoders` returns: the set, its report on held-out tokens and the folder they are in."""

    transcoders: object
    report: object
    path: Path
    resumed: bool = False
    #: the features' top contexts, vocabulary projections and labels (:class:`~interp_widgets.circuits.
    #: FeatureExplanations`; None with ``explain_tokens=0``)
    explanations: object = None
    #: seconds of each stage (fit, summed over resumed runs; report; explain) and the finishing run's peak RSS
    timings: dict = dataclasses.field(default_factory=dict)


def _settings(settings: TranscoderBuild | None, overrides: dict) -> TranscoderBuild:
    base = settings if settings is not None else DEFAULT_BUILD
    if not isinstance(base, TranscoderBuild):
        raise TypeError(f"settings must be a TranscoderBuild, got {base!r}")
    unknown = set(overrides) - {f.name for f in dataclasses.fields(TranscoderBuild)}
    if unknown:
        raise TypeError(f"unknown build settings {sorted(unknown)}; the settings are TranscoderBuild's fields")
    if isinstance(overrides.get("layers"), (list, int)):
        layers = overrides["layers"]
        overrides = {**overrides, "layers": (layers,) if isinstance(layers, int) else tuple(layers)}
    return dataclasses.replace(base, **overrides) if overrides else base


def transcoders_path(settings: TranscoderBuild | None = None, **overrides) -> Path:
    """The folder of a build's files in the cache, beside SmolLM2's dequantised weights.

    Example:
        >>> from interp_widgets.demo.lm import gguf_cache_path, gguf_path
        >>> path = transcoders_path(tokens=2000)
        >>> path.parent == gguf_cache_path(gguf_path()) / "transcoders", path.name.startswith("topk64-skip-4096xall-2000tok-")
        (True, True)
    """
    from interp_widgets.demo.lm import gguf_cache_path, gguf_path

    return gguf_cache_path(gguf_path()) / "transcoders" / _settings(settings, overrides).folder_name()


def training_texts(tokenizer, tokens: int, *, seed: int = 0) -> list[str]:
    """Paragraphs of the train split, shuffled with ``seed``, until they hold at least ``tokens`` tokens; past the
    end of the split it starts again, shuffled with ``seed + 1`` (then ``seed + 2``, ...).

    Example:
        >>> texts = training_texts(lm_tokenizer, 500)
        >>> total = sum(len(lm_tokenizer(t).input_ids) for t in texts)
        >>> total >= 500, total - len(lm_tokenizer(texts[-1]).input_ids) < 500
        (True, True)
    """
    from interp_widgets.demo.text_corpus import load_text_corpus

    check_int("tokens", tokens, minimum=1)
    out: list[str] = []
    total, rounds = 0, 0
    while total < tokens:
        paragraphs = load_text_corpus("train", seed=seed + rounds)
        rounds += 1
        for start in range(0, len(paragraphs), 512):
            chunk = paragraphs[start : start + 512]
            for text, ids in zip(chunk, tokenizer(chunk).input_ids):
                out.append(text)
                total += len(ids)
                if total >= tokens:
                    return out
    return out


def build_transcoders(
    settings: TranscoderBuild | None = None,
    *,
    out: str | Path | None = None,
    rebuild: bool = False,
    progress: bool = True,
    model=None,
    tokenizer=None,
    callback: Callable[[int], None] | None = None,
    checkpoint_every: float = 600.0,
    **overrides,
) -> BuiltTranscoders:
    """Train, evaluate, explain and cache the transcoder set of the embedded SmolLM2 (``interp-widgets transcoders
    build``).

    Args:
        settings, **overrides: a :class:`TranscoderBuild` (default :data:`DEFAULT_BUILD`) and fields to change
            (``tokens=``, ``latents=``, ``k=``, ``layers=`` ...).
        out: the folder of the build (default :func:`transcoders_path`, in the cache).
        rebuild: train again even if the folder holds a set.
        progress: progress bars.
        model, tokenizer: SmolLM2 already loaded with :func:`~interp_widgets.demo.load_lm` (default: load it).
        callback: passed to :meth:`~interp_widgets.circuits.TranscoderSet.fit` (called after every step; an
            exception it raises stops the build, which the next call resumes from the last checkpoint).
        checkpoint_every: seconds between checkpoints (the first and the last window are always written; a
            SmolLM2 checkpoint takes about 15 s): an interruption loses at most this much training.

    The steps, each saved as it ends so that a rerun after an interruption goes on from the first one missing:
    :meth:`~interp_widgets.circuits.TranscoderSet.fit` on ``tokens`` train-split tokens (resumed from ``checkpoint/``;
    the set is written atomically and the checkpoint deleted), :meth:`~interp_widgets.circuits.TranscoderSet.evaluate`
    on ``eval_tokens`` test-split tokens (``report.json``), :meth:`~interp_widgets.circuits.TranscoderSet.explain` on
    the first ``explain_tokens`` training tokens (``features.safetensors``, read back by
    :func:`load_feature_explanations`). ``timings.json`` records the set's checksum, the seconds of each step (fit
    summed over resumed runs) and the peak RSS of the last run that computed a step; a report or explanations
    recorded for another set (a corrupted set trained again) are computed again. ``rebuild`` deletes all of them
    first.

    Example (not run here: a real build trains for hours; ``tests/circuits/test_transcoder_build.py`` builds tiny ones)::

        built = build_transcoders(tokens=2000, latents=64, layers=[0, 1])
        built.report.to_dataframe()
    """
    from interp_widgets.circuits import FeatureExplanations, TranscoderReport
    from interp_widgets.demo.text_corpus import load_text_corpus

    s = _settings(settings, overrides)
    path = Path(out) if out is not None else transcoders_path(s)
    if rebuild:
        for name in (SET_FILE, REPORT_FILE, FEATURES_FILE, TIMINGS_FILE):
            (path / name).unlink(missing_ok=True)
    transcoders = None
    if (path / SET_FILE).exists():
        try:
            transcoders = load_transcoders(path=path, settings=s)
        except (ValueError, FileNotFoundError, OSError):
            pass  # unreadable: train again (from the checkpoint if there is one)
    resumed = False
    missing = transcoders is None or not (path / REPORT_FILE).is_file()
    if (missing or (s.explain_tokens and not (path / FEATURES_FILE).is_file())) and (
        model is None or tokenizer is None
    ):
        from interp_widgets.demo.lm import load_lm

        model, tokenizer = load_lm(progress=progress)
    if transcoders is None:
        transcoders, resumed, fit_seconds = _fit_set(s, path, model, tokenizer, progress, callback, checkpoint_every)
        timings = {"set_checksum": transcoders.checksum(), "fit_seconds": fit_seconds}
        _write_timings(path, timings)
    else:
        timings = _timings_of(path, transcoders.checksum())
    report = _load_step(path / REPORT_FILE, "report_seconds", timings, TranscoderReport.load)
    if report is None:
        clock = time.perf_counter()
        report = transcoders.evaluate(model, tokenizer, load_text_corpus("test"), max_tokens=s.eval_tokens,
                                      max_batch_tokens=s.max_batch_tokens, progress=progress)  # fmt: skip
        report.save(path / REPORT_FILE)
        timings["report_seconds"] = round(time.perf_counter() - clock, 1)
        _write_timings(path, timings)
    explanations = None
    if s.explain_tokens:
        explanations = _load_step(path / FEATURES_FILE, "explain_seconds", timings, FeatureExplanations.load)
        if explanations is None:
            clock = time.perf_counter()
            texts = training_texts(tokenizer, s.explain_tokens, seed=s.seed)
            explanations = transcoders.explain(model, tokenizer, texts, max_batch_tokens=s.max_batch_tokens,
                                               progress=progress)  # fmt: skip
            explanations.save(path / FEATURES_FILE)
            timings["explain_seconds"] = round(time.perf_counter() - clock, 1)
            _write_timings(path, timings)
    return BuiltTranscoders(transcoders, report, path, resumed=resumed, explanations=explanations, timings=timings)


def _fit_set(s: TranscoderBuild, path: Path, model, tokenizer, progress: bool, callback, checkpoint_every: float):
    """Fit the set of build ``s`` (resuming from ``path``'s checkpoint), save it atomically and delete the
    checkpoint; returns the set, whether it resumed and the fit's seconds (summed over resumed runs)."""
    from interp_widgets.circuits import TranscoderSet
    from interp_widgets.circuits.transcoders import _layers_of
    from interp_widgets.concepts import Transcoder
    from interp_widgets.concepts.training import TrainingConfig

    path.mkdir(parents=True, exist_ok=True)
    for stale in (REPORT_FILE, FEATURES_FILE, TIMINGS_FILE):  # they described another set
        (path / stale).unlink(missing_ok=True)
    (path / BUILD_FILE).write_text(json.dumps({"version": _VERSION, **dataclasses.asdict(s)}, indent=2))
    texts = training_texts(tokenizer, s.tokens, seed=s.seed)
    training = TrainingConfig(lr=s.lr, batch_size=s.batch_size, max_epochs=10**9, patience=s.patience,
                              resample_dead=s.resample_rows > 0, resample_rows=s.resample_rows,
                              resample_stop_rows=max(1, int(s.resample_until * s.tokens * s.window_passes)),
                              auxk_alpha=s.auxk_alpha, dead_rows=s.dead_rows,
                              seed=s.seed, progress=progress)  # fmt: skip
    layers = _layers_of(model, "all" if s.layers == "all" else list(s.layers))
    templates = {layer: Transcoder(s.latents, activation="topk", k=s.k, skip=s.skip and layer not in s.no_skip_layers,
                                   training=training) for layer in layers}  # fmt: skip
    checkpoint = path / CHECKPOINT_DIR
    resumed = (checkpoint / "checkpoint.safetensors").exists()
    transcoders = TranscoderSet.fit(model, tokenizer, texts, layers,
                                    transcoder=templates, buffer_tokens=s.buffer_tokens, window_passes=s.window_passes,
                                    checkpoint_dir=checkpoint,
                                    checkpoint_every=checkpoint_every, max_batch_tokens=s.max_batch_tokens,
                                    callback=callback)  # fmt: skip
    tmp = path / (SET_FILE + ".partial")
    transcoders.save(tmp)
    os.replace(tmp, path / SET_FILE)
    shutil.rmtree(checkpoint, ignore_errors=True)
    return transcoders, resumed, transcoders.fit_seconds


def _timings_of(path: Path, checksum: str) -> dict:
    """The build's ``timings.json`` when it belongs to the set of this ``checksum`` (its report and explanations
    were computed from that set); otherwise a fresh record, and the files of the other set are deleted."""
    try:
        timings = json.loads((path / TIMINGS_FILE).read_text())
    except (OSError, ValueError):
        timings = None
    if not isinstance(timings, dict) or timings.get("set_checksum") != checksum:
        for stale in (REPORT_FILE, FEATURES_FILE):
            (path / stale).unlink(missing_ok=True)
        timings = {"set_checksum": checksum}
    return timings


def _load_step(file: Path, key: str, timings: dict, load):
    """A step's saved output (None: run it): read when ``timings`` records the step and ``file`` is readable."""
    if key not in timings or not file.is_file():
        return None
    try:
        return load(file)
    except (ValueError, OSError, KeyError, TypeError):
        return None


def _write_timings(path: Path, timings: dict) -> None:
    """Write ``timings.json`` atomically, with the peak RSS of this run (the last run that computed a step)."""
    timings["peak_rss_gb"] = _peak_rss_gb()
    tmp = path / (TIMINGS_FILE + ".partial")
    tmp.write_text(json.dumps(timings, indent=2))
    os.replace(tmp, path / TIMINGS_FILE)


def _peak_rss_gb() -> float | None:
    """This process's peak resident memory in GB (None where the platform does not say: Windows)."""
    try:
        import resource
    except ImportError:
        return None
    kilobytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux, bytes on macOS
    return round(kilobytes / (2**30 if sys.platform == "darwin" else 2**20), 2)


def load_feature_explanations(settings: TranscoderBuild | None = None, *, path: str | Path | None = None, **overrides):
    """The feature explanations of a cached build (top contexts over its training tokens, vocabulary projections,
    labels), as :class:`~interp_widgets.circuits.FeatureExplanations`; attach them to a graph with
    ``graph.with_explanations(...)``.

    Args:
        settings, **overrides, path: which build, as in :func:`load_transcoders`.

    Example:
        >>> load_feature_explanations(path=getfixture("tmp_path"))
        Traceback (most recent call last):
        ...
        FileNotFoundError: no feature explanations in ...; build them with: interp-widgets transcoders build --out ...
    """
    from interp_widgets.circuits import FeatureExplanations

    s = _settings(settings, overrides)
    folder = Path(path) if path is not None else transcoders_path(s)
    file = folder / FEATURES_FILE
    if not file.is_file():
        raise FileNotFoundError(f"no feature explanations in {folder}; build them with: {s.command(out=path)}")
    try:
        return FeatureExplanations.load(file)
    except (ValueError, OSError, KeyError, TypeError) as err:
        raise ValueError(
            f"the cached feature explanations {file} are corrupted ({err}); build them again with: "
            f"{s.command(out=path, rebuild=True)}"
        ) from None


def tour_transcoders(model=None, tokenizer=None, *, progress: bool = True) -> BuiltTranscoders:
    """The transcoders of the tour notebook: the default build (:data:`DEFAULT_BUILD`) when it is cached, else
    :data:`QUICK_BUILD`, built on first use (minutes) and cached, so that the notebook runs anywhere; ``.path``
    says which.

    Example (not run here: the first call trains the quick set)::

        built = tour_transcoders(model, tokenizer)
        built.path.name, built.transcoders
    """
    default = transcoders_path(DEFAULT_BUILD)
    chosen = DEFAULT_BUILD if (default / SET_FILE).is_file() else QUICK_BUILD
    return build_transcoders(chosen, model=model, tokenizer=tokenizer, progress=progress)


def load_transcoders(
    settings: TranscoderBuild | None = None, *, path: str | Path | None = None, model=None, **overrides
):
    """The transcoder set cached by ``interp-widgets transcoders build`` (:func:`build_transcoders`).

    Args:
        settings, **overrides: the build's settings (default :data:`DEFAULT_BUILD`), which name its folder.
        path: the build's folder instead (its ``--out``).
        model: refuse the set if it was not made for this model (:meth:`~interp_widgets.circuits.TranscoderSet.
            check_model`).

    A missing set raises a FileNotFoundError and a corrupted one a ValueError; both name the command that builds it.

    Example:
        >>> load_transcoders(path=getfixture("tmp_path"))
        Traceback (most recent call last):
        ...
        FileNotFoundError: no transcoders in ...; build them with: interp-widgets transcoders build --out ...
    """
    from interp_widgets.circuits import TranscoderSet

    s = _settings(settings, overrides)
    folder = Path(path) if path is not None else transcoders_path(s)
    if path is not None and (folder / BUILD_FILE).is_file() and settings is None and not overrides:
        try:
            recorded = json.loads((folder / BUILD_FILE).read_text())
            recorded.pop("version", None)
            recorded["layers"] = recorded["layers"] if recorded["layers"] == "all" else tuple(recorded["layers"])
            s = TranscoderBuild(**recorded)
        except (ValueError, TypeError, KeyError):
            pass
    command, again = s.command(out=path), s.command(out=path, rebuild=True)
    file = folder / SET_FILE
    if not file.is_file():
        hint = " (an interrupted build resumes from its checkpoint)" if (folder / CHECKPOINT_DIR).exists() else ""
        raise FileNotFoundError(f"no transcoders in {folder}; build them with: {command}{hint}")
    try:
        transcoders = TranscoderSet.load(file)
    except (ValueError, OSError, KeyError, TypeError) as err:
        raise ValueError(
            f"the cached transcoders {file} are corrupted ({err}); build them again with: {again}"
        ) from None
    if model is not None:
        transcoders.check_model(model)
    return transcoders


def report_text(report) -> str:
    """The per-layer report as plain text: FVU, the skip-only baseline's FVU, their ratio, L0, the dead fraction
    and the next-token loss change with the layer spliced in, then the medians against the build's goals (median
    FVU ≤ 0.3, every layer ≤ 0.5 and at most half its skip-only FVU, dead fraction ≤ 0.1).

    Example:
        >>> from interp_widgets.circuits import TranscoderReport
        >>> report = TranscoderReport([0, 1], {"fvu": [0.2, 0.25], "skip_fvu": [0.5, 0.6], "l0": [32.0, 32.0],
        ...                           "dead_fraction": [0.0, 0.05]}, 3.0, [3.1, 3.2], [4.0, 4.0], 100)
        >>> print(report_text(report))  # doctest: +NORMALIZE_WHITESPACE
        layer   fvu  skip_fvu  fvu_ratio   l0  dead_fraction  loss_delta
            0 0.200     0.500      0.400 32.0          0.000       0.100
            1 0.250     0.600      0.417 32.0          0.050       0.200
        100 held-out tokens, clean loss 3.000: median FVU 0.225 (goal <= 0.3), worst 0.250 (goal <= 0.5), worst
        FVU / skip-only FVU 0.417 (goal <= 0.5), worst dead fraction 0.050 (goal <= 0.1): every goal met
    """
    import numpy as np

    frame = report.to_dataframe()
    columns = ["layer", "fvu", "skip_fvu", "fvu_ratio", "l0", "dead_fraction", "loss_delta"]
    table = frame[columns].to_string(
        index=False, formatters={"l0": "{:.1f}".format, **{c: "{:.3f}".format for c in columns[1:] if c != "l0"}}
    )
    checks = [
        ("median FVU", float(np.median(frame["fvu"])), 0.3),
        ("worst", float(frame["fvu"].max()), 0.5),
        ("worst FVU / skip-only FVU", float(frame["fvu_ratio"].max()), 0.5),
        ("worst dead fraction", float(frame["dead_fraction"].max()), 0.1),
    ]
    missed = [name for name, value, goal in checks if value > goal]
    summary = ", ".join(f"{name} {value:.3f} (goal <= {goal})" for name, value, goal in checks)
    verdict = "every goal met" if not missed else "missed: " + ", ".join(missed)
    return f"{table}\n{report.tokens} held-out tokens, clean loss {report.loss_clean:.3f}: {summary}: {verdict}"
