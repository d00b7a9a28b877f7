"""Thread settings of the monitor's measurement."""

from __future__ import annotations

import contextlib
import os

import torch


@contextlib.contextmanager
def one_thread():
    """Run the monitor's per-step work (small products, eigensolves and QRs of d × d matrices with d in the
    hundreds, dozens of small element-wise kernels per layer) on one intra-op thread, restoring the caller's
    thread count afterwards. Each of these kernels ends in a barrier: with two OpenMP threads on a busy machine
    every barrier waits for a descheduled thread. Measured at load 15 on 2 cores: a 384 × 384 ``eigvalsh`` 10–30×
    slower on two threads than on one, the 1024 × 256 float32 Gram in 256-row blocks 18× slower; on an idle
    machine the second thread gains at most 2× on these sizes. The result is the same algorithm's, so every error
    bound holds.

    Example:
        >>> threads = torch.get_num_threads()
        >>> with one_thread():
        ...     inside = torch.get_num_threads()
        >>> inside, torch.get_num_threads() == threads
        (1, True)
    """
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


#: One-minute load average per core above which :func:`measurement_threads` runs on one thread.
OVERSUBSCRIBED_LOAD_PER_CORE = 1.5


def machine_oversubscribed() -> bool:
    """Whether the one-minute load average exceeds :data:`OVERSUBSCRIBED_LOAD_PER_CORE` runnable threads per core
    (False where the platform reports no load average).

    Example:
        >>> isinstance(machine_oversubscribed(), bool)
        True
    """
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has no load average
        return False
    return load > OVERSUBSCRIBED_LOAD_PER_CORE * (os.cpu_count() or 1)


@contextlib.contextmanager
def measurement_threads():
    """The intra-op threads of one measured monitor step: the caller's own count, except on an oversubscribed
    machine (:func:`machine_oversubscribed`), where :func:`one_thread` avoids barriers that wait for descheduled
    threads. On an idle 2-core machine the second thread halves the step's products (the Gram of the gradient
    rows, the proxy and control products); at load 15 it made them 10–30× slower. The load is read at every
    step, so the choice follows the machine. The eigensolves always run on one thread (:func:`one_thread`).

    Example:
        >>> threads = torch.get_num_threads()
        >>> with measurement_threads():
        ...     inside = torch.get_num_threads()
        >>> inside == (1 if machine_oversubscribed() else threads), torch.get_num_threads() == threads
        (True, True)
    """
    if machine_oversubscribed():
        with one_thread():
            yield
    else:
        yield
