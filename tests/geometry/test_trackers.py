"""Trackers: the monitor's scalars reach TensorBoard, W&B (offline) and MLflow (local sqlite), from a plain loop, the
HF Trainer and Lightning, read back with each tool's own reader; training is unchanged; bad input fails clearly.

No mocks: the real packages write real files, read back by TensorBoard's ``EventAccumulator``, by parsing the W&B
offline run's ``.wandb`` transaction log with W&B's own protobuf ``Record`` messages, and by ``MlflowClient``.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import struct
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from interp_widgets.geometry import AnisotropyMonitor
from interp_widgets.geometry.trackers import (
    DEFAULT_METRICS,
    MLflowTracker,
    TensorBoardTracker,
    WandbTracker,
    trainer_trackers,
)

TEXTS = [
    "a good film",
    "dull and far too long",
    "fine",
    "bad acting",
    "great cast",
    "so slow",
    "it was fine i guess",
    "loved it",
]
LAYERS = ["layer:0", "layer:1"]
STEPS = 4


# ---------------------------------------------------------------------------------------------------------- readers
def tensorboard_scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def wandb_records(run_dir) -> tuple[list[dict], dict]:
    """The history rows and the config of an offline W&B run, from its ``run-<id>.wandb`` log (LevelDB-style 32 KiB
    blocks of checksummed chunks after a 7-byte file header) decoded with W&B's ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2

    (path,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    block, position, pending, records = 32768, 7, b"", []
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a chunk header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
    rows, config = [], {}
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
        elif kind == "config":
            config.update(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.config.update}
            )
    return rows, config


def wandb_series(rows, key, step_metric) -> list[tuple[int, float]]:
    return [(row[step_metric], row[key]) for row in rows if key in row]


def mlflow_series(client, run_id, key) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def monitor_series(monitor, name, offset=0) -> list[tuple[int, float]]:
    steps, values = monitor.series(name)
    return [(int(s) + offset, float(v)) for s, v in zip(steps, values) if np.isfinite(v)]


def assert_same(read, expected, rtol=0.0):
    assert [s for s, _ in read] == [s for s, _ in expected]
    np.testing.assert_allclose([v for _, v in read], [v for _, v in expected], rtol=rtol)


# ---------------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory):
    """One local sqlite tracking store per module (creating one runs MLflow's migrations, several seconds)."""
    import mlflow

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.MlflowClient(uri).search_experiments()  # create the schema now
    yield uri
    mlflow.set_tracking_uri(previous)


@pytest.fixture
def mlflow_experiment(mlflow_uri, tmp_path, request):
    import mlflow

    client = mlflow.MlflowClient(mlflow_uri)
    experiment = client.create_experiment(request.node.name, artifact_location=str(tmp_path / "artifacts"))
    return client, experiment


def _batches(tokenizer):
    return [
        (tokenizer(TEXTS[2 * i % 8 : 2 * i % 8 + 2], padding=True, return_tensors="pt"), torch.tensor([i % 3, 1]))
        for i in range(STEPS)
    ]


def _plain_loop(model, tokenizer, monitor=None):
    torch.manual_seed(0)  # dropout draws from the global generator (the monitor never does)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step, (batch, labels) in enumerate(_batches(tokenizer)):
        if monitor is not None:
            monitor.track(step)
        loss = model(**batch, labels=labels).loss
        loss.backward()
        if monitor is not None:
            monitor.step(lr=0.05)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


