"""A real English text corpus for language-model work: the prose of the Python 3.11 documentation.

``interp_widgets/demo/data/python_docs_part_*.jsonl.gz`` holds the paragraphs of 491 pages of the Python 3.11
documentation (the tutorial, the library and language references, the HOWTOs, the FAQs, "What's New", the C API),
extracted from Debian's ``python3.11-doc`` by ``scripts/build_text_corpus.py``: markup, code blocks, tables,
signatures, navigation and index pages stripped, short or code-heavy paragraphs and paragraphs with web addresses
dropped, duplicates removed. About 1.37 million SmolLM2 tokens (:func:`text_corpus_info` has the exact counts).
Licence: the PSF License Agreement (``PYTHON_DOCS_LICENSE.txt`` beside the data).

The held-out split is by document: a page is ``"test"`` when the SHA-256 of its name falls in the lowest 10 %, so the
split is the same on every machine and does not move when pages are added or removed.

Example:
    >>> from interp_widgets.demo import load_text_corpus, text_corpus_info
    >>> train, test = load_text_corpus("train"), load_text_corpus("test")
    >>> len(train), len(test)
    (29390, 3116)
    >>> test[0][:69]
    'The functions in this chapter interact with Python objects regardless'
    >>> text_corpus_info()["tokens"]
    1374246
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from pathlib import Path

from interp_widgets.validation import check_choice, check_int

DATA_DIR = Path(__file__).resolve().parent / "data"
MANIFEST = DATA_DIR / "python_docs.json"
SPLITS = ("train", "test")
UNITS = ("paragraph", "document", "record")


def text_corpus_info() -> dict:
    """What the shipped corpus holds, as recorded by its build script: source package, licence, and the numbers of
    documents, paragraphs, characters, words and SmolLM2 tokens (``tokens``, ``train_tokens``, ``test_tokens``,
    ``token_types``), with the SHA-256 of each data file.

    Example:
        >>> info = text_corpus_info()
        >>> info["documents"], info["test_documents"], info["paragraphs"], info["token_types"]
        (491, 46, 32506, 17861)
        >>> info["licence"].split()[0], info["tokens"] >= 1_000_000
        ('PSF-2.0', True)
    """
    if not MANIFEST.is_file():
        raise FileNotFoundError(
            f"no text corpus in {DATA_DIR}; the installation is incomplete (reinstall "
            "interp-widgets, or rebuild it with scripts/build_text_corpus.py)"
        )
    return json.loads(MANIFEST.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _records() -> tuple[dict, ...]:
    info = text_corpus_info()
    records = []
    for name, expected in sorted(info["files"].items()):
        path = DATA_DIR / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: the installation is incomplete; reinstall interp-widgets")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != expected["sha256"]:
            raise ValueError(
                f"{path} does not match its checksum in {MANIFEST.name}; it was changed or truncated. "
                "Reinstall interp-widgets or rebuild the corpus with scripts/build_text_corpus.py"
            )
        records += [json.loads(line) for line in gzip.decompress(data).decode("utf-8").splitlines()]
    return tuple(records)


def load_text_corpus(split: str | None = None, *, unit: str = "paragraph", seed: int | None = None) -> list:
    """The shipped English corpus (prose of the Python 3.11 documentation, PSF licence) as a list.

    Args:
        split: ``"train"`` (445 documents), ``"test"`` (46 held-out documents) or ``None`` for all.
        unit: ``"paragraph"`` (one string per paragraph, the default), ``"document"`` (one string per page, its
            paragraphs joined by blank lines) or ``"record"`` (one dict per page: ``id``, ``title``, ``split``,
            ``paragraphs``).
        seed: ``None`` keeps the stored order (pages sorted by name, paragraphs in page order); an integer shuffles
            the items with that seed, so ``load_text_corpus("train", seed=0)[:200]`` is a varied sample.

    Example:
        >>> paragraphs = load_text_corpus("train", seed=0)
        >>> len(paragraphs), paragraphs[0][:60]
        (29390, 'If True, any defects encountered will be raised as errors. I')
        >>> page = load_text_corpus("test", unit="record")[0]
        >>> page["id"], page["title"], len(page["paragraphs"])
        ('c-api/abstract', 'Abstract Objects Layer', 2)
        >>> load_text_corpus("dev")
        Traceback (most recent call last):
        ...
        ValueError: unknown split 'dev'; use 'train', 'test' or None
    """
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use 'train', 'test' or None")
    check_choice("unit", unit, UNITS)
    if seed is not None:
        check_int("seed", seed, minimum=0)
    records = [r for r in _records() if split is None or r["split"] == split]
    if unit == "paragraph":
        items: list = [p for r in records for p in r["paragraphs"]]
    elif unit == "document":
        items = ["\n\n".join(r["paragraphs"]) for r in records]
    else:
        items = [{**r, "paragraphs": list(r["paragraphs"])} for r in records]
    if seed is not None:
        import numpy as np

        order = np.random.default_rng(seed).permutation(len(items))
        items = [items[i] for i in order]
    return items
