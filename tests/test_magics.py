"""``%load_ext interp_widgets``: the ``%%monitor`` and ``%explain`` magics, their errors and their clean-up."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from IPython.core.error import UsageError
from IPython.testing import globalipapp
from torch.optim.optimizer import _global_optimizer_pre_hooks

from interp_widgets.magics import load_ipython_extension
from tests.conftest import model_fingerprint

TRAIN_CELL = """
opt = torch.optim.SGD(net.parameters(), lr=0.05)
for step in range(4):
    net(**batch, labels=labels).loss.backward()
    opt.step(); opt.zero_grad()
"""


@pytest.fixture()
def shell(bert_classifier):
    globalipapp.start_ipython()  # once per process; later calls do nothing
    ip = globalipapp.get_ipython()
    load_ipython_extension(ip)
    model, tokenizer = bert_classifier
    batch = tokenizer(["a good film", "a bad film", "fine"], padding=True, return_tensors="pt")
    ip.user_ns.update(
        torch=torch,
        net=copy.deepcopy(model),
        tokenizer=tokenizer,
        batch=batch,
        labels=torch.tensor([1, 0, 1]),
        not_a_model=[1, 2],
    )
    yield ip
    for name in ("history", "opt", "r"):
        ip.user_ns.pop(name, None)


def _hook_count(net) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in net.modules())


def test_monitor_records_every_step_of_the_cell_and_leaves_no_hooks(shell):
    net = shell.user_ns["net"]
    before = len(_global_optimizer_pre_hooks)
    shell.run_cell_magic("monitor", "net --layers 1 --rank 2 --n-controls 3 --total-steps 4 -o history", TRAIN_CELL)
    history = shell.user_ns["history"]
    assert history.steps.tolist() == [0, 1, 2, 3]
    assert history.layers == ["layer:1"]
    energy = history.series("energy_ratio|layer:1")[1]  # steps 0, 1 fit the proxy (early protocol), 2, 3 measure
    assert np.isnan(energy[:2]).all() and np.isfinite(energy[2:]).all()
    assert _hook_count(net) == 0 and len(_global_optimizer_pre_hooks) == before


def test_monitor_losses_match_training_without_it(shell, bert_classifier):
    model, _ = bert_classifier
    losses = {}
    for monitored in (False, True):
        torch.manual_seed(0)
        shell.user_ns["net"] = copy.deepcopy(model)
        cell = TRAIN_CELL.replace(".loss.backward()", ".loss\n    seen.append(loss.item()); loss.backward()").replace(
            "net(**batch", "loss = net(**batch"
        )
        shell.user_ns["seen"] = []
        if monitored:
            shell.run_cell_magic("monitor", "net --layers 0,1 --rank 2 --n-controls 3 --total-steps 4", cell)
        else:
            shell.ex(cell)
        losses[monitored] = list(shell.user_ns["seen"])
    assert losses[True] == losses[False] and len(losses[True]) == 4


def test_named_optimizer_is_used_and_others_are_ignored(shell):
    shell.ex(
        "opt = torch.optim.SGD(net.parameters(), lr=0.05); other = torch.optim.SGD([torch.nn.Parameter("
        "torch.zeros(2))], lr=0.1)"
    )
    cell = """
for step in range(3):
    net(**batch, labels=labels).loss.backward()
    other.step()          # an optimizer of something else: not a training step of net
    opt.step(); opt.zero_grad()
"""
    shell.run_cell_magic(
        "monitor", "net --layers 1 --rank 2 --n-controls 3 --refit-every 2 --optimizer opt -o history", cell
    )
    assert shell.user_ns["history"].steps.tolist() == [0, 1, 2]
    shell.run_cell_magic("monitor", "net --layers 1 --rank 2 --n-controls 3 --refit-every 2 -o history", cell)
    assert shell.user_ns["history"].steps.tolist() == [0, 1, 2]  # the global hook skips `other`


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_failing_cell_removes_every_hook_and_keeps_the_record(shell, error):
    net = shell.user_ns["net"]
    fingerprint = model_fingerprint(net, shell.user_ns["tokenizer"])
    before = len(_global_optimizer_pre_hooks)
    shell.user_ns["error"] = error
    cell = TRAIN_CELL.replace(
        "opt.step(); opt.zero_grad()", "opt.step(); opt.zero_grad()\n    if step == 1: raise error"
    )
    with pytest.raises(type(error)):
        shell.run_cell_magic("monitor", "net --layers 1 --rank 2 --n-controls 3 --total-steps 4 -o history", cell)
    assert shell.user_ns["history"].steps.tolist() == [0, 1]
    assert _hook_count(net) == 0 and len(_global_optimizer_pre_hooks) == before
    assert all(len(m._backward_hooks) == 0 for m in net.modules())
    assert fingerprint.keys() == model_fingerprint(net, shell.user_ns["tokenizer"]).keys()


@pytest.mark.parametrize(
    "line, message",
    [
        ("not_a_model --layers 1", r"'not_a_model' is a list, not a torch.nn.modules.module.Module"),
        ("missing --layers 1", r"no variable named 'missing'"),
        ("net", r"the following arguments are required: --layers"),
        ("net --layers 1 --rank two", r"invalid int value: 'two'"),
        ("net --layers 1 --bogus 3", r"unknown arguments --bogus 3"),
        ("net --layers 99", r"%%monitor: .*99"),
        ("net --layers 1 --optimizer not_a_model", r"--optimizer must name the optimizer variable"),
    ],
)
def test_monitor_argument_errors(shell, line, message):
    with pytest.raises(UsageError, match=message):
        shell.run_cell_magic("monitor", line, "pass")
    assert _hook_count(shell.user_ns["net"]) == 0


def test_explain_displays_a_result_and_stores_it(shell):
    result = shell.run_line_magic("explain", "net tokenizer 'Not bad at all.' --method ixg --granularity word -o r")
    assert result is shell.user_ns["r"]
    assert result.method == "input_x_gradient" and result.granularity == "word"
    assert result.tokens == ["Not", "bad", "at", "all", "."]
    assert "application/vnd.jupyter.widget-view+json" in result._repr_mimebundle_()[0]


@pytest.mark.parametrize(
    "line, message",
    [
        ("net tokenizer 'Not bad.' --method shapley", r"unknown method 'shapley'; use one of .*integrated_gradients"),
        ("net tokenizer 'Not bad.", r"No closing quotation \(close the quotes around the text\)"),
        ("net tokenizer", r"the following arguments are required: text"),
        ("nope tokenizer 'x'", r"no variable named 'nope'"),
    ],
)
def test_explain_argument_errors(shell, line, message):
    with pytest.raises(UsageError, match=message):
        shell.run_line_magic("explain", line)
