"""Rebuild the shipped text corpus (``interp_widgets/demo/data/python_docs_*``) from Debian's ``python3.11-doc``.

The corpus is the prose of the Python 3.11 documentation: the HTML pages under ``/usr/share/doc/python3.11/html``
with markup, code blocks, tables, signatures, navigation and index pages stripped, cut into paragraphs, filtered to
English prose and deduplicated. Documents (pages) are split into train and test by a hash of their name, so the
split never changes when pages are added or removed. The output is byte-for-byte reproducible from the same package
version (gzip without timestamps, sorted pages, stable JSON).

Only this script needs the Debian package; the package ``interp_widgets`` reads the shipped files.

Usage (about a minute; needs ``apt-get install -y python3.11-doc`` and the SmolLM2 tokenizer, ``demo.load_lm``)::

    PYTHONPATH=. python scripts/build_text_corpus.py [--html /usr/share/doc/python3.11/html] [--out DIR]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import io
import json
import re
import subprocess
import sys
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_HTML = Path("/usr/share/doc/python3.11/html")
DEFAULT_OUT = REPO / "interp_widgets" / "demo" / "data"
PACKAGE = "python3.11-doc"
PREFIX = "python_docs"
PART_BYTES = 4_000_000  # at most this many uncompressed bytes per part (about 1.2 MB compressed, far below 10 MB)
TEST_PERCENT = 10  # documents whose name hashes below this percentage form the held-out split

# Pages that are not prose: indexes, search, tables of contents, legal text and the bug-fix changelog (one line per
# issue number). Everything else under the HTML root is read, except the Sphinx build folders.
SKIP_PAGES = re.compile(r"^(genindex.*|py-modindex|search|contents|copyright|license|download|whatsnew/changelog)$")
SKIP_DIRS = ("_sources", "_static", "_images", "_downloads")

# Elements whose whole subtree is dropped: code, tables, signatures, navigation, permalinks, admonition titles.
SKIP_TAGS = {"pre", "table", "dt", "nav", "script", "style", "form", "button", "math", "svg", "figure", "caption"}
SKIP_CLASSES = {
    "highlight",
    "sphinxsidebar",
    "related",
    "footer",
    "toctree-wrapper",
    "contents",
    "headerlink",
    "admonition-title",
    "rubric",
    "productionlist",
    "sig",
    "linenos",
    "mobile-nav",
    "menu-wrapper",
    "label",
    "doctest",
    "literal-block-wrapper",
    "code-block-caption",
    "topic-title",
    "sidebar-title",
}
VOID_TAGS = {"br", "hr", "img", "input", "meta", "link", "wbr", "col", "area", "base", "embed", "source", "track"}

MIN_WORDS = 8  # a paragraph has at least this many words
MAX_CODE_SHARE = 0.4  # at most this share of a paragraph's characters come from inline code
MIN_WORD_SHARE = 0.7  # at least this share of its whitespace-separated pieces are words (letters, light punctuation)
BOILERPLATE = re.compile(
    r"^(Source code:|Availability:|Deprecated since version|New in version|Changed in version "
    r"\S+\.?$|See also)",
    re.IGNORECASE,
)
URL = re.compile(r"https?://|ftp://|www\.", re.IGNORECASE)  # dropped: shipped text names no address to fetch
WORD = re.compile(r"^[(\"'“‘]*[A-Za-z][A-Za-z'’\-]*[)\"'”’.,;:!?]*$")


class _Page(HTMLParser):
    """Collect the title and the prose paragraphs (``<p>`` elements) of the main body of one Sphinx page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool, bool]] = []  # (tag, starts a skipped subtree, is the main body)
        self.skip = 0
        self.in_body = 0
        self.title_parts: list[str] | None = None
        self.title = ""
        self.paragraph: list[tuple[str, bool]] | None = None  # (text, inside inline code)
        self.code_depth = 0
        self.paragraphs: list[tuple[str, float]] = []

    def handle_starttag(self, tag, attrs):
        if tag in VOID_TAGS:
            if tag == "br" and self.paragraph is not None:
                self.paragraph.append((" ", False))
            return
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        skipping = tag in SKIP_TAGS or bool(classes & SKIP_CLASSES)
        is_body = tag == "div" and "body" in classes and attrs.get("role") == "main"
        self.stack.append((tag, skipping, is_body))
        self.skip += skipping
        self.in_body += is_body
        if self.skip or not self.in_body:
            return
        if tag == "h1" and not self.title:
            self.title_parts = []
        elif tag == "p":
            self.paragraph = []
        elif tag == "code":
            self.code_depth += 1

    def handle_endtag(self, tag):
        if tag in VOID_TAGS or tag not in {open_tag for open_tag, _, _ in self.stack}:
            return
        while self.stack:  # close up to the matching open tag (tolerates unclosed inner tags)
            open_tag, skipping, is_body = self.stack.pop()
            if not self.skip and self.in_body:
                if open_tag == "h1" and self.title_parts is not None:
                    self.title = _normalise("".join(self.title_parts))
                    self.title_parts = None
                elif open_tag == "p" and self.paragraph is not None:
                    self._finish_paragraph()
                elif open_tag == "code":
                    self.code_depth = max(0, self.code_depth - 1)
            self.skip -= skipping
            self.in_body -= is_body
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self.skip or not self.in_body:
            return
        if self.title_parts is not None:
            self.title_parts.append(data)
        if self.paragraph is not None:
            self.paragraph.append((data, self.code_depth > 0))

    def _finish_paragraph(self):
        pieces, self.paragraph = self.paragraph, None
        text = _normalise("".join(p for p, _ in pieces))
        code = len(_normalise("".join(p for p, in_code in pieces if in_code)))
        if text:
            self.paragraphs.append((text, code / len(text)))


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFC", html.unescape(text)).replace("\u00b6", "")
    return re.sub(r"\s+", " ", text).strip()


