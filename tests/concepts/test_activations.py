"""Activation collection: values against direct forward passes, metadata, pooling, disk streaming, shards, resuming
a collection to a path (after an error, a partly written shard, a SIGKILL of two gloo ranks), refusals, errors."""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import os
import shutil
import time

import numpy as np
import pytest
import torch

from interp_widgets.adapter import ModelAdapter
from interp_widgets.concepts import ActivationStore, collect_activations
from interp_widgets.concepts.activations import _DiskChunk, parse_bytes
from interp_widgets.demo import corpus
from tests.conftest import model_fingerprint

TEXTS = corpus()[:40]


def hidden_states(model, tokenizer, text, block):
    """Hidden state after transformer block ``block`` from a plain single-text forward pass."""
    enc = tokenizer(text, return_tensors="pt")
    with torch.no_grad():  # a copy: transformers 5 adds permanent capture hooks on first output_hidden_states=True
        out = copy.deepcopy(model)(**enc, output_hidden_states=True)
    return out.hidden_states[block + 1][0].numpy(), enc


@pytest.mark.parametrize("fixture", ["bert_masked_lm", "gpt2_lm", "llama_lm"])
def test_token_rows_match_single_text_forward(fixture, request):
    model, tokenizer = request.getfixturevalue(fixture)
    before = model_fingerprint(model, tokenizer)
    store = collect_activations(model, tokenizer, TEXTS, layer="layer:0", progress=False, max_batch_tokens=300)
    assert model_fingerprint(model, tokenizer) == before
    assert store.layer == "layer:0" and store.unit == "token" and store.in_memory
    assert np.all(np.diff(store.text_ids) >= 0)
    for text_id in (0, 7, 39):
        hidden, enc = hidden_states(model, tokenizer, TEXTS[text_id], 0)
        special = np.asarray(
            tokenizer.get_special_tokens_mask(enc["input_ids"][0].tolist(), already_has_special_tokens=True), bool
        )
        rows = store.text_rows(text_id)
        np.testing.assert_allclose(store[rows], hidden[~special], atol=2e-5)
        np.testing.assert_array_equal(store.positions[rows], np.flatnonzero(~special))
        np.testing.assert_array_equal(store.token_ids[rows], enc["input_ids"][0].numpy()[~special])
        encoding = ModelAdapter(model, tokenizer).encode(TEXTS[text_id])
        assert store.tokens(rows) == [encoding.tokens[i] for i in np.flatnonzero(~special)]
        np.testing.assert_array_equal(store.offsets[rows], encoding.offsets[~special])


