"""Jobs over a corpus in fixed shards on disk: resumable, split across ``torch.distributed`` ranks, refusing others.

:func:`~interp_widgets.attribution.attribute_corpus` and :func:`~interp_widgets.concepts.collect_activations` (with a
``path``) share what is written here, once:

- **fixed shard boundaries**: shard ``s`` holds the texts ``s*S .. (s+1)*S - 1`` whatever the number of ranks
  (:func:`shard_size_for`, :func:`shard_range`), so a shard's batch composition, and its bits, never depend on how
  the job was split or interrupted;
- **the manifest** (``manifest.json``, written atomically by rank 0): sha256 fingerprints of the weights, the
  tokenizer and the texts (:func:`weights_fingerprint`, :func:`tokenizer_fingerprint`, :func:`texts_fingerprint`),
  the job's settings, the number of texts, the shard size and the world size (:func:`planned_manifest`);
- **the start of a run** (:func:`start_job`): rank 0 checks the directory (new, empty, or this job's), removes the
  temporary files of a killed run and writes or keeps the manifest; every rank then checks its own fingerprints
  against it, and every check that fails on one rank is raised on all of them (:class:`Group`), so none waits on a
  barrier. A finished job, another job (the error names what differs) and another world size are refused, each with
  its fix (``recompute=True``, the same arguments, ``reassign=True`` or the same ``--nproc-per-node``);
- **atomic shards**: a shard is written under a temporary name (:func:`temporary_path`) and renamed into place
  (:func:`commit`), so a shard on disk is a whole shard and a killed run's partial one is redone.

What a shard holds, and how it is read back, is the caller's: a :class:`JobKind` names the job in messages and says
whether a shard is a file (``shard-000000.safetensors``) or a directory (``shard-000000``).

This module imports nothing else from the package (torch only inside the functions that need it).

Example:
    >>> [shard_range(s, 2, 5) for s in range(n_shards(5, 2))]
    [range(0, 2), range(2, 4), range(4, 5)]
    >>> shard_size_for(1000), shard_size_for(10)  # default: a shard is at most 2 % of the job
    (20, 1)
    >>> JobKind("attribute_corpus", "interp_widgets.CorpusAttribution", "the method settings", "load_corpus",
    ...         ".safetensors").shard_name(3)
    'shard-000003.safetensors'
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MANIFEST",
    "Group",
    "JobKind",
    "commit",
    "finished_shards",
    "n_shards",
    "planned_manifest",
    "read_manifest",
    "shard_range",
    "shard_size_for",
    "start_job",
    "temporary_path",
    "texts_fingerprint",
    "tokenizer_fingerprint",
    "weights_fingerprint",
    "write_manifest",
]

MANIFEST = "manifest.json"
_TEMPORARY = ".tmp-"
_VERSION = 1


@dataclass(frozen=True)
class JobKind:
    """What one kind of sharded job is called in its messages, and how its shards are named.

    Attributes:
        call: the function that runs the job (``"collect_activations"``), named in the errors.
        format: the manifest's ``format`` value, which tells this kind's directories from others.
        settings: how the errors name the job's settings (``"the collection settings"``).
        opener: the function that reads a finished job back (``"ActivationStore.open"``).
        suffix: a shard file's suffix (``".safetensors"``), or ``""`` for a shard that is a directory.
        files: the run's other files (a journal), removed with its shards by ``recompute=True``.

    Example:
        >>> kind = JobKind("collect_activations", "interp_widgets.ActivationCollection", "the collection settings",
        ...                "ActivationStore.open", "")
        >>> kind.shard_name(12)
        'shard-000012'
    """

    call: str
    format: str
    settings: str
    opener: str
    suffix: str
    files: tuple[str, ...] = ()

    def shard_name(self, shard: int) -> str:
        """The file or directory name of ``shard``."""
        return f"shard-{shard:06d}{self.suffix}"


# ------------------------------------------------------------------------------------------------ shard boundaries
def shard_size_for(n_texts: int, shard_size: int | None = None) -> int:
    """The shard size: ``shard_size`` checked, or by default ``n_texts // 50`` (at least 1), so that a shard is at
    most 2 % of the job and a kill wastes at most that.

    Example:
        >>> shard_size_for(120), shard_size_for(120, 7)
        (2, 7)
    """
    size = max(1, n_texts // 50) if shard_size is None else int(shard_size)
    if size < 1:
        raise ValueError(f"shard_size must be at least 1, not {shard_size}")
    return size


def n_shards(n_texts: int, shard_size: int) -> int:
    """How many shards ``n_texts`` texts make (the last one may be smaller).

    Example:
        >>> n_shards(11, 4)
        3
    """
    return -(-n_texts // shard_size)


def shard_range(shard: int, shard_size: int, n_texts: int) -> range:
    """The text indices of ``shard``: ``shard*S .. min(n, (shard+1)*S) - 1``.

    Example:
        >>> shard_range(2, 4, 11)
        range(8, 11)
    """
    return range(shard * shard_size, min(n_texts, (shard + 1) * shard_size))


# ------------------------------------------------------------------------------------------------ fingerprints
def weights_fingerprint(model) -> str:
    """sha256 over every parameter and buffer of ``model``: name, dtype, shape and bytes (read in place: a GPU
    tensor is copied to the host one at a time, the model is not moved).

    Example:
        >>> len(weights_fingerprint(model)), weights_fingerprint(model) == weights_fingerprint(model)
        (64, True)
    """
    import torch

    digest = hashlib.sha256()
    with torch.no_grad():
        named = [*model.named_parameters(), *model.named_buffers()]
        for name, tensor in sorted(named, key=lambda item: item[0]):
            data = tensor.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{name}|{data.dtype}|{tuple(tensor.shape)}|".encode())
            digest.update(data.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of the tokenizer: its backend's serialised JSON (a fast tokenizer) or its vocabulary, with its class,
    padding and truncation sides and chat template. The backend's ``truncation`` and ``padding`` are left out: they
    are the settings of the last call (``transformers`` sets them at each call), not the tokenizer's.

    Example:
        >>> before = tokenizer_fingerprint(tokenizer)
        >>> _ = tokenizer("A call sets the backend's padding", padding="max_length", max_length=16)
        >>> len(before), tokenizer_fingerprint(tokenizer) == before
        (64, True)
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
        body = json.dumps(state, sort_keys=True)
    else:
        body = json.dumps(tokenizer.get_vocab(), sort_keys=True)
    extra = [type(tokenizer).__name__, getattr(tokenizer, "padding_side", None),
             getattr(tokenizer, "truncation_side", None), getattr(tokenizer, "chat_template", None)]  # fmt: skip
    return hashlib.sha256((body + json.dumps(extra, default=str)).encode()).hexdigest()


def texts_fingerprint(texts: Sequence) -> str:
    """sha256 of the texts (or conversations), in order.

    Example:
        >>> texts_fingerprint(["a", "b"]) == texts_fingerprint(["b", "a"])
        False
    """
    digest = hashlib.sha256()
    for text in texts:
        item = json.dumps(text, sort_keys=True, default=str).encode()
        digest.update(len(item).to_bytes(8, "little") + item)
    return digest.hexdigest()


def planned_manifest(
    kind: JobKind,
    model,
    tokenizer,
    texts: Sequence,
    *,
    shard_size: int,
    world_size: int,
    settings: dict[str, Any],
    **extra,
) -> dict[str, Any]:
    """The manifest a run of this job writes, or checks an earlier run's against: the fingerprints, ``settings``
    (as JSON values: whatever changes what is computed), the number of texts, the shard size and the world size.

    Example:
        >>> kind = JobKind("collect_activations", "interp_widgets.ActivationCollection", "the collection settings",
        ...                "ActivationStore.open", "")
        >>> planned = planned_manifest(kind, model, tokenizer, texts[:5], shard_size=2, world_size=1,
        ...                            settings={"layer": "layer:1"})
        >>> planned["n_shards"], planned["settings"], sorted(planned["fingerprints"])
        (3, {'layer': 'layer:1'}, ['texts', 'tokenizer', 'weights'])
    """
    return {
        "format": kind.format,
        "version": _VERSION,
        **extra,
        "n_texts": len(texts),
        "shard_size": shard_size,
        "n_shards": n_shards(len(texts), shard_size),
        "world_size": world_size,
        "settings": json.loads(json.dumps(settings, sort_keys=True, default=repr)),
        "fingerprints": {
            "weights": weights_fingerprint(model),
            "tokenizer": tokenizer_fingerprint(tokenizer),
            "texts": texts_fingerprint(texts),
        },
    }


# ------------------------------------------------------------------------------------------------ files
def read_manifest(path: Path, kind: JobKind) -> dict:
    """The manifest of a run of ``kind`` at ``path`` (``ValueError`` if it cannot be read or is another kind's).

    Example:
        >>> read_manifest(getfixture("tmp_path"), JobKind("f", "F", "the settings", "open_f", ""))
        Traceback (most recent call last):
        ...
        ValueError: /tmp/.../manifest.json cannot be read (...); pass the path of a f run
    """
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path / MANIFEST} cannot be read ({err}); pass the path of a {kind.call} run") from None
    if not isinstance(manifest, dict) or manifest.get("format") != kind.format:
        raise ValueError(f"{path / MANIFEST} is not the manifest of a {kind.call} run; choose another path")
    return manifest


def write_manifest(path: Path, manifest: dict) -> None:
    """Write ``manifest.json`` atomically (a temporary file, renamed)."""
    temporary = temporary_path(path, MANIFEST)
    temporary.write_text(json.dumps(manifest, indent=1))
    os.replace(temporary, path / MANIFEST)


def temporary_path(path: Path, name: str) -> Path:
    """Where this process writes ``name`` before :func:`commit` renames it into place; a run removes the temporary
    files of killed runs when it starts."""
    return Path(path) / f"{_TEMPORARY}{os.getpid()}-{name}"


def commit(temporary: Path, final: Path) -> None:
    """Rename a written shard (a file or a directory) into place: a shard on disk is always a whole one."""
    os.replace(temporary, final)


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def finished_shards(path: Path, kind: JobKind, n: int) -> list[int]:
    """The shards of a job of ``n`` shards that are on disk (written whole: see :func:`commit`).

    Example:
        >>> kind = JobKind("f", "F", "the settings", "open_f", ".bin")
        >>> _ = (getfixture("tmp_path") / kind.shard_name(1)).write_text("done")
        >>> finished_shards(getfixture("tmp_path"), kind, 3)
        [1]
    """
    return [s for s in range(n) if (Path(path) / kind.shard_name(s)).exists()]


def _differences(manifest: dict, planned: dict, kind: JobKind) -> list[str]:
    """What differs between a run's manifest and this run's plan, each named with both values."""
    names = {"weights": "the model weights", "tokenizer": "the tokenizer", "texts": "the texts"}
    found = []
    for key, what in names.items():
        if manifest["fingerprints"][key] != planned["fingerprints"][key]:
            found.append(f"{what} (fingerprint {manifest['fingerprints'][key][:12]}… on disk, "
                         f"{planned['fingerprints'][key][:12]}… now)")  # fmt: skip
    old, new = manifest["settings"], planned["settings"]
    changed = [key for key in sorted({*old, *new}) if old.get(key) != new.get(key)]
    if changed:
        found.append(f"{kind.settings} (" + "; ".join(f"{key}: {old.get(key)!r} on disk, {new.get(key)!r} now"
                                                      for key in changed) + ")")  # fmt: skip
    for key, what in (("n_texts", "the number of texts"), ("shard_size", "the shard size")):
        if manifest[key] != planned[key]:
            found.append(f"{what} ({manifest[key]} on disk, {planned[key]} now)")
    return found


def _prepare(path: Path, planned: dict, kind: JobKind, *, recompute: bool, reassign: bool, finished_ok: bool) -> None:
    """Rank 0: check that ``path`` is new, empty or this job's run, and write or update its manifest."""
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path} is a file; {kind.call} writes a directory of shards: choose another path")
    exists = (path / MANIFEST).is_file()
    if path.is_dir() and not exists and any(path.iterdir()):
        raise ValueError(f"{path} holds other files and no {kind.call} manifest; choose a new or empty directory")
    if exists:
        read_manifest(path, kind)  # only a run's directory is cleaned or emptied
    for stale in path.glob(f"{_TEMPORARY}*") if path.is_dir() else ():
        _remove(stale)  # a shard being written when a run was killed
    if exists and recompute:
        for entry in path.glob(f"shard-*{kind.suffix}"):
            _remove(entry)
        for name in kind.files:
            (path / name).unlink(missing_ok=True)
        exists = False
    if exists:
        manifest = read_manifest(path, kind)
        found = _differences(manifest, planned, kind)
        if found:
            raise ValueError(
                f"{path} holds another job; it differs in " + "; ".join(found) + ". Resume it with the same model, "
                f"tokenizer, {kind.settings.removeprefix('the ')} and texts, pass recompute=True to replace it, or "
                "choose another path"
            )
        missing = sorted(set(range(planned["n_shards"])) - set(finished_shards(path, kind, planned["n_shards"])))
        if not missing:
            if finished_ok:
                return
            raise FileExistsError(
                f"{path} is finished: load it with {kind.opener}({str(path)!r}), or pass recompute=True to compute "
                "it again"
            )
        if manifest["world_size"] != planned["world_size"]:
            if not reassign:
                raise ValueError(
                    f"{path} was started by {manifest['world_size']} rank(s) and is resumed by "
                    f"{planned['world_size']}: resume with the same number of ranks (--nproc-per-node="
                    f"{manifest['world_size']}), or pass reassign=True to split the {len(missing)} missing shards "
                    "among these ranks (shard boundaries are fixed, so the results do not depend on it)"
                )
            manifest["world_size"] = planned["world_size"]
            write_manifest(path, manifest)
        return
    path.mkdir(parents=True, exist_ok=True)
    write_manifest(path, planned)


