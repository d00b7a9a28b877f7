"""``interp-widgets transcoders build`` and ``demo_transcoders.load_transcoders``: a tiny real build on SmolLM2 (2 layers, 64
latents, a few thousand tokens of the shipped corpus), resumed after an interruption, refused when corrupted."""

from __future__ import annotations

import json

import pytest
import torch

from interp_widgets import demo
from interp_widgets.cli import main
from interp_widgets.demo_transcoders import (
    CHECKPOINT_DIR,
    FEATURES_FILE,
    REPORT_FILE,
    SET_FILE,
    TIMINGS_FILE,
    TranscoderBuild,
    build_transcoders,
    load_feature_explanations,
    load_transcoders,
    training_texts,
)
from tests.conftest import model_fingerprint

TINY = ["--tokens", "2000", "--latents", "64", "--k", "8", "--layers", "0,1", "--eval-tokens", "400", "--explain-tokens",
        "600", "--quiet"]  # fmt: skip
#: several windows of the shuffle buffer, so that an interruption can fall between two of them
SMALL = {"tokens": 3000, "latents": 64, "k": 8, "layers": [0, 1], "buffer_tokens": 500, "batch_size": 64}
SMALL["eval_tokens"] = 300
SMALL["explain_tokens"] = 300


def test_cli_builds_reports_caches_and_loads(tmp_path, smollm2, capsys):
    model, tokenizer = smollm2
    out = tmp_path / "build"
    assert main(["transcoders", "build", *TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert lines[0].split() == ["layer", "fvu", "skip_fvu", "fvu_ratio", "l0", "dead_fraction", "loss_delta"]
    assert [line.split()[0] for line in lines[1:3]] == ["0", "1"]
    assert "held-out tokens" in lines[3] and "median FVU" in lines[3] and lines[-1] == f"saved in {out}"
    assert lines[-2].startswith("timings: fit_seconds ") and "explain_seconds" in lines[-2]
    files = ["build.json", FEATURES_FILE, REPORT_FILE, TIMINGS_FILE, SET_FILE]
    assert sorted(p.name for p in out.iterdir()) == sorted(files)  # the checkpoint is gone
    timings = json.loads((out / TIMINGS_FILE).read_text())
    assert timings["fit_seconds"] > 0 and timings["report_seconds"] > 0 and 0.5 < timings["peak_rss_gb"] < 6
    tcs = load_transcoders(path=out, model=model)
    assert tcs.layers == [0, 1] and tcs.input_point == "mlp_in" and tcs.n_layers == 30
    assert {layer: (tc.n_concepts, tc.activation, tc.k_, tc.skip) for layer, tc in tcs.transcoders.items()} == {
        0: (64, "topk", 8, False),  # no_skip_layers=(0,): layer 0's features take the whole output
        1: (64, "topk", 8, True),
    }
    assert tcs.model_name == demo.lm.HUB_NAME
    assert tcs.fit_info["rows"] >= 1800  # ~2,000 training tokens, less the monitoring rows
    report = json.loads((out / REPORT_FILE).read_text())
    assert 400 <= report["tokens"] < 600 and report["layers"] == [0, 1]
    assert all(0 < fvu < 1.5 for fvu in report["metrics"]["fvu"])
    # the features are explained over the first 600 training tokens: their top contexts are training text
    explained = load_feature_explanations(path=out)
    assert explained.layers.keys() == {0, 1} and 600 <= explained.run.n_tokens < 1000
    fired = int(explained.layers[1].top_values[:, 0].argmax())
    top = explained.examples(1, fired)[0]
    ids = tokenizer(training_texts(tokenizer, 600)[top["text_id"]]).input_ids
    assert tokenizer.decode([ids[top["position"]]]) == top["token"]
    # a second run finds the set and trains nothing
    before = (out / SET_FILE).stat().st_mtime_ns
    assert main(["transcoders", "build", *TINY, "--out", str(out)]) == 0
    assert (out / SET_FILE).stat().st_mtime_ns == before


def test_trains_on_the_train_split(smollm2):
    _, tokenizer = smollm2
    texts = training_texts(tokenizer, 2000)
    train, test = set(demo.load_text_corpus("train")), set(demo.load_text_corpus("test"))
    assert set(texts) <= train and not set(texts) & test
    assert texts == demo.load_text_corpus("train", seed=0)[: len(texts)]


def test_more_tokens_than_the_split_pass_over_it_again_reshuffled(smollm2, monkeypatch):
    _, tokenizer = smollm2
    small = {seed: [f"text {i} of pass {seed}" for i in range(4)] for seed in range(3)}  # 7 tokens each

    def fake_corpus(split, seed):
        assert split == "train"
        return small[seed]

    monkeypatch.setattr("interp_widgets.demo.text_corpus.load_text_corpus", fake_corpus)
    assert [len(tokenizer(t).input_ids) for t in small[0]] == [7] * 4
    assert training_texts(tokenizer, 60) == small[0] + small[1] + small[2][:1]
    assert training_texts(tokenizer, 28, seed=1) == small[1]


def test_an_interrupted_build_resumes_to_the_same_set_and_leaves_the_model_untouched(tmp_path, smollm2):
    model, tokenizer = smollm2
    before = model_fingerprint(model, tokenizer)
    whole = build_transcoders(out=tmp_path / "whole", model=model, tokenizer=tokenizer, progress=False, **SMALL)
    assert model_fingerprint(model, tokenizer) == before
    assert whole.transcoders.fit_info["windows"] >= 3 and not whole.resumed
    out = tmp_path / "cut"
    checkpoint = out / CHECKPOINT_DIR / "checkpoint.safetensors"

    def stop_after_first_window(step):
        if checkpoint.exists():
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_transcoders(out=out, model=model, tokenizer=tokenizer, progress=False, callback=stop_after_first_window,
                          **SMALL)  # fmt: skip
    assert checkpoint.exists() and not (out / SET_FILE).exists()
    with pytest.raises(FileNotFoundError, match="build_transcoders.*resumes from its checkpoint"):
        load_transcoders(path=out)
    resumed = build_transcoders(out=out, model=model, tokenizer=tokenizer, progress=False, **SMALL)
    assert resumed.resumed and not checkpoint.exists()
    for layer in (0, 1):
        a, b = whole.transcoders[layer].weights_, load_transcoders(path=out)[layer].weights_
        assert sorted(a) == sorted(b) and all(torch.equal(a[name], b[name]) for name in a)
    assert resumed.report.metrics == whole.report.metrics


def test_missing_and_corrupted_sets_name_the_build_command(tmp_path, smollm2, monkeypatch):
    model, _ = smollm2
    monkeypatch.setattr("interp_widgets.demo.lm.gguf_cache_path", lambda source: tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="build them with: interp-widgets transcoders build$"):
        load_transcoders()
    with pytest.raises(FileNotFoundError, match="interp-widgets transcoders build --tokens 2000 --layers 0,1$"):
        load_transcoders(tokens=2000, layers=[0, 1])
    out = tmp_path / "build"
    assert main(["transcoders", "build", *TINY, "--out", str(out)]) == 0
    data = bytearray((out / SET_FILE).read_bytes())
    data[-100] ^= 0xFF  # one weight changed: the checksum no longer matches
    (out / SET_FILE).write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"corrupted .*interp-widgets transcoders build --tokens 2000 .*--rebuild"):
        load_transcoders(path=out)
    (out / SET_FILE).write_bytes(bytes(data[:50]))  # truncated
    with pytest.raises(ValueError, match="corrupted"):
        load_transcoders(path=out)
    # the build command trains a corrupted set again
    assert main(["transcoders", "build", *TINY, "--out", str(out)]) == 0
    assert load_transcoders(path=out, model=model).layers == [0, 1]


def test_bad_settings_are_refused(capsys):
    with pytest.raises(ValueError, match="k must be between 1 and latents=64"):
        TranscoderBuild(latents=64, k=128)
    with pytest.raises(TypeError, match="unknown build settings"):
        build_transcoders(latent=64)
    with pytest.raises(SystemExit):
        main(["transcoders", "build", "--layers", "a,b"])
    assert "expected 'all' or block indices" in capsys.readouterr().err
    assert main(["transcoders", "build", "--latents", "64", "--k", "65"]) == 2
    assert "k must be between 1 and latents=64" in capsys.readouterr().err


def test_a_rerun_goes_on_from_the_first_missing_step_and_redoes_steps_of_another_set(tmp_path, smollm2):
    model, tokenizer = smollm2
    out = tmp_path / "build"
    settings = {**SMALL, "out": out, "model": model, "tokenizer": tokenizer, "progress": False}
    first = build_transcoders(**settings)
    set_time, features_time = ((out / name).stat().st_mtime_ns for name in (SET_FILE, FEATURES_FILE))
    (out / REPORT_FILE).unlink()  # an interruption during the report: the set is saved, the explanations not reached
    again = build_transcoders(**settings)
    assert (out / SET_FILE).stat().st_mtime_ns == set_time and (out / FEATURES_FILE).stat().st_mtime_ns == features_time
    assert again.report.metrics == first.report.metrics and not again.resumed
    # a report and explanations recorded for another set (say, a corrupted set trained again) are computed again
    timings = json.loads((out / TIMINGS_FILE).read_text())
    assert timings["set_checksum"] == first.transcoders.checksum() and "report_seconds" in timings
    (out / TIMINGS_FILE).write_text(json.dumps({**timings, "set_checksum": "another set"}))
    build_transcoders(**settings)
    assert (out / SET_FILE).stat().st_mtime_ns == set_time and (out / FEATURES_FILE).stat().st_mtime_ns > features_time
    assert json.loads((out / TIMINGS_FILE).read_text())["set_checksum"] == first.transcoders.checksum()