def is_prose(text: str, code_share: float) -> bool:
    """Whether a paragraph reads as English prose: long enough, mostly words, little inline code, no boilerplate,
    no web address."""
    pieces = text.split()
    if len(pieces) < MIN_WORDS or code_share > MAX_CODE_SHARE or BOILERPLATE.match(text) or URL.search(text):
        return False
    words = sum(bool(WORD.match(piece)) for piece in pieces)
    return words / len(pieces) >= MIN_WORD_SHARE and text[-1] in ".!?:)”\"'"


def split_of(doc_id: str) -> str:
    """``"test"`` for about TEST_PERCENT % of documents, chosen by a hash of the document's name, else ``"train"``."""
    bucket = int(hashlib.sha256(doc_id.encode("utf-8")).hexdigest()[:8], 16) % 100
    return "test" if bucket < TEST_PERCENT else "train"


def read_documents(root: Path) -> list[dict]:
    """Every prose page under ``root`` as ``{"id", "title", "split", "paragraphs"}``, paragraphs deduplicated across
    the whole corpus (the first occurrence in sorted page order is kept; case and spacing are ignored)."""
    seen: set[str] = set()
    documents = []
    for path in sorted(root.rglob("*.html")):
        doc_id = path.relative_to(root).with_suffix("").as_posix()
        if doc_id.split("/")[0] in SKIP_DIRS or SKIP_PAGES.match(doc_id):
            continue
        page = _Page()
        page.feed(path.read_text(encoding="utf-8"))
        page.close()
        kept = []
        for text, code_share in page.paragraphs:
            key = text.casefold()
            if is_prose(text, code_share) and key not in seen:
                seen.add(key)
                kept.append(text)
        if kept:
            documents.append(
                {"id": doc_id, "title": page.title or doc_id, "split": split_of(doc_id), "paragraphs": kept}
            )
    return documents


LICENCE_HEADER = """\
The text in python_docs_part_*.jsonl.gz is derived from the Python 3.11.2 documentation
(Debian package python3.11-doc, /usr/share/doc/python3.11/html).
Copyright © 2001-2023 Python Software Foundation; All Rights Reserved.
As the documentation states, "Python software and documentation are licensed under the PSF License Agreement".

Summary of the changes made (clause 3 below): only the prose paragraphs of the HTML pages were kept, as plain
text. Markup, code blocks, tables, function signatures, navigation, index, search, licence and changelog pages
were removed, and so were paragraphs shorter than eight words, paragraphs that are mostly inline code, version
notes, "Source code:" and "Availability:" lines, paragraphs containing a web address, and repeated paragraphs.
The words of the kept paragraphs are unchanged (whitespace normalised). scripts/build_text_corpus.py in the
interp_widgets repository does this.

The PSF License Agreement, verbatim from the documentation's license.html:

"""