# ------------------------------------------------------------------------------------------------ process group
class Group:
    """The collectives of a ``torch.distributed`` group, or their one-process equivalents without one.

    Example:
        >>> group = Group(None)
        >>> group.rank, group.world, group.broadcast("x"), group.gather(3)
        (0, 1, 'x', [3])
    """

    def __init__(self, group):
        self.group = group
        self.rank, self.world = 0, 1
        if group is not None:
            import torch.distributed as dist

            self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)

    def barrier(self) -> None:
        if self.group is not None:
            import torch.distributed as dist

            dist.barrier(group=self.group)

    def broadcast(self, value):
        """Rank 0's ``value`` on every rank."""
        if self.group is None:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=dist.get_global_rank(self.group, 0), group=self.group)
        return box[0]

    def gather(self, value) -> list:
        """Every rank's ``value``, in rank order, on every rank."""
        if self.group is None:
            return [value]
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, value, group=self.group)
        return out

    def raise_any(self, error: tuple[str, str] | None) -> None:
        """Raise on every rank the first error any rank met (so that no rank waits on a barrier forever)."""
        errors = [e for e in self.gather(error) if e is not None]
        if errors:
            kind, message = errors[0]
            raise _ERRORS.get(kind, ValueError)(message)


_ERRORS = {e.__name__: e for e in (FileExistsError, NotADirectoryError, RuntimeError, ValueError)}