# ---------------------------------------------------------------------------------------------------------- plain loop
def test_plain_loop_sends_the_same_values_to_all_three_trackers(bert_classifier, tmp_path, mlflow_experiment):
    import wandb
    from torch.utils.tensorboard import SummaryWriter

    model, tokenizer = bert_classifier
    plain = _plain_loop(copy.deepcopy(model), tokenizer)

    client, experiment = mlflow_experiment
    mlflow_run = client.create_run(experiment)
    wandb_run = wandb.init(dir=str(tmp_path), mode="offline", project="trackers", settings=wandb.Settings(silent=True))
    writer = SummaryWriter(str(tmp_path / "tb"))
    watched = copy.deepcopy(model)
    monitor = AnisotropyMonitor(
        watched, LAYERS, rank=4, n_controls=5, total_steps=STEPS, fit_fraction=0.5, spectrum_every=2
    )
    trackers = [
        TensorBoardTracker(writer).attach(monitor),
        WandbTracker(wandb_run).attach(monitor),
        MLflowTracker(mlflow_run.info.run_id).attach(monitor),
    ]
    try:
        with monitor:
            losses = _plain_loop(watched, tokenizer, monitor)
    finally:
        wandb_dir = wandb_run.dir
        wandb_run.finish()
        writer.close()
    assert losses == plain  # bit-identical with the monitor and three trackers

    tb = tensorboard_scalars(tmp_path / "tb")
    rows, config = wandb_records(Path(wandb_dir).parent)
    run_id = mlflow_run.info.run_id
    for name in [
        "loss",
        "fitting",
        "lr",
        "energy_ratio|layer:0",
        "p_value|layer:1",
        "anisotropy_share|layer:0",
        "isoscore|layer:1",
        "avg_cosine|layer:0",
    ]:
        expected = monitor_series(monitor, name)
        assert expected, name
        key = trackers[0].key(name)
        assert_same(tb[key], expected, rtol=1e-6)  # TensorBoard stores float32
        assert_same(wandb_series(rows, key, "geometry/step"), expected)
        assert_same(mlflow_series(client, run_id, trackers[2].key(name)), expected)
    # NaN (the fit window; the spectrum cadence) is never written: charts have no holes
    assert [s for s, _ in tb["geometry/energy_ratio/layer:0"]] == [2, 3]
    assert [s for s, _ in tb["geometry/isoscore/layer:0"]] == [0, 2]
    # naming: one geometry section, per-layer keys; MLflow without colons; the default selection only
    assert trackers[2].key("energy_ratio|layer:0") == "geometry/energy_ratio/layer_0"
    assert {key.split("/")[1] for key in tb if key.count("/") == 2} == set(DEFAULT_METRICS)
    assert sorted(key for key in tb if key.count("/") == 1) == ["geometry/fitting", "geometry/loss", "geometry/lr"]
    # settings: MLflow parameters, W&B config, a TensorBoard text summary
    params = client.get_run(run_id).data.params
    assert params["geometry/rank"] == "4" and params["geometry/fit"] == "early"
    assert config["geometry"]["rank"] == 4 and config["geometry"]["n_controls"] == 5


def test_metrics_all_and_prefix(tmp_path):
    from interp_widgets.geometry.log.geometry_log import LAYER_METRICS, GeometryLog

    log = GeometryLog(["l"])
    tracker = TensorBoardTracker(log_dir=str(tmp_path), prefix="probe", metrics="all").attach(log)
    log.record(0, {f"{metric}|l": 1.0 for metric in LAYER_METRICS} | {"monitor_ms": 1.0})
    tracker.close()
    tags = tensorboard_scalars(tmp_path)
    assert sorted(tags) == sorted(f"probe/{metric}/l" for metric in LAYER_METRICS)


