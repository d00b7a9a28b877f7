"""Fixtures shared by the concept tests."""

from __future__ import annotations

import warnings

import pytest
import torch


@pytest.fixture
def quiet_single_thread():
    """Run on one torch thread, warnings silenced; the setting is restored afterwards. Small matrices and a small
    LM's generation run much faster on one thread on a shared 2-core machine than on two contended ones."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    torch.set_num_threads(threads)