def error_of(exc: Exception) -> tuple[str, str]:
    """An exception as ``(class name, message)``, to send to the other ranks (:meth:`Group.raise_any`)."""
    return (type(exc).__name__, str(exc))


def start_job(
    path: Path,
    planned: dict,
    kind: JobKind,
    group: Group,
    *,
    recompute: bool = False,
    reassign: bool = False,
    finished_ok: bool = False,
) -> tuple[list[int], list[int]]:
    """Start a run of the job ``planned`` at ``path`` on every rank of ``group``: rank 0 prepares the directory (see
    the module docstring), every rank checks its fingerprints against the manifest, and an error on any rank is
    raised on all. Returns ``(done, todo)``: the shards already on disk, and this rank's missing ones (the shards
    ``s`` with ``s % world == rank``).

    Example:
        >>> kind = JobKind("f", "F", "the settings", "open_f", ".bin")
        >>> run = getfixture("tmp_path") / "run"
        >>> planned = planned_manifest(kind, model, tokenizer, ["a", "b", "c"], shard_size=2, world_size=1,
        ...                            settings={})
        >>> start_job(run, planned, kind, Group(None))
        ([], [0, 1])
        >>> _ = (run / kind.shard_name(0)).write_text("done")
        >>> start_job(run, planned, kind, Group(None))  # a resume: only the missing shard
        ([0], [1])
        >>> _ = (run / kind.shard_name(1)).write_text("done")
        >>> start_job(run, planned, kind, Group(None))
        Traceback (most recent call last):
        ...
        FileExistsError: ... is finished: load it with open_f('...'), or pass recompute=True to compute it again
    """
    path = Path(path)
    if group.group is None:
        _prepare(path, planned, kind, recompute=recompute, reassign=reassign, finished_ok=finished_ok)
    else:  # an error of rank 0 is raised on every rank
        error = None
        if group.rank == 0:
            try:
                _prepare(path, planned, kind, recompute=recompute, reassign=reassign, finished_ok=finished_ok)
            except Exception as exc:  # noqa: BLE001 (re-raised below, on every rank)
                error = error_of(exc)
        group.raise_any(error)
    error = None
    try:
        found = _differences(read_manifest(path, kind), planned, kind)
    except ValueError as exc:
        found = [str(exc)]
    if found:
        error = ("ValueError", f"rank {group.rank} differs from rank 0's run at {path}: " + "; ".join(found))
    group.raise_any(error)
    done = group.broadcast(finished_shards(path, kind, planned["n_shards"]))
    todo = [s for s in range(planned["n_shards"]) if s not in set(done) and s % group.world == group.rank]
    return done, todo