# ---------------------------------------------------------------------------------------------------------- HF Trainer
class _Texts(torch.utils.data.Dataset):
    def __init__(self, tokenizer):
        self.items = [dict(tokenizer(t), labels=i % 3) for i, t in enumerate(TEXTS)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def _hf_train(model, tokenizer, output_dir, report_to, callbacks=()):
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=2,
        max_steps=STEPS,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=report_to,
        save_strategy="no",
        use_cpu=True,
        seed=7,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=_Texts(tokenizer),
        data_collator=DataCollatorWithPadding(tokenizer),
        callbacks=list(callbacks),
    )
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_trainer_callback_reports_beside_the_trainers_own_loggers(
    bert_classifier, tmp_path, mlflow_experiment, monkeypatch
):
    import mlflow
    import wandb

    from interp_widgets.geometry.monitor.trainer import MonitorCallback

    model, tokenizer = bert_classifier
    client, experiment = mlflow_experiment
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment)
    monkeypatch.setenv("WANDB_PROJECT", "trackers")
    report_to = ["tensorboard", "wandb", "mlflow"]
    try:
        plain = _hf_train(copy.deepcopy(model), tokenizer, tmp_path / "plain", report_to)
        plain_run = mlflow.last_active_run().info.run_id
        wandb.finish()
        watched = copy.deepcopy(model)
        monitor = AnisotropyMonitor(watched, LAYERS, rank=4, n_controls=5, fit_fraction=0.5)
        callback = MonitorCallback(monitor)
        losses = _hf_train(watched, tokenizer, tmp_path / "watched", report_to, [callback])
        run_id = mlflow.last_active_run().info.run_id
        wandb_dir = wandb.run.dir
    finally:
        wandb.finish()
    assert losses == plain and run_id != plain_run
    assert callback.trackers == []  # closed at the end of training

    # geometry step s sits at the Trainer's global_step s + 1, the step its loggers give that update's loss
    expected = monitor_series(monitor, "energy_ratio|layer:0", offset=1)
    assert [s for s, _ in expected] == [3, 4]
    runs = sorted((tmp_path / "watched" / "runs").iterdir())
    assert len(runs) == 2 and runs[1].name.endswith("-geometry")  # a TensorBoard run beside the Trainer's
    tb_trainer, tb_geometry = tensorboard_scalars(runs[0]), tensorboard_scalars(runs[1])
    assert [s for s, _ in tb_trainer["train/loss"]] == [1, 2, 3, 4]
    assert_same(tb_geometry["geometry/energy_ratio/layer:0"], expected, rtol=1e-6)
    assert_same(tb_geometry["geometry/loss"], monitor_series(monitor, "loss", offset=1), rtol=1e-6)
    # Trainer logs forwarded to the monitor are not sent again: the Trainer reports them itself
    assert not any(key.endswith(("learning_rate", "trainer_loss", "grad_norm")) for key in tb_geometry)

    metrics = client.get_run(run_id).data.metrics
    assert "loss" in metrics and "geometry/energy_ratio/layer_0" in metrics  # the Trainer's MLflow run
    assert_same(mlflow_series(client, run_id, "geometry/energy_ratio/layer_0"), expected)
    assert [s for s, _ in mlflow_series(client, run_id, "loss")] == [1, 2, 3, 4]

    rows, _ = wandb_records(Path(wandb_dir).parent)
    assert_same(wandb_series(rows, "geometry/energy_ratio/layer:0", "train/global_step"), expected)
    assert [s for s, _ in wandb_series(rows, "train/loss", "train/global_step")] == [1, 2, 3, 4]


def test_trainer_callback_report_to_names_and_errors(bert_classifier, tmp_path):
    from interp_widgets.geometry.monitor.trainer import MonitorCallback

    model, _ = bert_classifier
    monitor = AnisotropyMonitor(copy.deepcopy(model), ["layer:0"], rank=4, n_controls=3, total_steps=4)
    assert MonitorCallback(monitor, report_to=[]).report_to == []
    with pytest.raises(ValueError, match=r"unknown report_to entry 'comet_ml'"):
        MonitorCallback(monitor, report_to=["comet_ml"])
    with pytest.raises(ValueError, match="no active W&B run"):
        trainer_trackers(["wandb"], [], str(tmp_path))
    (tensorboard,) = trainer_trackers("trainer", ["tensorboard", "codecarbon"], str(tmp_path))
    assert tensorboard.step_offset == 1 and Path(tensorboard.writer.log_dir).name.endswith("-geometry")
    tensorboard.close()


# ---------------------------------------------------------------------------------------------------------- Lightning
def _lightning_module(model, with_optimizer=True):
    import lightning.pytorch as pl

    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            loss = self.model(**batch).loss
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05) if with_optimizer else None

    return Classifier()


def _lightning_fit(module, tokenizer, root, loggers, callbacks=()):
    import lightning.pytorch as pl
    from transformers import DataCollatorWithPadding

    pl.seed_everything(3, verbose=False)
    loader = torch.utils.data.DataLoader(_Texts(tokenizer), batch_size=2, collate_fn=DataCollatorWithPadding(tokenizer))
    trainer = pl.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        logger=loggers,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(root),
        callbacks=list(callbacks),
        deterministic=True,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(num_workers|does not have many workers|LeafSpec).*")
        trainer.fit(module, loader)
    return trainer


