"""Dictionary training under real ``torchrun``: ``torch.distributed.run --nproc-per-node 2 --standalone`` launches
``_torchrun_worker.py`` (gloo, on CPU), which trains cases of ``test_training_ddp.py`` across the 2 ranks and has
every rank save what it ended with (safetensors). Here, one process fits the same models: the weights agree to 1e-6
relative (the criterion of ``test_training_ddp.py``, whose forked workers cover many more cases), and the two ranks
hold the same weights bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from interp_widgets.circuits import TranscoderSet
from interp_widgets.concepts import ConceptModel
from tests import tiny_models
from tests.concepts.test_training_ddp import fit_transcoder_set, models, relative, set_weights

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("_torchrun_worker.py")


@pytest.fixture(scope="module")
def torchrun_out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("torchrun")
    # the worker imports tests.concepts from the repository root; one thread per rank on a small machine
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone"]
    try:
        result = subprocess.run(
            [*command, str(WORKER), str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        stderr = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else error.stderr or ""
        pytest.fail(f"torchrun ran past 300 s; stderr tail:\n{stderr[-4000:]}")
    assert result.returncode == 0, f"torchrun exited with {result.returncode}; stderr tail:\n{result.stderr[-4000:]}"
    return out


def check(ranks: list[dict], single: dict) -> None:
    zero, one = ranks
    assert sorted(zero) == sorted(one) == sorted(single) and single
    for key, reference in single.items():
        assert (zero[key] == one[key]).all(), key  # every rank ends with the same weights
        assert relative(zero[key], reference) < 1e-6, (key, relative(zero[key], reference))


def weights(sae) -> dict:
    return {name: t.numpy() for name, t in sae.weights_.items()}


def test_topk_sae_three_steps_across_torchrun_ranks(torchrun_out):
    single = models()["topk_3_steps"](None)
    ranks = [ConceptModel.load(torchrun_out / f"topk-rank{r}.safetensors") for r in range(2)]
    check([weights(sae) for sae in ranks], weights(single))


def test_layer_parallel_transcoder_set_across_torchrun_ranks(torchrun_out):
    single = set_weights(fit_transcoder_set(lm=tiny_models.llama_lm))
    assert {key.split("/")[0] for key in single} == {"0", "1"}  # rank 0 trained layer 0, rank 1 layer 1
    ranks = [TranscoderSet.load(torchrun_out / f"transcoders-rank{r}.safetensors") for r in range(2)]
    check([set_weights(tcs) for tcs in ranks], single)
