"""Every save creates missing parent directories; every load of a wrong path says what is wrong and how to fix it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp_widgets.attribution import AttributionResult, Saliency
from interp_widgets.concepts import ActivationStore, ConceptModel, PCAConcepts
from interp_widgets.geometry import GeometryLog
from interp_widgets.geometry.monitor.replay import _load_checkpoint

NOT_SAFETENSORS = b"this is a text file, not a safetensors file\n" * 4


@pytest.fixture(scope="module")
def result(bert_classifier):
    return Saliency(progress=False).attribute(*bert_classifier, "not bad at all")


def test_attribution_result_save_creates_directories_and_load_explains_bad_files(result, tmp_path):
    path = result.save(tmp_path / "new" / "nested" / "r.safetensors")
    assert path.is_file() and AttributionResult.load(path).tokens == result.tokens
    with pytest.raises(
        IsADirectoryError, match=r"is a directory; save to a file inside it, such as .*result\.safetensors"
    ):
        result.save(tmp_path)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(NOT_SAFETENSORS)
    with pytest.raises(
        ValueError,
        match=r"is not a saved AttributionResult: it is not a safetensors file, or it is "
        r"truncated or damaged \(header too large\); pass the path of a file "
        r"written by AttributionResult\.save\(path\)",
    ):
        AttributionResult.load(junk)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(path.read_bytes()[:20])
    with pytest.raises(ValueError, match="truncated or damaged"):
        AttributionResult.load(truncated)
    with pytest.raises(FileNotFoundError, match=r"no such file: .*missing\.safetensors; pass the path"):
        AttributionResult.load(tmp_path / "missing.safetensors")
    with pytest.raises(IsADirectoryError, match="is a directory, not a saved AttributionResult"):
        AttributionResult.load(tmp_path)


def test_concept_files_name_the_problem(result, tmp_path):
    model = PCAConcepts(2).fit(np.random.default_rng(0).normal(size=(20, 4)))
    path = model.save(tmp_path / "fresh" / "pca.safetensors")
    assert ConceptModel.load(path).n_concepts == 2
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(NOT_SAFETENSORS)
    with pytest.raises(
        ValueError,
        match=r"not a saved ConceptModel: it is not a safetensors file.*"
        r"written by ConceptModel\.save\(path\)",
    ):
        ConceptModel.load(junk)
    with pytest.raises(
        ValueError,
        match=r"holds a different interp_widgets object \(interp_widgets.ConceptModel\), not an AttributionResult; load it with its own class",
    ):
        AttributionResult.load(path)
    with pytest.raises(
        ValueError, match=r"holds a interp_widgets.AttributionResult, not a interp_widgets.ConceptModel"
    ):
        ConceptModel.load(result.save(tmp_path / "r.safetensors"))


def test_geometry_log_and_checkpoint_errors(tmp_path):
    log = GeometryLog(["layer:0"])
    log.log(0, loss=1.5)
    saved = log.save(tmp_path / "a" / "run")
    (saved / "history.safetensors").write_bytes(NOT_SAFETENSORS)
    with pytest.raises(
        ValueError, match=r"is not a GeometryLog's history: .*; save the log again with GeometryLog\.save"
    ):
        GeometryLog.load(saved)
    (saved / "meta.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"meta\.json is damaged"):
        GeometryLog.load(saved)
    with pytest.raises(FileExistsError, match="is a file; GeometryLog.save writes a directory"):
        log.save(saved / "meta.json")
    checkpoint = tmp_path / "step1.safetensors"
    checkpoint.write_bytes(NOT_SAFETENSORS)
    with pytest.raises(ValueError, match=r"is not a model checkpoint: .*safetensors\.torch\.save_file"):
        _load_checkpoint(checkpoint, torch.nn.Linear(2, 2))


def test_activation_store_errors(tmp_path):
    n = 3
    meta = {
        "text_id": np.arange(n),
        "position": np.zeros(n),
        "start": np.zeros(n),
        "end": np.ones(n),
        "token_id": np.zeros(n),
    }
    store = ActivationStore([np.ones((n, 2), np.float32)], meta, ["x"] * n, {"layer": "layer:0"})
    saved = store.save(tmp_path / "deep" / "store")
    assert ActivationStore.open(saved).shape == (3, 2)
    with pytest.raises(FileExistsError, match="is a file; ActivationStore.save writes a directory"):
        store.save(saved / "manifest.json")
    (saved / "manifest.json").write_text("{")
    with pytest.raises(ValueError, match=r"manifest\.json is damaged .*collect or save the store again"):
        ActivationStore.open(saved)
