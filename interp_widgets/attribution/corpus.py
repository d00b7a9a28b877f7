"""Attribution of a whole corpus, in fixed shards written to disk: resumable, and split across ``torch.distributed`` ranks.

:func:`attribute_corpus` cuts the texts into shards at fixed boundaries (shard ``s`` is ``texts[s*S:(s+1)*S]``,
whatever the number of ranks), explains each shard with one :func:`~interp_widgets.attribution.attribute` call and
writes it atomically as one safetensors file (the results' arrays, their JSON metadata in the header; never a pickle).
A ``manifest.json`` records fingerprints of the weights, the tokenizer, the method settings and the texts, so a
killed run resumes with the same call (only the missing shards are computed, each in the same batch composition, so
the result is bitwise equal to an uninterrupted run) and a resume of another job is refused. Under a process group,
rank ``r`` computes the shards ``s`` with ``s % world == r``. :func:`load_corpus` (and ``attribute_corpus`` itself)
returns a :class:`CorpusAttribution`, an :class:`~interp_widgets.attribution.AttributionCollection` that reads one
shard at a time.

Example:
    >>> corpus = attribute_corpus(model, tokenizer, texts[:6], method="saliency", path=getfixture("tmp_path") / "run",
    ...                           shard_size=2, progress=False)
    >>> corpus, corpus.n_shards
    (CorpusAttribution(6 results, method='saliency'), 3)
    >>> load_corpus(corpus.path)[5].text == texts[5]
    True
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from interp_widgets._files import read_safetensors
from interp_widgets._inputs import check_texts, input_items
from interp_widgets._shards import (  # noqa: F401  (the fingerprints are read from here too)
    MANIFEST,
    Group,
    JobKind,
    commit,
    finished_shards,
    planned_manifest,
    read_manifest,
    shard_range as _shard_range,
    shard_size_for,
    start_job,
    temporary_path,
    tokenizer_fingerprint,
    weights_fingerprint,
)
from interp_widgets.attribution.result import AttributionCollection, AttributionResult, _json_default

__all__ = ["CorpusAttribution", "attribute_corpus", "load_corpus"]

_JOURNAL = "journal.jsonl"
_SHARD_FORMAT = "interp_widgets.CorpusShard"
_VERSION = 1
# the manifest, the refusals, the shard boundaries and the ranks' collectives are interp_widgets._shards', shared with
# collect_activations; what a shard holds (a safetensors file of results) and the journal are this module's
_KIND = JobKind(call="attribute_corpus", format="interp_widgets.CorpusAttribution", settings="the method settings",
                opener="load_corpus", suffix=".safetensors", files=(_JOURNAL,))  # fmt: skip
_shard_name = _KIND.shard_name


def _settings(method: str, method_params: dict, options: dict) -> dict[str, Any]:
    """The method settings as JSON values (``progress`` changes nothing computed, so it is left out)."""
    params = {k: v for k, v in method_params.items() if k != "progress"}
    return json.loads(json.dumps({"method": method, "method_params": params, "attribute_options": options},
                                 sort_keys=True, default=repr))  # fmt: skip


# ------------------------------------------------------------------------------------------------ shards on disk
def _write_shard(path: Path, shard: int, results: Sequence[AttributionResult], info: dict) -> None:
    """One safetensors file: result ``j``'s arrays as ``j/name``, the results' JSON metadata in the header; written
    to a temporary file and renamed, so a killed run leaves no partial shard."""
    from safetensors.numpy import save_file

    arrays = {f"{j}/{name}": value for j, r in enumerate(results) for name, value in r._arrays().items()}
    meta = {"format": _SHARD_FORMAT, "version": _VERSION, "shard": shard, **info,
            "results": [r._metadata() for r in results]}  # fmt: skip
    final = path / _shard_name(shard)
    temporary = temporary_path(path, final.name)
    save_file(arrays, str(temporary), metadata={"interp_widgets": json.dumps(meta, default=_json_default)})
    commit(temporary, final)


def _read_shard(file: Path) -> tuple[dict, list[AttributionResult]]:
    fix = "re-run attribute_corpus with the same arguments to recompute it (delete the damaged shard first)"
    metadata, arrays = read_safetensors(file, what="a corpus attribution shard", fix=fix)
    meta = json.loads(metadata.get("interp_widgets", "{}"))
    if meta.get("format") != _SHARD_FORMAT:
        raise ValueError(f"{file} is not a corpus attribution shard; {fix}")
    per_result: list[dict] = [{} for _ in meta["results"]]
    for key, value in arrays.items():
        j, name = key.split("/", 1)
        per_result[int(j)][name] = value
    results = [AttributionResult._from_saved(m, a) for m, a in zip(meta["results"], per_result)]
    return meta, results


def _read_shard_info(file: Path) -> dict:
    """A shard's header metadata without its results (its texts and pass counts)."""
    from safetensors import safe_open

    with safe_open(str(file), "np") as handle:
        meta = json.loads((handle.metadata() or {}).get("interp_widgets", "{}"))
    return {k: v for k, v in meta.items() if k != "results"}


