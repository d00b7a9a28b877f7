"""attribute_corpus: fixed shards on disk, bitwise equal to per-shard attribute calls, resumable after a real kill,
split across two gloo processes, and refusing what it cannot resume."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from interp_widgets.attribution import (
    AttributionCollection,
    CorpusAttribution,
    attribute,
    attribute_corpus,
    load_corpus,
)
from interp_widgets.demo import corpus
from tests.conftest import model_fingerprint

ROOT = Path(__file__).resolve().parents[2]
TEXTS = corpus()[:60]  # the worker's texts: 60 one-text shards, each 1.7 % of the job


def same(a, b) -> bool:
    """Bitwise equality of two results (every array's dtype, shape and bytes; the JSON metadata)."""
    x, y = a._arrays(), b._arrays()
    if x.keys() != y.keys():
        return False
    for k in x:
        if x[k].dtype != y[k].dtype or x[k].shape != y[k].shape or x[k].tobytes() != y[k].tobytes():
            return False
    return json.dumps(a._metadata(), sort_keys=True, default=str) == json.dumps(
        b._metadata(), sort_keys=True, default=str
    )


def assert_same_collections(a, b):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert same(x, y), f"result {i} differs"


def worker(path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.attribution.corpus_worker", str(path), *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(*processes: subprocess.Popen, timeout: float = 240) -> list[tuple[int, str]]:
    out = []
    for p in processes:
        _, err = p.communicate(timeout=timeout)
        out.append((p.returncode, err))
    return out


def shards(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("shard-*.safetensors"))


def journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "journal.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted single-process run of the worker's job."""
    path = tmp_path_factory.mktemp("corpus") / "reference"
    [(code, err)] = finish(worker(path))
    assert code == 0, err
    return path


# ------------------------------------------------------------------------------------------------ one process
def test_equals_per_shard_attribute_calls(bert_classifier, tmp_path):
    model, tokenizer = bert_classifier
    before = model_fingerprint(model, tokenizer)
    texts = TEXTS[:11]
    run = attribute_corpus(model, tokenizer, texts, method="saliency", path=tmp_path / "run", shard_size=4,
                           method_params={"reduce": "sum"}, progress=False)  # fmt: skip
    assert model_fingerprint(model, tokenizer) == before
    assert isinstance(run, CorpusAttribution) and isinstance(run, AttributionCollection)
    expected = []
    for s in range(3):
        part = attribute(model, tokenizer, texts[4 * s : 4 * s + 4], method="saliency",
                         method_params={"reduce": "sum", "progress": False})  # fmt: skip
        expected.extend(part)
    assert len(run) == 11 and run.n_shards == 3
    assert_same_collections(run, expected)
    assert same(run[-1], expected[10]) and same(run[5], expected[5])
    assert [r.text for r in run[2:6]] == texts[2:6]
    with pytest.raises(IndexError):
        run[11]
    frame = run.to_dataframe()
    assert frame.equals(AttributionCollection(expected).to_dataframe())
    # the files: one safetensors file per shard (no pickle anywhere) and a JSON manifest
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert names == ["journal.jsonl", "manifest.json", *[f"shard-{s:06d}.safetensors" for s in range(3)]]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["n_texts"] == 11 and manifest["shard_size"] == 4 and manifest["world_size"] == 1
    assert manifest["settings"]["method_params"] == {"reduce": "sum"}
    assert set(manifest["fingerprints"]) == {"weights", "tokenizer", "texts"}
    from safetensors import safe_open

    with safe_open(str(tmp_path / "run" / "shard-000002.safetensors"), "np") as handle:
        meta = json.loads(handle.metadata()["interp_widgets"])
        assert meta["texts"] == [8, 11] and len(meta["results"]) == 3
        assert meta["passes"] == expected[8].params["passes"]
        assert "0/scores" in set(handle.keys())
    for file in (tmp_path / "run").iterdir():
        assert b"pickle" not in file.read_bytes()[:64]
    again = load_corpus(tmp_path / "run")
    assert_same_collections(again, expected)
    assert run.work() == {"rows": 11, "backward_rows": 11, "rows_kept": 11, "shards_computed": 3, "shards_lost": 0,
                          "runs": 1}  # fmt: skip


def test_lazy_reads_one_shard(bert_classifier, tmp_path, monkeypatch):
    import interp_widgets.attribution.corpus as module

    model, tokenizer = bert_classifier
    attribute_corpus(model, tokenizer, TEXTS[:10], method="saliency", path=tmp_path / "run", shard_size=3,
                     progress=False)  # fmt: skip
    read = []
    plain = module._read_shard
    monkeypatch.setattr(module, "_read_shard", lambda file: read.append(file.name) or plain(file))
    run = load_corpus(tmp_path / "run")
    assert len(run) == 10 and read == []
    assert run[7].text == TEXTS[7] and read == ["shard-000002.safetensors"]
    run[6], run[8]  # the same shard: cached
    assert read == ["shard-000002.safetensors"]
    assert [r.text for r in run] == TEXTS[:10]
    assert read[1:] == [f"shard-{s:06d}.safetensors" for s in range(4)]


def test_default_shard_size_is_two_percent(bert_classifier, tmp_path):
    model, tokenizer = bert_classifier
    texts = (TEXTS * 2)[:110]
    run = attribute_corpus(model, tokenizer, texts, method="raw_attention", path=tmp_path / "run", progress=False)
    assert run.shard_size == 2 and run.shard_size <= 0.02 * len(texts) and run.n_shards == 55


# ------------------------------------------------------------------------------------------------ refusals
def test_refusals(bert_classifier, tmp_path):
    model, tokenizer = bert_classifier
    texts = TEXTS[:6]
    path = tmp_path / "run"
    kw = {"method": "saliency", "path": path, "shard_size": 2, "progress": False}
    first = attribute_corpus(model, tokenizer, texts, **kw)
    with pytest.raises(FileExistsError, match=r"is finished: load it with load_corpus\(.*recompute=True"):
        attribute_corpus(model, tokenizer, texts, **kw)
    (path / "shard-000001.safetensors").unlink()  # an unfinished job: resuming it with anything else is refused
    other = copy.deepcopy(model)
    with torch.no_grad():
        next(other.parameters())[0, 0] += 1e-3
    with pytest.raises(ValueError, match="differs in the model weights") as err:
        attribute_corpus(other, tokenizer, texts, **kw)
    assert "the tokenizer (" not in str(err.value) and "the method settings (" not in str(err.value)
    other_tokenizer = copy.deepcopy(tokenizer)
    other_tokenizer.add_tokens(["zzqx"])
    with pytest.raises(ValueError, match="differs in the tokenizer"):
        attribute_corpus(model, other_tokenizer, texts, **kw)
    with pytest.raises(ValueError, match="differs in the method settings"):
        attribute_corpus(model, tokenizer, texts, **kw, method_params={"reduce": "sum"})
    with pytest.raises(ValueError, match="differs in the method settings"):
        attribute_corpus(model, tokenizer, texts, **kw, target="negative")
    with pytest.raises(ValueError, match="differs in the texts"):
        attribute_corpus(model, tokenizer, texts[::-1], **kw)
    with pytest.raises(ValueError, match="the shard size"):
        attribute_corpus(model, tokenizer, texts, **{**kw, "shard_size": 3})
    # a changed world size: this run was made by one process; claim it was made by two
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "world_size": 2}))
    with pytest.raises(ValueError, match=r"resume with the same number of ranks \(--nproc-per-node=2\).*reassign=True"):
        attribute_corpus(model, tokenizer, texts, **kw)
    resumed = attribute_corpus(model, tokenizer, texts, **kw, reassign=True)
    assert json.loads((path / "manifest.json").read_text())["world_size"] == 1
    assert [e["shard"] for e in journal(path) if e["event"] == "done"][-1:] == [1]
    assert_same_collections(resumed, [attribute(model, tokenizer, texts[i : i + 2], method="saliency",
                                                method_params={"progress": False})[j]
                                      for i in range(0, 6, 2) for j in range(2)])  # fmt: skip
    # recompute=True replaces the finished job, even with other settings
    replaced = attribute_corpus(model, tokenizer, texts, **kw, method_params={"reduce": "sum"}, recompute=True)
    assert replaced[0].params["reduce"] == "sum" and first.path == replaced.path


