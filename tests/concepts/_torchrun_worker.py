"""One rank of ``test_training_torchrun.py``, launched by ``torchrun --nproc-per-node 2 --standalone``.

``python _torchrun_worker.py OUT_DIR``: joins the gloo group from torchrun's environment (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``), then trains, across the ranks, the cases of ``test_training_ddp.py``:

- ``topk_3_steps``: a TopK SparseAutoencoder, 3 Adam steps, each rank reading its part of every minibatch;
- a layer-parallel ``TranscoderSet.fit(process_group=)`` on the tiny Llama (rank ``r`` trains layer ``r``).

Every rank writes what it ended with through the library's own save (safetensors):
``OUT_DIR/topk-rank<r>.safetensors`` and ``OUT_DIR/transcoders-rank<r>.safetensors``.
"""

from __future__ import annotations

import os
import sys


def main(out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from tests import tiny_models
    from tests.concepts.test_training_ddp import fit_transcoder_set, models

    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # env://, as torchrun sets it
    try:
        rank = dist.get_rank()
        models()["topk_3_steps"](None).save(os.path.join(out_dir, f"topk-rank{rank}.safetensors"))
        tcs = fit_transcoder_set(dist.group.WORLD, lm=tiny_models.llama_lm)
        tcs.save(os.path.join(out_dir, f"transcoders-rank{rank}.safetensors"))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":  # pytest's --doctest-modules imports this file too: nothing runs then
    main(sys.argv[1])
