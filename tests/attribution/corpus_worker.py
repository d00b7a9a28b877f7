"""Runs :func:`attribute_corpus` in a process of its own, for ``tests/attribution/test_corpus.py`` and nothing else.

``python -m tests.attribution.corpus_worker PATH [--texts N] [--shard-size S] [--world W --rank R --init FILE]
[--delay SECONDS] [--reassign]``: input × gradient of the tiny BERT classifier (``tests.tiny_models``, seeded, so
every process has the same weights) on the first N texts of the demo corpus, single-threaded so that every process
computes the same bits. ``--delay`` sleeps before each shard, so that a test can kill the run part-way.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--texts", type=int, default=60)
    parser.add_argument("--shard-size", type=int, default=1)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--init")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--reassign", action="store_true")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from interp_widgets.attribution import api
    from interp_widgets.attribution import attribute_corpus
    from interp_widgets.demo import corpus
    from tests.tiny_models import bert_classifier

    if args.delay:
        plain = api.attribute

        def slow(*a, **k):
            time.sleep(args.delay)
            return plain(*a, **k)

        api.attribute = slow  # attribute_corpus looks it up at each call
    model, tokenizer = bert_classifier()
    group = None
    if args.world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"file://{args.init}", rank=args.rank, world_size=args.world)
        group = dist.group.WORLD
    try:
        attribute_corpus(model, tokenizer, corpus()[: args.texts], method="input_x_gradient", path=args.path,
                         shard_size=args.shard_size, process_group=group, reassign=args.reassign, progress=False,
                         target="positive")  # fmt: skip
    finally:
        if group is not None:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