def test_bad_inputs(bert_classifier, tmp_path):
    model, tokenizer = bert_classifier
    kw = {"method": "saliency", "progress": False}
    with pytest.raises(ValueError, match="no texts"):
        attribute_corpus(model, tokenizer, [], path=tmp_path / "a", **kw)
    with pytest.raises(TypeError, match="list of texts"):
        attribute_corpus(model, tokenizer, "one text", path=tmp_path / "a", **kw)
    with pytest.raises(TypeError, match="not one conversation"):
        attribute_corpus(model, tokenizer, [{"role": "user", "content": "Hi"}], path=tmp_path / "a", **kw)
    with pytest.raises(ValueError, match="shard_size"):
        attribute_corpus(model, tokenizer, ["a"], path=tmp_path / "a", shard_size=0, **kw)
    with pytest.raises(ValueError, match="unknown method 'shapley'"):
        attribute_corpus(model, tokenizer, ["a"], path=tmp_path / "a", method="shapley", progress=False)
    with pytest.raises(TypeError):
        attribute_corpus(model, tokenizer, ["a"], path=tmp_path / "a", method_params={"stepz": 3}, **kw)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds other files and no attribute_corpus manifest"):
        attribute_corpus(model, tokenizer, ["a"], path=tmp_path / "other", **kw)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        attribute_corpus(model, tokenizer, ["a"], path=tmp_path / "file", **kw)
    with pytest.raises(FileNotFoundError, match="not an attribute_corpus run"):
        load_corpus(tmp_path / "other")
    assert not (tmp_path / "a").exists()