@pytest.mark.parametrize("fixture", ["gpt2_lm", "llama_lm", "bert_masked_lm"])
def test_length_sorted_batches_equal_one_text_at_a_time(fixture, request, monkeypatch):
    """Texts of very different lengths, sorted by length into padded batches in several windows, give the rows of
    one forward pass per text, in text order. Tolerance: float32 rounding of differently blocked matrix products
    (observed ~1e-6; 1e-5 allowed)."""
    from interp_widgets.concepts import activations

    model, tokenizer = request.getfixturevalue(fixture)
    texts = [" ".join(" ".join([TEXTS[i]] * 3).split()[: 1 + (i * 7) % 50]) for i in range(len(TEXTS))]  # 1-50 words
    batches = []
    original = ModelAdapter.length_buckets

    def recording(self, lengths, **options):
        found = original(self, lengths, **options)
        batches.append([[lengths[i] for i in batch] for batch in found])
        return found

    monkeypatch.setattr(ModelAdapter, "length_buckets", recording)
    monkeypatch.setattr(activations, "_WINDOW_TEXTS", 16)  # three windows of texts sorted by length
    before = model_fingerprint(model, tokenizer)
    batched = collect_activations(model, tokenizer, texts, layer="layer:1", progress=False)
    windows, batches = batches, []
    alone = collect_activations(model, tokenizer, texts, layer="layer:1", progress=False, max_batch_tokens=1)
    assert model_fingerprint(model, tokenizer) == before
    assert len(windows) == 3 and all(len(batch) == 1 for window in batches for batch in window)
    padded = [b for window in windows for b in window if len(set(b)) > 1]
    assert padded and max(len(b) for b in padded) > 2  # several texts of different lengths shared a padded pass
    for window in windows:  # and no pass padded more than 5 % of its tokens
        assert all(len(b) * max(b) - sum(b) <= 0.05 * len(b) * max(b) for b in window)
    assert len(batched) == len(alone) and batched.texts == alone.texts == texts
    for name in ("text_ids", "positions", "token_ids", "offsets"):
        np.testing.assert_array_equal(getattr(batched, name), getattr(alone, name))
    assert np.all(np.diff(batched.text_ids) >= 0) and set(batched.text_ids) == set(range(len(texts)))
    np.testing.assert_allclose(batched[:], alone[:], rtol=1e-5, atol=1e-5)
    pooled = collect_activations(
        model, tokenizer, texts, layer="layer:1", unit="sentence", pooling="mean", progress=False
    )
    pooled_alone = collect_activations(
        model, tokenizer, texts, layer="layer:1", unit="sentence", pooling="mean", progress=False, max_batch_tokens=1
    )
    np.testing.assert_allclose(pooled[:], pooled_alone[:], rtol=1e-5, atol=1e-5)


def test_special_tokens_kept_on_request(bert_masked_lm):
    model, tokenizer = bert_masked_lm
    store = collect_activations(model, tokenizer, TEXTS[:3], layer=1, include_special=True, progress=False)
    rows = store.text_rows(1)
    tokens = store.tokens(rows)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    hidden, _ = hidden_states(model, tokenizer, TEXTS[1], 1)
    np.testing.assert_allclose(store[rows], hidden, atol=2e-5)
    frame = store.metadata(rows)
    assert list(frame.columns) == ["row", "text_id", "position", "token", "start", "end", "token_id"]
    assert frame["position"].tolist() == list(range(len(hidden)))


def test_sentence_pooling_cls_mean_last(bert_masked_lm, gpt2_lm):
    model, tokenizer = bert_masked_lm
    cls = collect_activations(model, tokenizer, TEXTS[:5], layer=1, unit="sentence", progress=False)
    mean = collect_activations(model, tokenizer, TEXTS[:5], layer=1, unit="sentence", pooling="mean", progress=False)
    last = collect_activations(model, tokenizer, TEXTS[:5], layer=1, unit="sentence", pooling="last", progress=False)
    assert cls.info["pooling"] == "cls" and len(cls) == 5
    for i, text in enumerate(TEXTS[:5]):
        hidden, _ = hidden_states(model, tokenizer, text, 1)
        np.testing.assert_allclose(cls[i], hidden[0], atol=2e-5)
        np.testing.assert_allclose(mean[i], hidden[1:-1].mean(0), atol=2e-5)
        np.testing.assert_allclose(last[i], hidden[-2], atol=2e-5)  # last non-special token, before [SEP]
    assert cls.tokens([2]) == [TEXTS[2]]
    lm, lm_tokenizer = gpt2_lm
    pooled = collect_activations(lm, lm_tokenizer, TEXTS[:3], layer=0, unit="sentence", progress=False)
    assert pooled.info["pooling"] == "last"
    hidden, _ = hidden_states(lm, lm_tokenizer, TEXTS[2], 0)
    np.testing.assert_allclose(pooled[2], hidden[-1], atol=2e-5)
    with pytest.raises(ValueError, match="CLS"):
        collect_activations(lm, lm_tokenizer, TEXTS[:2], layer=0, unit="sentence", pooling="cls", progress=False)