def _same(a: AttributionResult, b: AttributionResult) -> bool:
    """Bitwise equality of two results' arrays (dtype, shape, bytes) and of their JSON metadata."""
    x, y = a._arrays(), b._arrays()
    if x.keys() != y.keys():
        return False
    if any(x[k].dtype != y[k].dtype or x[k].shape != y[k].shape or x[k].tobytes() != y[k].tobytes() for k in x):
        return False
    return _dump(a) == _dump(b)


def _dump(result: AttributionResult) -> str:
    return json.dumps(result._metadata(), sort_keys=True, default=_json_default)


def _finished(path: Path, n_shards: int) -> list[int]:
    return finished_shards(path, _KIND, n_shards)


# ------------------------------------------------------------------------------------------------ the collection
class CorpusAttribution(AttributionCollection):
    """The results of an :func:`attribute_corpus` run, read from its shards on demand.

    ``len()`` comes from the manifest; ``collection[i]`` reads only the shard that holds ``i`` (the last
    ``cache_shards`` shards read stay in memory); iteration streams the shards in order; a slice returns an
    in-memory :class:`AttributionCollection` of those results. Everything else is :class:`AttributionCollection`'s,
    through those three: ``to_dataframe`` streams the shards (the table itself is in memory), while ``aggregate`` and
    ``results`` hold every result in memory at once. ``widget()`` pages through the shards: the example list holds
    one page, and each page reads only the shards that hold its texts (:meth:`examples`, :meth:`shard_range`).

    Attributes:
        path: the run's directory. manifest: its manifest (fingerprints, texts, shard size, world size).

    Example:
        >>> corpus = attribute_corpus(model, tokenizer, texts[:5], method="saliency", shard_size=2,
        ...                           path=getfixture("tmp_path") / "run", progress=False)
        >>> len(corpus), corpus[4].text == texts[4], [len(r.tokens) for r in corpus[1:3]]
        (5, True, [12, 12])
        >>> corpus.to_dataframe().groupby("example").size().tolist() == [len(r.tokens) for r in corpus]
        True
        >>> corpus.work()["rows"]  # sequences the model ran: one forward row per text, in every run
        5
    """

    def __init__(self, path: str | Path, *, cache_shards: int = 2):
        self.path = Path(path)
        self.manifest = read_manifest(self.path, _KIND)
        self.shard_size = int(self.manifest["shard_size"])
        self.n_shards = int(self.manifest["n_shards"])
        self._length = int(self.manifest["n_texts"])
        self._cache: OrderedDict[int, list[AttributionResult]] = OrderedDict()
        self._cache_shards = max(1, cache_shards)

    def _shard(self, shard: int) -> list[AttributionResult]:
        if shard in self._cache:
            self._cache.move_to_end(shard)
            return self._cache[shard]
        file = self.path / _shard_name(shard)
        if not file.is_file():
            raise FileNotFoundError(
                f"{file} is missing: the run is not finished; re-run the same attribute_corpus call to compute "
                "the missing shards"
            )
        results = _read_shard(file)[1]
        self._cache[shard] = results
        while len(self._cache) > self._cache_shards:
            self._cache.popitem(last=False)
        return results

    def __len__(self) -> int:
        return self._length

    def shard_range(self, shard: int) -> range:
        """The text indices of ``shard``, from the manifest's fixed boundaries (``shard_size``, ``n_texts``).

        Example:
            >>> corpus = attribute_corpus(model, tokenizer, texts[:5], method="saliency", shard_size=2,
            ...                           path=getfixture("tmp_path") / "run", progress=False)
            >>> [corpus.shard_range(s) for s in range(corpus.n_shards)]
            [range(0, 2), range(2, 4), range(4, 5)]
        """
        if not 0 <= shard < self.n_shards:
            raise IndexError(f"shard {shard} does not exist; this run has shards 0..{self.n_shards - 1}")
        return _shard_range(shard, self.shard_size, self._length)

    def examples(self, start: int, stop: int) -> list[AttributionResult]:
        """The results ``start..stop-1``, reading only the shards that hold them (the example list's pages).

        Example:
            >>> corpus = attribute_corpus(model, tokenizer, texts[:5], method="saliency", shard_size=2,
            ...                           path=getfixture("tmp_path") / "run", progress=False)
            >>> [r.text for r in corpus.examples(1, 3)] == texts[1:3]
            True
        """
        start, stop = max(0, int(start)), min(self._length, int(stop))
        if start >= stop:
            return []
        out: list[AttributionResult] = []
        for shard in range(start // self.shard_size, (stop - 1) // self.shard_size + 1):
            texts = self.shard_range(shard)
            out += self._shard(shard)[max(start, texts.start) - texts.start : min(stop, texts.stop) - texts.start]
        return out

    def widget(self, **options):
        """The example list, one page at a time (``options`` go to
        :meth:`~interp_widgets.widgets.ExampleListWidget.from_pages`): showing a page reads only its shards (the
        last ``cache_shards`` read stay in memory). Sorting and filtering need every result: use
        ``ExampleListWidget(corpus.results)`` for them.

        Example:
            >>> corpus = attribute_corpus(model, tokenizer, texts[:5], method="saliency", shard_size=2,
            ...                           path=getfixture("tmp_path") / "run", progress=False)
            >>> widget = corpus.widget(page_size=2)
            >>> widget
            ExampleListWidget(examples 0..1 of 5, method='saliency', paged)
            >>> widget.page = 2; widget.first_example, len(widget.tokens)
            (4, 1)
        """
        from interp_widgets.widgets import ExampleListWidget

        # the LRU holds a page's shards and one more, so stepping back and forth re-reads none
        per_page = -(-int(options.get("page_size", ExampleListWidget.page_size.default_value)) // self.shard_size) + 1
        self._cache_shards = max(self._cache_shards, per_page + 1)
        return ExampleListWidget.from_pages(self, **options)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return AttributionCollection([self[i] for i in range(*index.indices(len(self)))])
        i = int(index)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} results")
        return self._shard(i // self.shard_size)[i % self.shard_size]

    def __iter__(self) -> Iterator[AttributionResult]:
        for shard in range(self.n_shards):
            yield from self._shard(shard)

    @property
    def results(self) -> list[AttributionResult]:
        """Every result, read from every shard (in memory at once)."""
        return list(self)

    def missing_shards(self) -> list[int]:
        """The shards not written yet (empty once the run is finished).

        Example:
            >>> attribute_corpus(model, tokenizer, texts[:3], method="saliency", shard_size=2,
            ...                  path=getfixture("tmp_path") / "run", progress=False).missing_shards()
            []
        """
        done = set(_finished(self.path, self.n_shards))
        return [s for s in range(self.n_shards) if s not in done]

    def work(self) -> dict[str, int]:
        """The work of every run on this directory, from its journal: ``rows`` (sequences the model ran,
        ``forward_rows`` of the pass counter), ``backward_rows``, ``shards_computed`` (shards written, counting a
        recomputed one twice), ``shards_lost`` (started by a run that was killed before writing them; their rows
        are counted at the full cost of the shard, an upper bound) and ``runs``. ``rows_kept`` is the rows of the
        shards on disk, what an uninterrupted run costs.

        Example:
            >>> corpus = attribute_corpus(model, tokenizer, texts[:4], method="saliency", shard_size=2,
            ...                           path=getfixture("tmp_path") / "run", progress=False)
            >>> corpus.work()
            {'rows': 4, 'backward_rows': 4, 'rows_kept': 4, 'shards_computed': 2, 'shards_lost': 0, 'runs': 1}
        """
        events = []
        journal = self.path / _JOURNAL
        if journal.is_file():
            for line in journal.read_text().splitlines():
                try:
                    events.append(json.loads(line))
                except ValueError:  # a line cut by a kill
                    continue
        done = {}
        cost = {}
        for e in events:
            if e["event"] == "done":
                done[(e["run"], e["shard"])] = e["passes"]
                cost[e["shard"]] = e["passes"]
        started = [(e["run"], e["shard"]) for e in events if e["event"] == "start"]
        for s in _finished(self.path, self.n_shards):
            if s not in cost:  # written, but the run was killed before it journalled that: its last start made it
                cost[s] = _read_shard_info(self.path / _shard_name(s)).get("passes", {})
                made = [key for key in started if key[1] == s]
                if made:
                    done[made[-1]] = cost[s]
        lost = [key for key in dict.fromkeys(started) if key not in done]
        spent = list(done.values()) + [cost.get(shard, {}) for _, shard in lost]
        kept = [cost[s] for s in _finished(self.path, self.n_shards) if s in cost]
        return {
            "rows": sum(p.get("forward_rows", 0) for p in spent),
            "backward_rows": sum(p.get("backward_rows", 0) for p in spent),
            "rows_kept": sum(p.get("forward_rows", 0) for p in kept),
            "shards_computed": len(done),
            "shards_lost": len(lost),
            "runs": len({e["run"] for e in events}),
        }


def load_corpus(path: str | Path) -> CorpusAttribution:
    """Open the results of an :func:`attribute_corpus` run at ``path`` (reads only its manifest).

    Example:
        >>> run = getfixture("tmp_path") / "run"
        >>> _ = attribute_corpus(model, tokenizer, texts[:3], method="saliency", path=run, progress=False)
        >>> load_corpus(run)
        CorpusAttribution(3 results, method='saliency')
        >>> load_corpus(getfixture("tmp_path"))
        Traceback (most recent call last):
        ...
        FileNotFoundError: /tmp/.../manifest.json does not exist: ... is not an attribute_corpus run
    """
    path = Path(path)
    if not (path / MANIFEST).is_file():
        raise FileNotFoundError(f"{path / MANIFEST} does not exist: {path} is not an attribute_corpus run")
    return CorpusAttribution(path)


# ------------------------------------------------------------------------------------------------ the run
def attribute_corpus(
    model,
    tokenizer,
    texts: Sequence[str],
    *,
    method: str,
    path: str | Path,
    method_params: dict[str, Any] | None = None,
    shard_size: int | None = None,
    process_group=None,
    recompute: bool = False,
    reassign: bool = False,
    verify: int = 0,
    progress: bool = True,
    **attribute_options,
) -> CorpusAttribution:
    """Explain every text of a corpus with one method, in shards written under ``path``; resumable and distributed.

    Args:
        model, tokenizer: as for :func:`~interp_widgets.attribution.attribute`. The model is left untouched (its
            device, dtype and train/eval mode; no hooks stay).
        texts: a non-empty list of texts (or chat conversations, as ``attribute`` takes them).
        method, method_params: the method by name and its constructor's parameters (its own progress bar is off
            unless ``method_params`` sets ``progress``).
        path: the run's directory: new, empty, or an earlier run of the same job (to resume it).
        shard_size: texts per shard, ``S``; shard ``s`` is ``texts[s*S:(s+1)*S]`` whatever the world size, and is
            explained by one ``attribute`` call, so its batch composition is fixed. Default ``len(texts) // 50``
            (at least 1): a shard is at most 2 % of the job, so a kill wastes at most that.
        process_group: a ``torch.distributed`` group; rank ``r`` computes the shards ``s`` with
            ``s % world == r`` and every rank returns the whole collection. ``path`` must be shared by the ranks.
            Rank 0 writes the manifest; the others wait on a barrier and check their own fingerprints against it.
        recompute: start the job at ``path`` over (its shards are deleted), even a finished one or another job.
        reassign: resume with another world size than the run's (refused otherwise: resume with the same
            ``--nproc-per-node``). Shard boundaries do not depend on the world size, so neither do the results;
            the missing shards are split among the ranks of this run.
        verify: recompute this many finished shards, chosen at random (seed 0), in the same batch composition,
            and compare every array and every metadata value bit for bit; a mismatch raises ``RuntimeError``.
            Bitwise equality assumes the same hardware, library versions and thread count. On a finished job,
            ``verify`` only verifies (it is not refused).
        progress: a tqdm bar over this rank's shards.
        attribute_options: the other options of ``attribute`` (``target``, ``granularity``, ``max_batch_tokens``…).

    The manifest records sha256 fingerprints of the weights (every parameter and buffer's name, dtype, shape and
    bytes), of the tokenizer, of the method settings (``method``, ``method_params``, ``attribute_options``) and of
    the texts, with the number of texts, the shard size and the world size. Re-running a finished job raises
    ``FileExistsError`` (load it with :func:`load_corpus`, or pass ``recompute=True``); resuming with another model,
    tokenizer, method settings, texts or shard size raises ``ValueError`` naming what differs. Every run appends
    the shards it starts and finishes (with their pass counts) to ``journal.jsonl``; :meth:`CorpusAttribution.work`
    sums them.

    Example:
        >>> run = getfixture("tmp_path") / "run"
        >>> corpus = attribute_corpus(model, tokenizer, texts[:6], method="input_x_gradient", path=run,
        ...                           shard_size=4, target="positive", progress=False)
        >>> corpus.n_shards, corpus[0].target_labels, sorted(p.name for p in run.iterdir())
        (2, ['positive'], ['journal.jsonl', 'manifest.json', 'shard-000000.safetensors', 'shard-000001.safetensors'])
        >>> attribute_corpus(model, tokenizer, texts[:6], method="input_x_gradient", path=run, shard_size=4,
        ...                  target="positive", progress=False)
        Traceback (most recent call last):
        ...
        FileExistsError: ... is finished: load it with load_corpus(...), or pass recompute=True to compute it again
        >>> attribute_corpus(model, tokenizer, texts[:6], method="saliency", path=run, shard_size=4, progress=False)
        Traceback (most recent call last):
        ...
        ValueError: ... holds another job; it differs in the method settings ...
    """
    from tqdm.auto import tqdm

    from interp_widgets.attribution.api import METHODS, attribute

    if isinstance(texts, (str, bytes, dict)) or not hasattr(texts, "__iter__"):
        raise TypeError("texts must be a list of texts; for one text use attribute(model, tokenizer, text)")
    texts = list(texts)  # any iterable of texts
    check_texts(texts, name="texts", call="attribute_corpus(model, tokenizer, [...], method=..., path=...)")
    texts, single = input_items(texts)
    if single:
        raise TypeError("texts must be a list of texts or of conversations, not one conversation; wrap it in a list")
    if not texts:
        raise ValueError("no texts given; pass a non-empty list of texts")
    n = len(texts)
    shard_size = shard_size_for(n, shard_size)
    if int(verify) < 0:
        raise ValueError(f"verify must be 0 or more shards to recompute, not {verify}")
    path = Path(path)
    method_params = dict(method_params or {})
    method_params.setdefault("progress", False)
    METHODS[method](**method_params)  # an unknown method or parameter fails here, before anything is written
    group = Group(process_group)
    planned = planned_manifest(_KIND, model, tokenizer, texts, shard_size=shard_size, world_size=group.world,
                               settings=_settings(method, method_params, attribute_options), method=method)  # fmt: skip
    n_shards = planned["n_shards"]
    # rank 0 checks the directory and writes (or keeps) the manifest; every rank then checks its own fingerprints
    _, todo = start_job(path, planned, _KIND, group, recompute=recompute, reassign=reassign,
                        finished_ok=bool(verify))  # fmt: skip
    run = group.broadcast(uuid.uuid4().hex)

    def journal(event: str, shard: int, **extra) -> None:
        line = json.dumps({"run": run, "rank": group.rank, "event": event, "shard": shard, **extra})
        with open(path / _JOURNAL, "a") as handle:
            handle.write(line + "\n")
            handle.flush()

    def explain(shard: int) -> list[AttributionResult]:
        part = [texts[i] for i in _shard_range(shard, shard_size, n)]
        out = attribute(model, tokenizer, part, method=method, method_params=method_params, **attribute_options)
        return list(out) if isinstance(out, AttributionCollection) else [out]

    bar = tqdm(total=len(todo), desc=f"{method} shards" + (f" (rank {group.rank})" if group.world > 1 else ""),
               unit="shard", disable=not progress, position=group.rank)  # fmt: skip
    try:
        for shard in todo:
            journal("start", shard)
            results = explain(shard)
            passes = dict(results[0].params.get("passes", {}))
            _write_shard(path, shard, results, {"texts": [shard * shard_size, shard * shard_size + len(results)],
                                                "passes": passes})  # fmt: skip
            journal("done", shard, passes=passes)
            bar.update()
    finally:
        bar.close()
    group.barrier()

    if verify:
        finished = _finished(path, n_shards)
        rng = np.random.default_rng(0)
        chosen = sorted(int(s) for s in rng.choice(finished, size=min(int(verify), len(finished)), replace=False))
        error = None
        for shard in chosen[group.rank :: group.world]:
            stored = _read_shard(path / _shard_name(shard))[1]
            again = explain(shard)
            if len(stored) != len(again) or not all(_same(a, b) for a, b in zip(stored, again)):
                error = (
                    "RuntimeError",
                    (
                        f"shard {shard} of {path} differs from its recomputation (texts "
                        f"{shard * shard_size}..{min(n, (shard + 1) * shard_size) - 1}): the stored shard was "
                        "changed, or the computation is not reproducible here; delete it and resume to recompute"
                    ),
                )
                break  # fmt: skip
        group.raise_any(error)
    return CorpusAttribution(path)