def test_verify_detects_a_tampered_shard(bert_classifier, tmp_path):
    from safetensors.numpy import save_file

    from interp_widgets._files import read_safetensors

    model, tokenizer = bert_classifier
    kw = {"method": "input_x_gradient", "path": tmp_path / "run", "shard_size": 2, "progress": False}
    attribute_corpus(model, tokenizer, TEXTS[:6], **kw)
    attribute_corpus(model, tokenizer, TEXTS[:6], **kw, verify=3)  # a finished job: verified, not refused
    file = tmp_path / "run" / "shard-000001.safetensors"
    metadata, arrays = read_safetensors(file, what="a shard")
    arrays["1/scores"] = arrays["1/scores"].copy()
    arrays["1/scores"][0, 2] = np.nextafter(arrays["1/scores"][0, 2], np.inf)  # one bit of one score
    save_file(arrays, str(file), metadata=metadata)
    with pytest.raises(RuntimeError, match="shard 1 of .* differs from its recomputation"):
        attribute_corpus(model, tokenizer, TEXTS[:6], **kw, verify=3)


# ------------------------------------------------------------------------------------------------ processes
def test_resume_after_a_real_kill(reference, tmp_path):
    path = tmp_path / "killed"
    process = worker(path, "--delay", "0.15")
    deadline = time.monotonic() + 180
    while len(shards(path)) < 20 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the run finished before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    kept = shards(path)
    assert 20 <= len(kept) < 60
    [(code, err)] = finish(worker(path))
    assert code == 0, err
    assert not list(path.glob(".tmp-*"))
    events = journal(path)
    runs = list(dict.fromkeys(e["run"] for e in events))
    assert len(runs) == 2
    resumed = [e["shard"] for e in events if e["run"] == runs[1] and e["event"] == "done"]
    assert sorted(resumed) == sorted(set(range(60)) - {int(n[6:12]) for n in kept})  # only the missing shards
    assert_same_collections(load_corpus(path), load_corpus(reference))
    work, uninterrupted = load_corpus(path).work(), load_corpus(reference).work()
    ratio = work["rows"] / uninterrupted["rows"]
    print(f"resume after a kill at {len(kept)}/60 shards: {work['rows']} attributed rows / {uninterrupted['rows']} "
          f"= {ratio:.3f} ({work['shards_lost']} shard lost)")  # fmt: skip
    assert uninterrupted["rows"] == 60 and work["shards_lost"] <= 1
    assert ratio <= 1.05


def test_two_gloo_ranks_split_the_shards(reference, tmp_path):
    path = tmp_path / "ddp"
    init = tmp_path / "init"
    results = finish(*(worker(path, "--world", "2", "--rank", str(r), "--init", str(init)) for r in range(2)))
    assert all(code == 0 for code, _ in results), results
    by_rank = {e["shard"]: e["rank"] for e in journal(path) if e["event"] == "done"}
    assert sorted(by_rank) == list(range(60)) and all(rank == shard % 2 for shard, rank in by_rank.items())
    assert json.loads((path / "manifest.json").read_text())["world_size"] == 2
    assert_same_collections(load_corpus(path), load_corpus(reference))


