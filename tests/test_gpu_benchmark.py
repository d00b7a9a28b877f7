"""``benchmarks/gpu.py --tiny``: the GPU script's code runs on a CPU, imports no view package, and reports every part.

The GPU run itself needs a lent GPU (its figures are in the README); this runs the same code with a small model of
the same family, so a change that breaks the script shows here, not on the GPU, where time is scarce.
"""

import doctest
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu.py"
LINE = re.compile(r"^bench: (?P<name>\S+) = (?P<value>\S+)")
# one figure of each part; a part that fails prints no more lines of its own and makes the script exit 1
EXPECTED = [
    "model_construction_seconds",
    "saliency_96_seconds",
    "ig8_96_seconds",
    "ig8_96_relative_completeness_error",
    "saliency_96_peak_memory_ratio",
    "generation6_input_x_gradient_seconds",
    "generation6_forward_passes_per_token",
    "activations_3k_tokens_per_second",
    "topk_sae_256x8_epoch_seconds",
    "finetune_step_seconds",
    "finetune_monitor_every_step_ratio",
    "finetune_monitor_every_10_ratio",
    "logit_lens_16_seconds",
    "attention_patterns_32_seconds",
    "activation_patching_8_seconds",
    "attribution_graph_12_seconds",
    "gpu_script_seconds",
]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "bench.txt"
    done = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--out", str(out)], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)  # fmt: skip
    return done, out


def test_tiny_mode_runs_every_part_and_writes_each_line(tiny_run):
    done, out = tiny_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "bench-error" not in done.stdout
    written = {m["name"]: m["value"] for m in map(LINE.match, out.read_text().splitlines()) if m}
    printed = {m["name"]: m["value"] for m in map(LINE.match, done.stdout.splitlines()) if m}
    assert written == printed  # every printed line was also written to --out as it went
    missing = [name for name in EXPECTED if name not in written]
    assert not missing, missing
    for name, value in written.items():
        if "peak" in name:  # no allocator counters on the CPU: memory ratios are not measured there
            assert value == "nan", (name, value)
        else:
            assert math.isfinite(float(value)), (name, value)
    assert "finite=False" not in done.stdout  # bf16 attributions and the graph are finite
    assert "tiny mode on the CPU: not a GPU figure" in done.stdout


def test_tiny_mode_takes_under_two_minutes(tiny_run):
    done, out = tiny_run
    seconds = float(re.search(r"bench: gpu_script_seconds = (\S+)", out.read_text())[1])
    assert seconds < 120


def test_the_script_refuses_the_view_packages_and_its_examples_run(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu

    finder = gpu.RefuseViewPackages()
    for name in ("anywidget", "altair.vegalite", "IPython", "interp_widgets.widgets.circuit"):
        with pytest.raises(ImportError, match="view package"):
            finder.find_spec(name, None)
    assert finder.find_spec("interp_widgets.circuits", None) is None
    failures, attempted = doctest.testmod(gpu, optionflags=doctest.ELLIPSIS)
    assert (failures, attempted > 0) == (0, True)


def test_a_missing_gpu_is_refused_with_the_fix():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, also on a machine that has one
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 2
    assert "no CUDA device: run with --tiny on a CPU" in done.stderr