def test_budget_spills_to_disk_and_reads_back_lazily(bert_masked_lm, tmp_path):
    model, tokenizer = bert_masked_lm
    memory = collect_activations(model, tokenizer, TEXTS, layer=1, progress=False)
    disk = collect_activations(model, tokenizer, TEXTS, layer=1, progress=False, memory_budget="20KB")
    assert not disk.in_memory and len(disk._chunks) > 3
    assert all(isinstance(c, _DiskChunk) for c in disk._chunks)
    full = disk[:]
    # a 20 kB budget sorts texts by length in runs of one or two texts: other batches, the same rows to rounding
    np.testing.assert_allclose(full, memory[:], rtol=0, atol=1e-5)
    np.testing.assert_array_equal(disk.text_ids, memory.text_ids)
    np.testing.assert_array_equal(disk.positions, memory.positions)
    assert disk.tokens() == memory.tokens()
    picks = np.array([5, 0, len(disk) - 1, 17, 5])
    np.testing.assert_array_equal(disk[picks], full[picks])
    np.testing.assert_array_equal(disk[-1], full[-1])
    blocks = list(disk.iter_chunks(37))
    assert [s for s, _ in blocks] == list(range(0, len(disk), 37))
    np.testing.assert_array_equal(np.concatenate([b for _, b in blocks]), full)
    batches = list(disk.minibatches(64, seed=3))
    assert all(len(b) == 64 for b in batches[:-1])
    seen = np.concatenate(batches)
    assert len(seen) == len(memory)
    np.testing.assert_array_equal(np.sort(seen, axis=0), np.sort(full, axis=0))  # every row exactly once
    sample = disk.sample(50, seed=1)
    assert len(np.unique(sample, axis=0)) == 50
    directory = disk.directory
    assert directory.exists()
    saved = memory.save(tmp_path / "saved")
    reopened = ActivationStore.open(saved)
    np.testing.assert_array_equal(reopened[:], memory[:])
    assert reopened.texts == TEXTS and reopened.layer == memory.layer
    del disk, blocks
    gc.collect()
    assert not directory.exists()  # the temporary spill directory goes with the store


def test_explicit_path_persists(gpt2_lm, tmp_path):
    model, tokenizer = gpt2_lm
    store = collect_activations(model, tokenizer, TEXTS[:10], layer=1, path=tmp_path / "acts", progress=False)
    assert not store.in_memory and (tmp_path / "acts" / "manifest.json").is_file()
    again = ActivationStore.open(tmp_path / "acts")
    np.testing.assert_array_equal(again[:], store[:])
    # a collection to a path resumes (test_resume_*): the same call on a finished one, and another job, are refused
    with pytest.raises(FileExistsError, match="is finished"):
        collect_activations(model, tokenizer, TEXTS[:10], layer=1, path=tmp_path / "acts", progress=False)
    with pytest.raises(ValueError, match="differs in the texts"):
        collect_activations(model, tokenizer, TEXTS[:2], layer=1, path=tmp_path / "acts", progress=False)


def _distributed_worker(rank, world, directory, init_file):
    import torch.distributed as dist
    from transformers import AutoTokenizer, BertForMaskedLM

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model = BertForMaskedLM.from_pretrained(os.path.join(directory, "model")).eval()
        tokenizer = AutoTokenizer.from_pretrained(os.path.join(directory, "model"))
        store = collect_activations(
            model,
            tokenizer,
            TEXTS[:9],
            layer=1,
            path=os.path.join(directory, "acts"),
            process_group=dist.group.WORLD,
            progress=False,
        )
        np.save(os.path.join(directory, f"rank{rank}.npy"), store[:])
        np.save(os.path.join(directory, f"rank{rank}-ids.npy"), store.text_ids)
    finally:
        dist.destroy_process_group()


