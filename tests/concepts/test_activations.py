"""Activation collection: values against direct forward passes, metadata, pooling, disk streaming, shards, errors."""

from __future__ import annotations

import copy
import gc
import os

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
    with pytest.raises(FileExistsError, match="not empty"):
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
    assert shards == ["shard-00000", "shard-00001"]
    merged = ActivationStore.open(tmp_path / "acts")
    assert merged.texts == TEXTS[:9]
    np.testing.assert_array_equal(merged.text_ids, single.text_ids)
    np.testing.assert_allclose(merged[:], single[:], atol=1e-5)
    for rank in (0, 1):  # every rank got the whole store back
        np.testing.assert_array_equal(np.load(tmp_path / f"rank{rank}.npy"), merged[:])
        np.testing.assert_array_equal(np.load(tmp_path / f"rank{rank}-ids.npy"), merged.text_ids)
    first = ActivationStore.open(tmp_path / "acts" / "shard-00000")
    assert set(first.text_ids.tolist()) == set(range(len(first.texts)))  # shard-local ids, renumbered when merged
    (tmp_path / "acts" / "shard-00001" / "manifest.json").unlink()
    with pytest.raises((ValueError, FileNotFoundError)):
        ActivationStore.open(tmp_path / "acts")


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