def licence_text(root: Path) -> str:
    """The licence file: where the text comes from, the summary of changes the PSF licence asks for, and the PSF
    licence agreement exactly as the documentation states it (its ``license.html``)."""
    page = (root / "license.html").read_text(encoding="utf-8")
    start = page.find('id="psf-license-agreement-for-python')
    block = re.search(r"<pre[^>]*>(.*?)</pre>", page[start:], re.DOTALL) if start >= 0 else None
    if block is None:
        raise RuntimeError(f"no PSF licence agreement found in {root / 'license.html'}")
    agreement = html.unescape(re.sub(r"<[^>]+>", "", block.group(1))).strip()
    if not agreement.startswith("1. This LICENSE AGREEMENT is between the Python Software Foundation"):
        raise RuntimeError(f"unexpected licence text in {root / 'license.html'}: {agreement[:80]!r}")
    return LICENCE_HEADER + agreement + "\n"


def _gzip(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as out:
        out.write(data)
    return buffer.getvalue()


def package_version() -> str:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", PACKAGE], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def token_counts(documents: list[dict]) -> dict:
    """SmolLM2 token counts (no special tokens) of every paragraph, in total and per split, and the token types."""
    from interp_widgets.demo import load_lm

    _, tokenizer = load_lm(progress=True)
    counts = {"tokens": 0, "train_tokens": 0, "test_tokens": 0}
    types: set[int] = set()
    for doc in documents:
        ids = tokenizer(doc["paragraphs"], add_special_tokens=False)["input_ids"]
        n = sum(map(len, ids))
        counts["tokens"] += n
        counts[f"{doc['split']}_tokens"] += n
        for row in ids:
            types.update(row)
    counts["token_types"] = len(types)
    return counts


def build(root: Path, out: Path) -> dict:
    if not (root / "library" / "index.html").is_file():
        raise SystemExit(f"{root} is not the Python 3.11 HTML documentation; apt-get install -y {PACKAGE}")
    documents = read_documents(root)
    lines = [json.dumps(doc, ensure_ascii=False, sort_keys=True) + "\n" for doc in documents]
    n_parts = max(1, -(-sum(map(len, lines)) // PART_BYTES))  # parts of about equal size, documents kept whole
    share = sum(map(len, lines)) / n_parts
    parts: list[list[str]] = [[] for _ in range(n_parts)]
    written = 0
    for line in lines:
        parts[min(n_parts - 1, int(written // share))].append(line)
        written += len(line)
    for old in out.glob(f"{PREFIX}_part_*.jsonl.gz"):
        old.unlink()
    files = {}
    for i, part in enumerate(parts, start=1):
        name = f"{PREFIX}_part_{i}.jsonl.gz"
        data = _gzip("".join(part).encode("utf-8"))
        (out / name).write_bytes(data)
        files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "documents": len(part)}
    (out / f"{PREFIX.upper()}_LICENSE.txt").write_text(licence_text(root), encoding="utf-8")
    paragraphs = [p for doc in documents for p in doc["paragraphs"]]
    manifest = {
        "source": f"Debian package {PACKAGE} {package_version()} (/usr/share/doc/python3.11/html)",
        "licence": "PSF-2.0 (PSF License Agreement for Python 3.11.2; see PYTHON_DOCS_LICENSE.txt)",
        "documents": len(documents),
        "test_documents": sum(doc["split"] == "test" for doc in documents),
        "paragraphs": len(paragraphs),
        "characters": sum(map(len, paragraphs)),
        "words": sum(len(p.split()) for p in paragraphs),
        "tokenizer": "SmolLM2-135M-Instruct (interp_widgets.demo.load_lm), add_special_tokens=False",
        **token_counts(documents),
        "files": files,
    }
    (out / f"{PREFIX}.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, default=DEFAULT_HTML, help="the HTML root (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    args = parser.parse_args(argv)
    manifest = build(args.html, args.out)
    print(json.dumps({k: v for k, v in manifest.items() if k != "files"}, indent=2))
    for name, info in manifest["files"].items():
        print(f"{name}: {info['bytes']:,} bytes, {info['documents']} documents")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
