"""The shipped English corpus (prose of the Python 3.11 documentation): its size in SmolLM2 tokens, its licence,
its held-out split, that it is clean prose, and the build script's extraction rules on a hand-made Sphinx page."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from interp_widgets import demo
from interp_widgets.demo import text_corpus

REPO = Path(__file__).resolve().parents[2]


def _build_script():
    spec = importlib.util.spec_from_file_location("build_text_corpus", REPO / "scripts" / "build_text_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recorded_counts_match_the_data_and_smollm2_tokens(smollm2):
    _, tokenizer = smollm2
    info = demo.text_corpus_info()
    records = demo.load_text_corpus(unit="record")
    paragraphs = demo.load_text_corpus()
    assert len(records) == info["documents"] and len(paragraphs) == info["paragraphs"]
    assert sum(r["split"] == "test" for r in records) == info["test_documents"]
    assert sum(map(len, paragraphs)) == info["characters"]
    ids = tokenizer(paragraphs, add_special_tokens=False)["input_ids"]
    assert sum(map(len, ids)) == info["tokens"] >= 1_000_000
    assert len({t for row in ids for t in row}) == info["token_types"]
    test_ids = tokenizer(demo.load_text_corpus("test"), add_special_tokens=False)["input_ids"]
    assert sum(map(len, test_ids)) == info["test_tokens"] == info["tokens"] - info["train_tokens"]


def test_licence_and_files_are_shipped_as_recorded():
    info = demo.text_corpus_info()
    assert info["licence"].startswith("PSF-2.0") and "python3.11-doc" in info["source"]
    licence = (text_corpus.DATA_DIR / "PYTHON_DOCS_LICENSE.txt").read_text(encoding="utf-8")
    assert "\n1. This LICENSE AGREEMENT is between the Python Software Foundation" in licence
    assert "Summary of the changes made" in licence
    assert "Copyright © 2001-2023 Python Software Foundation; All Rights Reserved" in licence
    for name, entry in info["files"].items():
        data = (text_corpus.DATA_DIR / name).read_bytes()
        assert len(data) == entry["bytes"] < 10_000_000
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    readme = (text_corpus.DATA_DIR / "README.md").read_text(encoding="utf-8")
    assert "PSF" in readme and "scripts/build_text_corpus.py" in readme


def test_split_is_by_document_hash_and_stable():
    records = demo.load_text_corpus(unit="record")
    build = _build_script()
    assert all(r["split"] == build.split_of(r["id"]) for r in records)
    test_ids = {r["id"] for r in records if r["split"] == "test"}
    assert 0.05 < len(test_ids) / len(records) < 0.15
    train, test = demo.load_text_corpus("train"), demo.load_text_corpus("test")
    assert not set(train) & set(test)
    assert len(train) + len(test) == len(demo.load_text_corpus())
    documents = demo.load_text_corpus("test", unit="document")
    assert len(documents) == len(test_ids) and sum(d.count("\n\n") + 1 for d in documents) == len(test)
    shuffled = demo.load_text_corpus("train", seed=3)
    assert shuffled == demo.load_text_corpus("train", seed=3) != train and sorted(shuffled) == sorted(train)


def test_corpus_is_deduplicated_english_prose_not_the_sentiment_sentences():
    paragraphs = demo.load_text_corpus()
    assert len({p.casefold() for p in paragraphs}) == len(paragraphs)
    assert not set(paragraphs) & set(demo.corpus())
    assert all(len(p.split()) >= 8 and p == " ".join(p.split()) for p in paragraphs)  # one line, normalised spaces
    assert not [p for p in paragraphs if "¶" in p or "http://" in p or "https://" in p or p.startswith(">>>")]
    words = Counter(w.casefold() for p in paragraphs for w in p.split())
    assert [w for w, _ in words.most_common(3)] == ["the", "a", "to"]
    titles = {r["id"]: r["title"] for r in demo.load_text_corpus(unit="record")}
    assert titles["tutorial/classes"] == "9. Classes"


def test_bad_arguments_and_a_damaged_file_name_the_fix(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown split 'dev'; use 'train', 'test' or None"):
        demo.load_text_corpus("dev")
    with pytest.raises(ValueError, match="unknown unit 'sentence'"):
        demo.load_text_corpus(unit="sentence")
    copy = tmp_path / "data"
    shutil.copytree(text_corpus.DATA_DIR, copy)
    part = sorted(copy.glob("python_docs_part_*.jsonl.gz"))[0]
    part.write_bytes(part.read_bytes()[:-100])
    monkeypatch.setattr(text_corpus, "DATA_DIR", copy)
    monkeypatch.setattr(text_corpus, "MANIFEST", copy / "python_docs.json")
    text_corpus._records.cache_clear()
    try:
        with pytest.raises(ValueError, match="does not match its checksum.*Reinstall interp-widgets"):
            demo.load_text_corpus()
        part.unlink()
        with pytest.raises(FileNotFoundError, match="is missing: the installation is incomplete"):
            demo.load_text_corpus()
        (copy / "python_docs.json").unlink()
        with pytest.raises(FileNotFoundError, match="no text corpus in"):
            demo.text_corpus_info()
    finally:
        text_corpus._records.cache_clear()


PAGE = """<!DOCTYPE html><html><head><title>t</title></head><body>
<div class="related" role="navigation"><p>Navigation bar text that should never be part of the corpus at all.</p></div>
<div class="body" role="main"><section>
<h1><code class="xref py py-mod">frob</code> — Frobnicate things<a class="headerlink" href="#x">¶</a></h1>
<p><strong>Source code:</strong> <a href="x">Lib/frob.py</a></p>
<p>The <code class="docutils literal"><span class="pre">frob</span></code> module turns ordinary
   objects into frobnicated objects, which behave almost like the originals.</p>
