"""Per-step cost of the geometry kernels against a raw-SVD floor.

Run: ``python benchmarks/geometry.py`` (from the repository root). Prints ``bench:`` lines.

Setting: one layer at one step with n = 4096 tokens, d = 384 (MiniLM width), float32 activations and hidden-state
gradients, proxy rank k = 16 and 20 normal controls. The floor is the cheapest way to get the spectrum of one such
matrix: ``torch.linalg.svdvals`` (faster of float32/float64), measured on the same data. Goals: the whole metric
bundle and the whole alignment step should each cost no more than that one SVD. Proxy fitting and control drawing
happen once per (re)fit, not per step; they are reported with a loose goal of 10 floors. Timings are medians and
are noisy on a shared machine: the load average is printed first.
"""

from __future__ import annotations

import os
import statistics
import time

import torch

import _repo  # noqa: F401, E402  (the repository root on sys.path)

from interp_widgets.geometry import (  # noqa: E402
    Moments,
    TangentProxy,
    gradient_alignment,
    normal_controls,
    representation_metrics,
)

N_TOKENS, DIM, RANK, N_CONTROLS, REPEATS = 4096, 384, 16, 20, 7


def interleaved_ms(functions: dict, repeats: int = REPEATS) -> dict:
    """Wall times (ms) of each function, run round-robin so that all of them see the same machine load.

    Returns, per name, the list of ``repeats`` timings after one warm-up call each.
    """
    for fn in functions.values():
        fn()
    times = {name: [] for name in functions}
    for _ in range(repeats):
        for name, fn in functions.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


def median_ratio(times: list, floor: list) -> float:
    """Median over repeats of the per-round ratio to the floor (robust to load changing between rounds)."""
    return statistics.median(t / f for t, f in zip(times, floor))


def bench(name: str, value: float, op: str, target: float) -> None:
    print(f"bench: {name} = {value:.3g} (goal {op} {target:.3g})")


def main() -> None:
    print(
        f"# n={N_TOKENS} d={DIM} k={RANK} controls={N_CONTROLS} torch_threads={torch.get_num_threads()} "
        f"load_average={os.getloadavg()[0]:.2f} median_of={REPEATS}"
    )
    generator = torch.Generator().manual_seed(0)
    sequence_ids = torch.arange(N_TOKENS) // 64
    # LAPACK's SVD is much faster on strongly anisotropic data, so the floor depends on the spectrum:
    # report an activation-like (log-spaced std over two decades) and an isotropic cloud
    for regime, spectrum in (("aniso", torch.logspace(0, -2, DIM)), ("iso", torch.ones(DIM))):
        H = (torch.randn(N_TOKENS, DIM, generator=generator) * spectrum + 3.0).float()
        G = (torch.randn(N_TOKENS, DIM, generator=generator) * spectrum.flip(0) * 1e-3).float()
        proxy = TangentProxy.fit(H, rank=RANK)
        controls = normal_controls(proxy, N_CONTROLS, seed=0)
        moments = Moments.from_rows(G)
        times = interleaved_ms(
            {
                "svd32": lambda: torch.linalg.svdvals(H),
                "svd64": lambda: torch.linalg.svdvals(H.double()),
                "bundle": lambda: representation_metrics(H, sequence_ids=sequence_ids),
                "alignment": lambda: gradient_alignment(G, proxy, controls),
                "alignment_from_moments": lambda: gradient_alignment(moments, proxy, controls),
                "pca_fit": lambda: TangentProxy.fit(H, rank=RANK),
                "controls": lambda: normal_controls(proxy, N_CONTROLS, seed=1),
            }
        )
        faster = min(("svd32", "svd64"), key=lambda name: statistics.median(times[name]))
        floor = times[faster]
        print(f"# {regime}: svd floor ({faster}) {statistics.median(floor):.1f} ms")
        for name, goal in (("bundle", 1.0), ("alignment", 1.0), ("alignment_from_moments", 1.0)):
            bench(f"geometry_{name}_ms_{regime}", statistics.median(times[name]), "<=", statistics.median(floor))
            bench(f"geometry_{name}_over_svd_{regime}", median_ratio(times[name], floor), "<=", goal)
        for name in ("pca_fit", "controls"):  # once per (re)fit, not per step
            bench(f"geometry_{name}_over_svd_{regime}", median_ratio(times[name], floor), "<=", 10.0)


if __name__ == "__main__":
    main()
