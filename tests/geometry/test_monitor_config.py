"""MonitorConfig: every monitor setting in one frozen, validated dataclass; the monitor and replay take it or its
fields by name."""

import dataclasses
import inspect

import pytest
import torch

from interp_widgets.geometry import AnisotropyMonitor, MonitorConfig, replay


def net():
    return torch.nn.Sequential(torch.nn.Linear(8, 8))


def test_unknown_override_names_the_closest_setting():
    with pytest.raises(TypeError, match="no setting 'n_control'; did you mean 'n_controls'"):
        AnisotropyMonitor(net(), ["0"], n_control=3)
    with pytest.raises(TypeError, match="no setting 'rnak'; did you mean 'rank'"):
        replay([net()], None, ["0"], batches=[{"labels": 0}], rnak=2)
    with pytest.raises(TypeError, match="no setting 'banana'; the settings are rank, every"):
        AnisotropyMonitor(net(), ["0"], banana=1)


def test_keyword_settings_and_a_config_are_the_same_monitor():
    by_keywords = AnisotropyMonitor(net(), ["0"], rank=2, n_controls=3, fit="refit", refit_every=4)
    config = MonitorConfig(rank=2, n_controls=3, fit="refit", refit_every=4)
    by_config = AnisotropyMonitor(net(), ["0"], config)
    assert by_keywords.config == by_config.config and by_config.config is config
    assert by_keywords.meta == by_config.meta
    assert AnisotropyMonitor(net(), ["0"], config, rank=3).config.rank == 3 and config.rank == 2


def test_config_is_frozen_and_validated_once_when_built():
    config = MonitorConfig(rank=2, total_steps=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.rank = 3
    for bad, match in (
        (dict(rank=0), "rank must be an integer >= 1"),
        (dict(fit="late"), "fit must be 'early', 'refit' or 'fixed'"),
        (dict(fit="refit"), "refit_every"),
        (dict(fit="refit", refit_every=3, total_steps=5), "total_steps do"),
        (dict(total_steps=10, fit_fraction=1.5), "fit_fraction"),
        (dict(proxy_method="ica"), "proxy_method must be 'pca'"),
        (dict(zeta=2.0), "zeta must be a number in"),
    ):
        with pytest.raises(ValueError, match=match):
            MonitorConfig(**bad)
    assert MonitorConfig(special_token_ids=[3, 1, 3]).special_token_ids == (1, 3)


def test_settings_read_from_the_monitor_and_cannot_be_assigned():
    monitor = AnisotropyMonitor(net(), ["0"], rank=2)
    assert (monitor.rank, monitor.fit, monitor.total_steps) == (2, "early", None)
    with pytest.raises(AttributeError, match="MonitorConfig setting"):
        monitor.total_steps = 10
    monitor.set_total_steps(10)
    assert monitor.total_steps == 10 and monitor.config.total_steps == 10 and monitor.meta["total_steps"] == 10


def test_defaults_live_in_the_config_only():
    monitor_params = inspect.signature(AnisotropyMonitor).parameters
    replay_params = inspect.signature(replay).parameters
    for name in ("rank", "n_controls", "fit", "total_steps", "fit_fraction", "refit_every", "basis"):
        assert name not in monitor_params and name not in replay_params
    named = lambda params: [p for p in params.values() if p.kind is not p.VAR_KEYWORD]  # noqa: E731
    assert len(named(monitor_params)) <= 12 and len(named(replay_params)) <= 12


def test_rank_is_checked_once_by_the_config_then_against_each_layer():
    with pytest.raises(ValueError, match=r"^rank must be an integer >= 1, got 0"):
        MonitorConfig(rank=0)
    layers = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    with pytest.raises(ValueError, match=r"^rank must be <= 3 at layer '0', got 4: d = 6"):
        AnisotropyMonitor(layers, ["0"], rank=4, total_steps=2)  # d known when bound
    monitor = AnisotropyMonitor(layers, ["1"], rank=4, total_steps=2)  # a Tanh's d shows in the first forward
    with pytest.raises(ValueError, match=r"^rank must be <= 3 at layer '1', got 4: d = 6"):
        with monitor:
            layers(torch.randn(4, 8)).sum().backward()