def test_lightning_callback_writes_through_the_trainers_loggers(
    bert_classifier, tmp_path, mlflow_uri, mlflow_experiment
):
    import mlflow
    from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger

    from interp_widgets.geometry.monitor.lightning import LightningMonitorCallback

    model, tokenizer = bert_classifier

    def loggers(name):
        return [
            TensorBoardLogger(str(tmp_path), name=name),
            MLFlowLogger(
                experiment_name=f"lightning-{name}",
                tracking_uri=mlflow_uri,
                artifact_location=str(tmp_path / "mlflow-artifacts"),
            ),
            WandbLogger(name=name, save_dir=str(tmp_path / name), offline=True, project="trackers"),
        ]

    plain_loggers = loggers("plain")
    plain = _lightning_fit(_lightning_module(copy.deepcopy(model)), tokenizer, tmp_path / "plain", plain_loggers)
    plain_loggers[2].experiment.finish()
    watched = copy.deepcopy(model)
    monitor = AnisotropyMonitor(watched, LAYERS, rank=4, n_controls=5, fit_fraction=0.5)
    watched_loggers = loggers("watched")
    try:
        trainer = _lightning_fit(
            _lightning_module(watched),
            tokenizer,
            tmp_path / "watched",
            watched_loggers,
            [LightningMonitorCallback(monitor)],
        )
        wandb_dir = watched_loggers[2].experiment.dir
    finally:
        watched_loggers[2].experiment.finish()
    assert all(
        torch.equal(a, b) for a, b in zip(plain.lightning_module.parameters(), trainer.lightning_module.parameters())
    )
    assert monitor.total_steps == STEPS and monitor.steps.tolist() == [0, 1, 2, 3]
    expected = monitor_series(monitor, "energy_ratio|layer:0")
    assert [s for s, _ in expected] == [2, 3]
    tb = tensorboard_scalars(watched_loggers[0].log_dir)
    assert_same(tb["geometry/energy_ratio/layer:0"], expected, rtol=1e-6)
    # the loss the callback records (what Lightning back-propagates) is the one self.log gives, at the same steps
    assert_same(tb["train_loss"], monitor_series(monitor, "loss"), rtol=1e-6)
    client = mlflow.MlflowClient(mlflow_uri)
    assert_same(mlflow_series(client, watched_loggers[1].run_id, "geometry/energy_ratio/layer_0"), expected)
    rows, _ = wandb_records(Path(wandb_dir).parent)
    assert_same(wandb_series(rows, "geometry/energy_ratio/layer:0", "trainer/global_step"), expected)
    assert_same(wandb_series(rows, "geometry/loss", "trainer/global_step"), monitor_series(monitor, "loss"))


def test_lightning_module_without_optimizer_is_refused(bert_classifier, tmp_path):
    from interp_widgets.geometry.monitor.lightning import LightningMonitorCallback

    model, tokenizer = bert_classifier
    watched = copy.deepcopy(model)
    monitor = AnisotropyMonitor(watched, ["layer:0"], rank=4, n_controls=3, total_steps=STEPS)
    with pytest.raises(ValueError, match="has no optimizer over the monitored model's parameters"):
        _lightning_fit(
            _lightning_module(watched, with_optimizer=False),
            tokenizer,
            tmp_path,
            False,
            [LightningMonitorCallback(monitor)],
        )
    hooks = sum(len(m._forward_hooks) for m in watched.modules())
    assert hooks == 0 and len(monitor) == 0


def test_lightning_callback_refuses_a_model_outside_the_module(bert_classifier, tmp_path):
    from interp_widgets.geometry.monitor.lightning import LightningMonitorCallback

    model, tokenizer = bert_classifier
    monitor = AnisotropyMonitor(copy.deepcopy(model), ["layer:0"], rank=4, n_controls=3, total_steps=STEPS)
    with pytest.raises(ValueError, match="not part of the LightningModule"):
        _lightning_fit(
            _lightning_module(copy.deepcopy(model)), tokenizer, tmp_path, False, [LightningMonitorCallback(monitor)]
        )
    with pytest.raises(TypeError, match="list of Tracker objects"):
        LightningMonitorCallback(monitor, report_to=["tensorboard"])


# ---------------------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "modules, build, extra",
    [
        (["tensorboard", "torch.utils.tensorboard"], lambda tmp: TensorBoardTracker(log_dir=str(tmp)), "tensorboard"),
        (["wandb"], lambda tmp: WandbTracker(), "wandb"),
        (["mlflow"], lambda tmp: MLflowTracker(), "mlflow"),
    ],
    ids=["tensorboard", "wandb", "mlflow"],
)
def test_a_tracker_that_is_not_installed_names_its_extra(modules, build, extra, tmp_path, monkeypatch):
    for module in modules:  # a None entry makes `import module` fail as if it were not installed
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ModuleNotFoundError, match=rf'pip install "interp-widgets\[{extra}\]"'):
        build(tmp_path)