def test_distributed_shards_read_as_one(bert_masked_lm, tmp_path):
    import torch.multiprocessing as mp

    model, tokenizer = bert_masked_lm
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    # fork keeps the test fast (no re-import of torch and transformers); workers run single-threaded
    mp.start_processes(
        _distributed_worker, args=(2, str(tmp_path), str(tmp_path / "init")), nprocs=2, join=True, start_method="fork"
    )
    single = collect_activations(model, tokenizer, TEXTS[:9], layer=1, progress=False)
    shards = sorted(p.name for p in (tmp_path / "acts").iterdir())
    assert shards == ["manifest.json", *(f"shard-{s:06d}" for s in range(9))]  # 9 texts: the default 1 per shard
    merged = ActivationStore.open(tmp_path / "acts")
    assert merged.texts == TEXTS[:9]
    np.testing.assert_array_equal(merged.text_ids, single.text_ids)
    np.testing.assert_allclose(merged[:], single[:], atol=1e-5)
    for rank in (0, 1):  # every rank got the whole store back
        np.testing.assert_array_equal(np.load(tmp_path / f"rank{rank}.npy"), merged[:])
        np.testing.assert_array_equal(np.load(tmp_path / f"rank{rank}-ids.npy"), merged.text_ids)
    first = ActivationStore.open(tmp_path / "acts" / "shard-000000")
    assert set(first.text_ids.tolist()) == set(range(len(first.texts)))  # shard-local ids, renumbered when merged
    (tmp_path / "acts" / "shard-000001" / "manifest.json").unlink()
    with pytest.raises((ValueError, FileNotFoundError)):
        ActivationStore.open(tmp_path / "acts")


# ------------------------------------------------------------------------------------------------ resuming a collection
# 4 shards of 3 texts of nearly one length, so that each shard is one padded pass of GPT-2. Here the rows of shards 2
# and 3 in one pass differ in their last bits from one pass per text (shards of other texts may not), so a resume in
# other batches fails the bitwise comparisons. GPT-2 reads the last text's leading space as a spanless "Ġ".
JOB = [t for i in (1, 2, 10, 0) for t in (TEXTS[i], TEXTS[i][:-1], TEXTS[i][:-1] + "!")]
JOB[-1] = " " + JOB[-1]
JOB_KW = {"layer": 1, "shard_size": 3, "progress": False}