def test_a_changed_world_size_is_refused_then_reassigned(reference, tmp_path):
    import shutil

    path = tmp_path / "one"
    shutil.copytree(reference, path)
    for s in (3, 10, 11, 40):
        (path / f"shard-{s:06d}.safetensors").unlink()

    def args(rank, init, *extra):
        return (path, "--world", "2", "--rank", str(rank), "--init", str(tmp_path / init), *extra)

    refused = finish(*(worker(*args(r, "init1")) for r in range(2)))
    for code, err in refused:  # every rank raises the same error (none hangs on a barrier)
        assert code != 0 and "resume with the same number of ranks (--nproc-per-node=1)" in err, err
    assert len(shards(path)) == 56
    results = finish(*(worker(*args(r, "init2", "--reassign")) for r in range(2)))
    assert all(code == 0 for code, _ in results), results
    done = [(e["shard"], e["rank"]) for e in journal(path) if e["event"] == "done"][60:]
    assert sorted(done) == [(3, 1), (10, 0), (11, 1), (40, 0)]
    assert_same_collections(load_corpus(path), load_corpus(reference))


def test_widget_pages_read_only_their_shards_and_equal_the_loaded_list(bert_classifier, tmp_path, monkeypatch):
    import interp_widgets.attribution.corpus as module
    from interp_widgets.widgets import ExampleListWidget
    from interp_widgets.widgets._mime import MIME_TYPE

    if getattr(ExampleListWidget, "_esm", None) is None:  # a checkout without the JS bundles: a stand-in module
        monkeypatch.setattr(ExampleListWidget, "_esm", "export default {};", raising=False)
    model, tokenizer = bert_classifier
    attribute_corpus(model, tokenizer, TEXTS[:11], method="saliency", path=tmp_path / "run", shard_size=3,
                     progress=False)  # fmt: skip
    read = []
    plain = module._read_shard
    monkeypatch.setattr(module, "_read_shard", lambda file: read.append(int(file.stem[-6:])) or plain(file))
    run = load_corpus(tmp_path / "run")
    assert [run.shard_range(s) for s in range(run.n_shards)] == [range(3), range(3, 6), range(6, 9), range(9, 11)]
    widget = run.widget(page_size=4)  # page 0: texts 0..3, in shards 0 and 1
    assert read == [0, 1] and widget.total_examples == 11 and widget.first_example == 0
    full = ExampleListWidget(AttributionCollection(list(load_corpus(tmp_path / "run"))), page_size=4)
    read.clear()

    def page_equals_full(first: int, n: int) -> None:
        assert widget.tokens == full.tokens[first : first + n]
        assert widget.predicted == full.predicted[first : first + n]
        assert widget.confidence == full.confidence[first : first + n]
        start = sum(len(t) for t in full.tokens[:first])
        stop = start + sum(len(t) for t in full.tokens[first : first + n])
        for name in ("scores", "special_mask", "word_ids", "sentence_ids"):
            np.testing.assert_array_equal(
                np.asarray(getattr(widget, name)), np.asarray(getattr(full, name))[start:stop]
            )

    page_equals_full(0, 4)
    widget.page = 2  # texts 8..10: shards 2 and 3; shard 1 was the last read, shard 2 is new
    assert read == [2, 3] and widget.first_example == 8
    page_equals_full(8, 3)
    widget.page = 1  # texts 4..7: shards 1 and 2, both still in the widget's LRU of 4 shards: nothing is read
    assert read == [2, 3] and widget.first_example == 4
    page_equals_full(4, 4)
    widget.page = 9  # past the end: the last page
    assert widget.page == 2 and widget.first_example == 8
    widget.selected_example = 9  # a list index
    with pytest.raises(Exception, match="out of range; use -1 or 8..10"):
        widget.selected_example = 2
    with pytest.raises(ValueError, match="sorting and filtering need every example"):
        run.widget(sort_by="confidence")

    # saved output (no kernel): the first page, and the note that more pages exist
    first = run.widget(page_size=4)
    bundle, _ = first._repr_mimebundle_()
    payload = bundle[MIME_TYPE]
    assert len(payload["data"]["tokens"]) == 4
    assert payload["state"]["total_examples"] == 11 and payload["state"]["first_example"] == 0
    svg = bundle["image/svg+xml"]
    assert "examples 1–4 of 11 · page 1 of 3" in svg and "more pages exist (3 in all)" in svg
    assert "#3 predicted" in svg and "#4 predicted" not in svg


def test_work_counts_a_shard_written_just_before_a_kill(bert_classifier, tmp_path):
    model, tokenizer = bert_classifier
    run = attribute_corpus(model, tokenizer, TEXTS[:4], method="saliency", path=tmp_path / "run", shard_size=2,
                           progress=False)  # fmt: skip
    lines = (tmp_path / "run" / "journal.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["event"] == "done"
    (tmp_path / "run" / "journal.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # killed between rename and journal
    assert run.work() == {"rows": 4, "backward_rows": 4, "rows_kept": 4, "shards_computed": 2, "shards_lost": 0,
                          "runs": 1}  # fmt: skip