<div class="highlight-python3"><div class="highlight"><pre>&gt;&gt;&gt; frob.frob(1)
a code block that is long enough to count as a paragraph if it were one</pre></div></div>
<dl class="py function"><dt class="sig sig-object py">frob.frob(<em>x</em>)<a class="headerlink">¶</a></dt>
<dd><p>Return a frobnicated copy of the object, leaving the original object untouched.</p>
<div class="admonition note"><p class="admonition-title">Note</p>
<p>Frobnication is idempotent: frobnicating a frobnicated object again changes nothing.</p></div></dd></dl>
<table><tr><td><p>A table cell with a sentence that is long enough to be kept as prose.</p></td></tr></table>
<p>Too short to keep.</p>
<p><code>frob(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q)</code> is valid.</p>
<p>See the project page at https://example.org/frob for more background on frobnication.</p>
<p>The FROB module turns ordinary objects into frobnicated objects,   which behave almost like the originals.</p>
</section></div>
<div class="footer"><p>Footer text about copyright and the Python Software Foundation here.</p></div>
</body></html>"""


def test_build_script_keeps_prose_and_strips_code_tables_navigation(tmp_path):
    build = _build_script()
    root = tmp_path / "html"
    (root / "library").mkdir(parents=True)
    (root / "library" / "frob.html").write_text(PAGE, encoding="utf-8")
    (root / "genindex-F.html").write_text(PAGE, encoding="utf-8")  # index pages are skipped
    (root / "_sources").mkdir()
    (root / "_sources" / "frob.html").write_text(PAGE, encoding="utf-8")
    (root / "library" / "frob2.html").write_text(PAGE, encoding="utf-8")  # every paragraph a duplicate: dropped
    documents = build.read_documents(root)
    assert documents == [
        {
            "id": "library/frob",
            "title": "frob — Frobnicate things",
            "split": build.split_of("library/frob"),
            "paragraphs": [
                "The frob module turns ordinary objects into frobnicated objects, which behave almost like the originals.",
                "Return a frobnicated copy of the object, leaving the original object untouched.",
                "Frobnication is idempotent: frobnicating a frobnicated object again changes nothing.",
            ],
        }
    ]
    json.dumps(documents)  # what the script writes