def test_missing_lightning_names_its_extra(monkeypatch):
    import interp_widgets.geometry as geometry

    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.delitem(sys.modules, "interp_widgets.geometry.monitor.lightning", raising=False)
    with pytest.raises(ModuleNotFoundError, match=r'pip install "interp-widgets\[lightning\]"'):
        geometry.LightningMonitorCallback


def test_a_closed_writer_is_refused_and_never_reopened(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from interp_widgets.geometry.log.geometry_log import GeometryLog

    writer = SummaryWriter(str(tmp_path / "closed"))
    writer.close()
    with pytest.raises(ValueError, match="SummaryWriter of .* is already closed"):
        TensorBoardTracker(writer)

    log = GeometryLog(["l"])
    writer = SummaryWriter(str(tmp_path / "open"))
    TensorBoardTracker(writer).attach(log)
    log.record(0, {"energy_ratio|l": 2.0})
    writer.close()
    with pytest.warns(RuntimeWarning, match="already closed"):  # a tracker never stops training
        log.record(1, {"energy_ratio|l": 3.0})
    assert len(list((tmp_path / "open").iterdir())) == 1  # no second event file
    assert [s for s, _ in tensorboard_scalars(tmp_path / "open")["geometry/energy_ratio/l"]] == [0]


def test_finished_or_missing_runs_are_refused(tmp_path, mlflow_experiment):
    import wandb

    run = wandb.init(dir=str(tmp_path), mode="offline", project="trackers", settings=wandb.Settings(silent=True))
    run.finish()
    with pytest.raises(ValueError, match="W&B run .* is already finished"):
        WandbTracker(run)
    with pytest.raises(ValueError, match="no active W&B run"):
        WandbTracker()
    client, experiment = mlflow_experiment
    deleted = client.create_run(experiment).info.run_id
    client.delete_run(deleted)
    with pytest.raises(ValueError, match="is deleted"):
        MLflowTracker(deleted)
    with pytest.raises(ValueError, match="no active MLflow run"):
        MLflowTracker()


def test_bad_tracker_arguments(tmp_path):
    with pytest.raises(ValueError, match="either a SummaryWriter"):
        TensorBoardTracker()
    with pytest.raises(ValueError, match=r"unknown per-layer metrics \['energy'\]"):
        TensorBoardTracker(log_dir=str(tmp_path), metrics=["energy"])
    with pytest.raises(ValueError, match="prefix must be a string"):
        TensorBoardTracker(log_dir=str(tmp_path), prefix="geometry/")
    with pytest.raises(TypeError, match="needs an AnisotropyMonitor or a GeometryLog"):
        TensorBoardTracker(log_dir=str(tmp_path)).attach(object())


def test_readme_tracker_example_runs(bert_classifier, tmp_path, mlflow_uri, monkeypatch):
    """The README's tracker block (a ``py`` block: tests/test_readme.py runs only the three family examples)."""
    import re

    import mlflow

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```py\n(.*?)```", readme, flags=re.S) if "Tracker" in b]
    monkeypatch.chdir(tmp_path)
    model, tokenizer = bert_classifier
    watched = copy.deepcopy(model)
    monitor = AnisotropyMonitor(watched, LAYERS, rank=4, n_controls=5, total_steps=STEPS, fit_fraction=0.5)
    namespace = {"monitor": monitor}
    exec(compile(block, "README tracker block", "exec"), namespace)
    try:
        with monitor:
            _plain_loop(watched, tokenizer, monitor)
    finally:
        run_id = mlflow.active_run().info.run_id
        mlflow.end_run()
        wandb_dir = namespace["wandb"].run.dir
        namespace["wandb"].finish()
        mlflow.set_tracking_uri(mlflow_uri)
    expected = monitor_series(monitor, "energy_ratio|layer:1")
    assert_same(tensorboard_scalars(tmp_path / "runs" / "minilm")["geometry/energy_ratio/layer:1"], expected, 1e-6)
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    assert_same(mlflow_series(client, run_id, "geometry/energy_ratio/layer_1"), expected)
    assert_same(
        wandb_series(wandb_records(Path(wandb_dir).parent)[0], "geometry/energy_ratio/layer:1", "geometry/step"),
        expected,
    )
