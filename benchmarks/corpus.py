"""Corpus attribution (``attribute_corpus``): two gloo ranks against one, and the work of a resume after a kill.

Input × gradient of the offline demo MiniLM classifier on ``--texts`` texts (default 2,000, the demo corpus repeated)
in shards of the default size (2 % of the job). Each run is a process of its own, single-threaded per rank. Prints:

1. info: ``corpus_two_rank_time_ratio``, the wall time of two gloo ranks on this machine / one rank (report only,
   no goal: it depends on the cores free).
2. ``bench: corpus_resume_work_ratio``: a one-rank run killed (SIGKILL) once half of its shards are written, then
   resumed with the same call: the total attributed rows of both runs (``CorpusAttribution.work()["rows"]``, which
   counts the shard being computed at the kill at its full cost) / the rows of the uninterrupted run. Goal <= 1.05.
   The resumed result is checked bitwise equal to the uninterrupted one.

Example:
    $ python benchmarks/corpus.py
    $ python benchmarks/corpus.py --texts 60      # a quick check that it runs
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _repo  # noqa: F401  (this checkout first on sys.path)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def texts(n: int) -> list[str]:
    from interp_widgets import demo

    sentences = demo.corpus()
    return [sentences[i % len(sentences)] for i in range(n)]


def worker(path: str, n: int, rank: int, world: int, init: str | None) -> None:
    """One rank of a run (this script with ``--worker``)."""
    import torch

    torch.set_num_threads(1)
    from interp_widgets import demo
    from interp_widgets.attribution import attribute_corpus

    model, tokenizer = demo.load_classifier(progress=False)
    group = None
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
        group = dist.group.WORLD
    try:
        attribute_corpus(model, tokenizer, texts(n), method="input_x_gradient", path=path, process_group=group,
                         progress=False)  # fmt: skip
    finally:
        if group is not None:
            dist.destroy_process_group()


def launch(path: Path, n: int, world: int = 1, init: Path | None = None) -> list[subprocess.Popen]:
    script = Path(__file__).resolve()
    return [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                "--worker",
                str(path),
                "--texts",
                str(n),
                "--rank",
                str(r),
                "--world",
                str(world),
                "--init",
                str(init or ""),
            ]
        )
        for r in range(world)
    ]


def wait(processes: list[subprocess.Popen]) -> None:
    for p in processes:
        if p.wait() != 0:
            raise SystemExit(f"a rank exited with {p.returncode}")


def timed_run(path: Path, n: int, world: int, init: Path | None = None) -> float:
    start = time.perf_counter()
    wait(launch(path, n, world, init))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--worker")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--init", default="")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.texts, args.rank, args.world, args.init or None)
        return

    from interp_widgets.attribution import load_corpus

    n = args.texts
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        one = timed_run(tmp / "one", n, 1)
        two = timed_run(tmp / "two", n, 2, tmp / "init")
        reference = load_corpus(tmp / "one")
        same_two = all(a.scores.tobytes() == b.scores.tobytes() for a, b in zip(load_corpus(tmp / "two"), reference))
        print(f"info: {n} texts in {reference.n_shards} shards of {reference.shard_size}; one rank {one:.1f}s, two "
              f"gloo ranks {two:.1f}s (includes each process's start and model load); equal bit for bit: {same_two}")  # fmt: skip
        print(f"info: corpus_two_rank_time_ratio = {two / one:.3f} (report only, no goal)")

        killed = tmp / "killed"
        [process] = launch(killed, n, 1)
        half = reference.n_shards // 2
        while process.poll() is None and len(list(killed.glob("shard-*.safetensors"))) < half:
            time.sleep(0.02)
        if process.poll() is not None:
            raise SystemExit("the run finished before the kill; use more texts")
        process.send_signal(signal.SIGKILL)
        process.wait()
        at_kill = len(list(killed.glob("shard-*.safetensors")))
        wait(launch(killed, n, 1))
        resumed = load_corpus(killed)
        same = all(
            a.scores.tobytes() == b.scores.tobytes() and a.tokens == b.tokens for a, b in zip(resumed, reference)
        )
        work, uninterrupted = resumed.work(), reference.work()
        print(f"info: killed at {at_kill}/{reference.n_shards} shards; {work['shards_lost']} shard(s) lost; rows "
              f"{work['rows']} against {uninterrupted['rows']}; resumed equals uninterrupted bit for bit: {same}")  # fmt: skip
        print(f"bench: corpus_resume_work_ratio = {work['rows'] / uninterrupted['rows']:.3f} (goal <= 1.05)")


if __name__ == "__main__":
    main()
