"""MonitorCallback: Hugging Face Trainer with the monitor gives the same losses and a full record."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from interp_widgets.geometry import AnisotropyMonitor
from interp_widgets.geometry.monitor.trainer import MonitorCallback
from tests.conftest import model_fingerprint


class _Texts(torch.utils.data.Dataset):
    def __init__(self, tokenizer):
        texts = [
            "a good film",
            "dull and far too long",
            "fine",
            "bad acting",
            "great cast",
            "so slow",
            "it was fine i guess",
            "loved it",
        ]
        self.items = [dict(tokenizer(t), labels=i % 3) for i, t in enumerate(texts)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def _train(model, tokenizer, tmp_path, callbacks=(), wrap=None):
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=4,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
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
    if wrap is None:
        trainer.train()
    else:
        with wrap:
            trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry], trainer


def test_trainer_callback_records_every_step_without_changing_training(bert_classifier, tmp_path):
    model, tokenizer = bert_classifier
    plain_losses, plain = _train(copy.deepcopy(model), tokenizer, tmp_path / "plain")
    plain_modes = [m.training for m in plain.model.modules()]

    watched = copy.deepcopy(model)
    before = model_fingerprint(watched, tokenizer)
    monitor = AnisotropyMonitor(watched, ["layer:0", "layer:1"], rank=4, n_controls=5, fit_fraction=0.5)
    losses, trainer = _train(watched, tokenizer, tmp_path / "watched", [MonitorCallback(monitor)])

    assert losses == plain_losses
    assert all(torch.equal(a, b) for a, b in zip(plain.model.parameters(), trainer.model.parameters()))
    assert monitor.total_steps == 4 and monitor.meta["fit_window"] == [0, 2]
    assert monitor.steps.tolist() == [0, 1, 2, 3]
    assert monitor.series("fitting")[1].tolist() == [1.0, 1.0, 0.0, 0.0]
    ratio = monitor.series("energy_ratio|layer:0")[1]
    assert np.isnan(ratio[:2]).all() and np.isfinite(ratio[2:]).all()
    # two micro-batches of 2 padded texts per step: rows = real tokens of 4 texts
    assert (monitor.series("n_tokens|layer:0")[1] > 8).all()
    assert np.isfinite(monitor.series("loss")[1]).all()
    np.testing.assert_allclose(monitor.series("trainer_loss")[1], plain_losses)
    assert np.isfinite(monitor.series("learning_rate")[1]).all()
    after = model_fingerprint(watched, tokenizer)  # (the HF model itself sets config.problem_type in training)
    assert after["hooks"] == before["hooks"] and after["modes"] == plain_modes


def test_trainer_inside_with_block_removes_hooks_when_training_raises(bert_classifier, tmp_path):
    model, tokenizer = bert_classifier
    watched = copy.deepcopy(model)
    hooks = model_fingerprint(watched, tokenizer)["hooks"]
    monitor = AnisotropyMonitor(watched, ["layer:0"], rank=4, n_controls=3, total_steps=4)

    class Boom(MonitorCallback):
        def on_step_end(self, args, state, control, **kwargs):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _train(watched, tokenizer, tmp_path, [Boom(monitor)], wrap=monitor)
    assert model_fingerprint(watched, tokenizer)["hooks"] == hooks
    assert len(monitor) == 1