def assert_same_store(a, b):
    """Bitwise equality of two stores: every row's bytes, the row metadata, the texts, the tokens and the info."""
    assert a.shape == b.shape and a[:].tobytes() == b[:].tobytes()
    for name in ("text_ids", "positions", "token_ids", "offsets"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.texts == b.texts and a.tokens() == b.tokens() and a.info == b.info


def shard_stamps(path):
    """(inode, mtime) of every finished shard's store manifest: a shard written again gets another stamp."""
    return {p.parent.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in path.glob("shard-*/manifest.json")}


@contextlib.contextmanager
def recording(model, monkeypatch, fail_after=None):
    """What collections run inside the block: the texts they encode (``encoded``), the rows of ``model``'s forward
    passes (``rows``) and their progress bars (``bars``: total, initial, final count). With ``fail_after``, a forward
    pass that starts once that many rows have run raises, from inside the model, ``RuntimeError("killed part-way")``."""
    import tqdm.auto

    record = {"encoded": [], "rows": 0, "bars": []}

    class Bar:
        def __init__(self, *args, total=None, initial=0, **options):
            self.total, self.initial, self.n = total, initial, initial
            record["bars"].append(self)

        def update(self, n=1):
            self.n += n

        def close(self):
            pass

    plain = ModelAdapter.encode

    def encode(self, text, **options):
        record["encoded"].append(text)
        return plain(self, text, **options)

    def forward(module, args):
        if fail_after is not None and record["rows"] >= fail_after:
            raise RuntimeError("killed part-way")
        record["rows"] += args[0].shape[0]

    handle = model.get_input_embeddings().register_forward_pre_hook(forward)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(ModelAdapter, "encode", encode)
            patch.setattr(tqdm.auto, "tqdm", Bar)
            yield record
    finally:
        handle.remove()


@pytest.fixture(scope="module")
def uninterrupted(gpt2_lm, tmp_path_factory):
    """The store of an uninterrupted collection of ``JOB`` to a path."""
    model, tokenizer = gpt2_lm
    return collect_activations(model, tokenizer, JOB, path=tmp_path_factory.mktemp("acts") / "uninterrupted", **JOB_KW)


def test_resume_after_an_error_in_the_forward_pass(gpt2_lm, uninterrupted, tmp_path, monkeypatch):
    model, tokenizer = gpt2_lm
    path = tmp_path / "run"
    before = model_fingerprint(model, tokenizer)
    with recording(model, monkeypatch, fail_after=6) as first, pytest.raises(RuntimeError, match="killed part-way"):
        collect_activations(model, tokenizer, JOB, path=path, **JOB_KW)
    assert model_fingerprint(model, tokenizer) == before  # weights, modes, and no hook of the collection left
    assert first["rows"] == 6 and sorted(p.name for p in path.glob("shard-*")) == ["shard-000000", "shard-000001"]
    with pytest.raises(FileNotFoundError, match=r"2 of its 4 shards are missing \(2, 3\); re-run the same collect_"):
        ActivationStore.open(path)
    stamps = shard_stamps(path)
    with recording(model, monkeypatch) as resumed:
        store = collect_activations(model, tokenizer, JOB, path=path, **JOB_KW)
    assert model_fingerprint(model, tokenizer) == before
    # only the two missing shards ran (each text in one forward row); the finished ones were not written again
    assert resumed["encoded"] == JOB[6:] and resumed["rows"] == 6
    assert {name: stamp for name, stamp in shard_stamps(path).items() if name in stamps} == stamps
    [bar] = resumed["bars"]
    assert (bar.total, bar.initial, bar.n) == (12, 6, 12)  # the bar starts at the texts already collected
    assert_same_store(store, uninterrupted)
    assert_same_store(ActivationStore.open(path), uninterrupted)
    assert store.directory == path and not store.in_memory and not list(path.glob(".tmp-*"))
    # and the shards read as the store of one collection in memory (other batches: the same rows up to rounding)
    alone = collect_activations(model, tokenizer, JOB, layer=1, progress=False)
    np.testing.assert_allclose(store[:], alone[:], rtol=1e-5, atol=1e-5)
    for name in ("text_ids", "positions", "token_ids", "offsets"):
        np.testing.assert_array_equal(getattr(store, name), getattr(alone, name))
    assert store.texts == alone.texts and store.tokens() == alone.tokens()  # the last shard's "Ġ" included
    assert (
        "Ġ" in store.info["spanless_tokens"].values() and store.info["spanless_tokens"] == alone.info["spanless_tokens"]
    )


def test_resume_redoes_a_partly_written_shard(gpt2_lm, uninterrupted, tmp_path, monkeypatch):
    from interp_widgets.concepts import activations

    model, tokenizer = gpt2_lm
    path = tmp_path / "run"
    plain = activations._ChunkWriter.finish

    def killed_while_writing(self, meta, texts, info):  # shard 1's chunks are on disk, its metadata never will be
        if info["shard"] == 1:
            raise OSError("killed while writing")
        plain(self, meta, texts, info)

    with monkeypatch.context() as patch, pytest.raises(OSError, match="killed while writing"):
        patch.setattr(activations._ChunkWriter, "finish", killed_while_writing)
        collect_activations(model, tokenizer, JOB, path=path, **JOB_KW)
    [partial] = path.glob(".tmp-*")
    assert any(partial.glob("chunk-*.npy")) and not (partial / "manifest.json").exists()
    partial = partial.rename(path / ".tmp-1-shard-000001")  # as a killed process (another pid) leaves it
    assert sorted(p.name for p in path.glob("shard-*")) == ["shard-000000"]  # the partial shard is not in place
    with recording(model, monkeypatch) as resumed:
        store = collect_activations(model, tokenizer, JOB, path=path, **JOB_KW)
    assert resumed["encoded"] == JOB[3:] and not partial.exists()
    assert_same_store(store, uninterrupted)


def test_resume_refusals(bert_masked_lm, tmp_path, monkeypatch):
    """attribute_corpus's rules: a finished job is refused unless recompute=True; another model, tokenizer, layer,
    setting, texts or shard size is refused naming what differs; another world size needs reassign=True."""
    model, tokenizer = bert_masked_lm
    texts, path = TEXTS[:6], tmp_path / "run"
    kw = {"layer": 1, "path": path, "shard_size": 2, "progress": False}
    collect_activations(model, tokenizer, texts, **kw)
    with pytest.raises(FileExistsError, match=r"is finished: load it with ActivationStore\.open\(.*recompute=True"):
        collect_activations(model, tokenizer, texts, **kw)
    shutil.rmtree(path / "shard-000001")  # an unfinished job: resuming it with anything else is refused
    other = copy.deepcopy(model)
    with torch.no_grad():
        next(other.parameters()).view(-1)[0] += 1e-3
    other_tokenizer = copy.deepcopy(tokenizer)
    other_tokenizer.add_tokens(["zzqx"])
    with recording(model, monkeypatch) as refused:
        with pytest.raises(ValueError, match="differs in the model weights") as err:
            collect_activations(other, tokenizer, texts, **kw)
        assert "the collection settings (" not in str(err.value) and "recompute=True" in str(err.value)
        with pytest.raises(ValueError, match="differs in the tokenizer"):
            collect_activations(model, other_tokenizer, texts, **kw)
        fix = r"Resume it with the same model, tokenizer, collection settings and texts, pass recompute=True"
        with pytest.raises(
            ValueError, match=r"the collection settings \(layer: 'layer:1' on disk, 'layer:0' now\)\. " + fix
        ):
            collect_activations(model, tokenizer, texts, **{**kw, "layer": 0})
        with pytest.raises(
            ValueError, match=r"pooling: None on disk, 'cls' now; unit: 'token' on disk, 'sentence' now"
        ):
            collect_activations(model, tokenizer, texts, **kw, unit="sentence")
        for setting in ({"include_special": True}, {"max_batch_tokens": 64}, {"memory_budget": "1MB"}):
            with pytest.raises(ValueError, match=f"the collection settings \\({next(iter(setting))}: "):
                collect_activations(model, tokenizer, texts, **kw, **setting)
        with pytest.raises(ValueError, match="differs in the texts"):
            collect_activations(model, tokenizer, texts[::-1], **kw)
        with pytest.raises(ValueError, match=r"the shard size \(2 on disk, 3 now\)"):
            collect_activations(model, tokenizer, texts, **{**kw, "shard_size": 3})
        # a changed world size: this job was started by one process; claim it was started by two
        manifest = json.loads((path / "manifest.json").read_text())
        (path / "manifest.json").write_text(json.dumps({**manifest, "world_size": 2}))
        with pytest.raises(ValueError, match=r"started by 2 rank\(s\) and is resumed by 1: resume with the same "
                                             r"number of ranks \(--nproc-per-node=2\), or pass reassign=True"):  # fmt: skip
            collect_activations(model, tokenizer, texts, **kw)
    assert refused["encoded"] == [] and refused["bars"] == []  # refused before anything ran
    with recording(model, monkeypatch) as resumed:
        store = collect_activations(model, tokenizer, texts, **kw, reassign=True)
    assert resumed["encoded"] == texts[2:4] and json.loads((path / "manifest.json").read_text())["world_size"] == 1
    assert_same_store(store, collect_activations(model, tokenizer, texts, **{**kw, "path": tmp_path / "reference"}))
    # recompute=True replaces a finished job, even with other settings
    replaced = collect_activations(model, tokenizer, texts, **{**kw, "layer": 0}, recompute=True)
    assert replaced.layer == "layer:0" and replaced.directory == path
    # directories that hold no collection of this kind
    store.save(tmp_path / "saved")
    with pytest.raises(ValueError, match="is not the manifest of a collect_activations run"):
        collect_activations(model, tokenizer, texts, **{**kw, "path": tmp_path / "saved"})
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds other files and no collect_activations manifest"):
        collect_activations(model, tokenizer, texts, **{**kw, "path": tmp_path / "other"})
    with pytest.raises(ValueError, match="shard_size must be at least 1"):
        collect_activations(model, tokenizer, texts, **{**kw, "path": tmp_path / "new", "shard_size": 0})
    assert not (tmp_path / "new").exists()


DDP_JOB = TEXTS[:16]  # 8 shards of 2 texts, 4 for each of two ranks


def _job_worker(rank, world, directory, run, init, delay):
    """One gloo rank collecting ``DDP_JOB`` to ``directory/run`` (``init``: the rendezvous file, new for each launch);
    it writes the texts it encoded and the store it got back. ``delay`` sleeps before each forward pass, so that a
    test can kill the run part-way."""
    import torch.distributed as dist
    from transformers import AutoTokenizer, BertForMaskedLM

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        model = BertForMaskedLM.from_pretrained(os.path.join(directory, "model")).eval()
        tokenizer = AutoTokenizer.from_pretrained(os.path.join(directory, "model"))
        encoded = []
        plain = ModelAdapter.encode

        def encode(self, text, **options):
            encoded.append(text)
            return plain(self, text, **options)

        ModelAdapter.encode = encode  # this forked process's class only
        if delay:
            model.get_input_embeddings().register_forward_pre_hook(lambda module, args: time.sleep(delay))
        store = collect_activations(model, tokenizer, DDP_JOB, layer=1, path=os.path.join(directory, run),
                                    process_group=dist.group.WORLD, shard_size=2, progress=False)  # fmt: skip
        np.save(os.path.join(directory, f"{run}-rank{rank}.npy"), store[:])
        with open(os.path.join(directory, f"{run}-rank{rank}.json"), "w") as handle:
            json.dump(encoded, handle)
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_resume_a_killed_collection(bert_masked_lm, tmp_path):
    import multiprocessing

    from transformers import AutoTokenizer, BertForMaskedLM

    model, tokenizer = bert_masked_lm
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    fork = multiprocessing.get_context("fork")  # fast: no re-import of torch and transformers

    launches = []

    def start(run, delay=0.0):
        init = tmp_path / f"init-{len(launches)}"  # a rendezvous file of a killed launch must not be reused
        ranks = [fork.Process(target=_job_worker, args=(r, 2, str(tmp_path), run, str(init), delay), daemon=True)
                 for r in range(2)]  # fmt: skip
        for process in ranks:
            process.start()
        launches.append(ranks)
        return ranks

    def finish(ranks):
        for process in ranks:
            process.join(60)
        for process in ranks:  # a rank that hangs fails the test, and goes
            if process.is_alive():
                process.kill()
                process.join()
        assert [p.exitcode for p in ranks] == [0, 0]

    finish(start("uninterrupted"))
    killed = tmp_path / "killed"
    ranks = start("killed", delay=0.5)
    deadline = time.monotonic() + 90
    while len(list(killed.glob("shard-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(p.is_alive() for p in ranks), "the run finished before it could be killed"
    for process in ranks:
        process.kill()  # SIGKILL
        process.join()
    kept = sorted(int(p.name[6:]) for p in killed.glob("shard-*"))
    assert 2 <= len(kept) < 8
    # one process cannot resume what two started (the same weights and tokenizer as the ranks')
    saved = (
        BertForMaskedLM.from_pretrained(tmp_path / "model").eval(),
        AutoTokenizer.from_pretrained(tmp_path / "model"),
    )
    with pytest.raises(ValueError, match=r"resume with the same number of ranks \(--nproc-per-node=2\)"):
        collect_activations(*saved, DDP_JOB, layer=1, path=killed, shard_size=2, progress=False)
    stamps = shard_stamps(killed)
    finish(start("killed"))
    encoded = [t for r in range(2) for t in json.loads((tmp_path / f"killed-rank{r}.json").read_text())]
    missing = [DDP_JOB[i] for s in range(8) if s not in kept for i in (2 * s, 2 * s + 1)]
    assert sorted(encoded) == sorted(missing)  # only the missing shards, split between the ranks
    assert {name: stamp for name, stamp in shard_stamps(killed).items() if name in stamps} == stamps
    resumed, reference = ActivationStore.open(killed), ActivationStore.open(tmp_path / "uninterrupted")
    assert_same_store(resumed, reference)
    assert not list(killed.glob(".tmp-*"))
    for rank in (0, 1):  # every rank got the whole store back
        assert np.load(tmp_path / f"killed-rank{rank}.npy").tobytes() == reference[:].tobytes()


def test_modes_restored_for_model_in_train_mode(bert_classifier):
    model, tokenizer = bert_classifier
    model.train()
    try:
        before = model_fingerprint(model, tokenizer)
        a = collect_activations(model, tokenizer, TEXTS[:4], layer=0, progress=False)
        b = collect_activations(model, tokenizer, TEXTS[:4], layer=0, progress=False)
        np.testing.assert_array_equal(a[:], b[:])  # dropout was off during collection
        assert model_fingerprint(model, tokenizer) == before
    finally:
        model.eval()


def test_bad_input_errors(bert_masked_lm, tmp_path):
    model, tokenizer = bert_masked_lm
    kwargs = {"progress": False}
    with pytest.raises(ValueError, match="unknown layer"):
        collect_activations(model, tokenizer, TEXTS[:2], layer="encoder.nope", **kwargs)
    with pytest.raises(ValueError, match="out of range"):
        collect_activations(model, tokenizer, TEXTS[:2], layer=7, **kwargs)
    with pytest.raises(ValueError, match="no texts"):
        collect_activations(model, tokenizer, [], layer=0, **kwargs)
    with pytest.raises(ValueError, match="text 1"):
        collect_activations(model, tokenizer, ["fine", "   "], layer=0, **kwargs)
    for bad, got in ((None, "got None"), (42, "got a int"), (["fine", 3], r"texts\[1\] is a int")):
        with pytest.raises(TypeError, match=rf"{got}.*collect_activations\(model, tokenizer, \["):
            collect_activations(model, tokenizer, bad, layer=0, **kwargs)
    generated = collect_activations(model, tokenizer, (t for t in TEXTS[:2]), layer=0, **kwargs)
    assert generated.shape == collect_activations(model, tokenizer, TEXTS[:2], layer=0, **kwargs).shape
    with pytest.raises(ValueError, match="unknown unit"):
        collect_activations(model, tokenizer, TEXTS[:2], layer=0, unit="word", **kwargs)
    with pytest.raises(ValueError, match="pooling applies"):
        collect_activations(model, tokenizer, TEXTS[:2], layer=0, pooling="mean", **kwargs)
    with pytest.raises(ValueError, match="unknown pooling"):
        collect_activations(model, tokenizer, TEXTS[:2], layer=0, unit="sentence", pooling="max", **kwargs)
    with pytest.raises(ValueError, match="path="):
        collect_activations(model, tokenizer, TEXTS[:2], layer=0, process_group=object(), **kwargs)
    with pytest.raises(ValueError, match="memory size"):
        collect_activations(model, tokenizer, TEXTS[:2], layer=0, memory_budget="lots", **kwargs)
    with pytest.raises(FileNotFoundError, match="no activation store"):
        ActivationStore.open(tmp_path)
    store = collect_activations(model, tokenizer, TEXTS[:2], layer=0, **kwargs)
    with pytest.raises(IndexError):
        store[len(store)]
    with pytest.raises(ValueError, match="text id"):
        store.text_rows(5)
    assert parse_bytes("1.5GB") == 1_500_000_000 and parse_bytes("2KiB") == 2048 and parse_bytes(10) == 10
