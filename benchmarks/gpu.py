"""The compute families at Llama-3-8B scale on one GPU: one script, one command, ``bench:`` lines as it goes.

The model has Llama-3-8B's shape (hidden 4,096, 32 layers, 32 query and 8 key/value heads, MLP 14,336, vocabulary
128,256) with random bf16 weights made directly on the GPU (``with torch.device("cuda")``): nothing is downloaded.
Text is tokenised by SmolLM2's tokenizer, shipped beside this script (``data/smollm2_tokenizer.json.gz``, 0.6 MB);
its ids are all below the model's vocabulary. The script imports only the compute families, never the widgets, so it
runs on a GPU machine's stock image (Python 3.12, torch 2.11, transformers 5.17, no anywidget, altair or IPython): an
import hook refuses those packages, so an import that would need them fails here first.

It prints, and appends to ``--out`` as each one is measured (a run cut short still reports), the ``bench:`` lines of:

1. ``saliency_2048_*`` and ``ig32_2048_*``: one explained token after a 2,048-token prompt, by saliency and by
   integrated gradients at 32 steps (``max_batch_tokens`` 2,048: one row per pass). Time, and peak GPU memory over
   what was allocated before the call ÷ the same for one plain forward + backward (the model's own forward with its
   full logits, the explained token's log-probability, ``torch.autograd.grad`` to the input embeddings). Goal
   <= 1.3. IG's completeness error is info.
2. ``generation64_*``: a 64-token greedy generation explained by input x gradient at every generated token: time and
   the passes it ran (``params["passes"]``).
3. ``activations_200k_*`` and ``topk_sae_*``: layer 16's activations over 200k tokens of the shipped corpus, then a
   TopK SAE of 32,768 latents, k = 64, one epoch at batch 4,096 on the GPU.
4. ``finetune_*``: full fine-tuning in bf16 on 8 x 512 tokens, AdamW with bf16 states (``fused=True``). 5 warm-up
   steps, then 80 timed steps in runs of 10, timed with CUDA events: unmonitored, monitored on schedule A,
   unmonitored, monitored on schedule B, twice over. The monitor: ``AnisotropyMonitor`` on 8 layers, rank 16, 20
   controls, proxies fitted over the first 30 % of its 20 monitored steps (``fit="early"``), at most 4,096 token rows
   per layer and step, attached to the optimiser; schedule A measures every step (``every=1``), B every 10th
   (``every=10``). Goal: monitored ÷ unmonitored time per step <= 1.03.
5. ``logit_lens_*``, ``attention_patterns_*``, ``activation_patching_*``: once each (64-, 512- and 16-token prompts).
6. ``attribution_graph_*``: random TopK transcoders of 16,384 latents, k = 64, on every layer; a 64-token prompt,
   ``max_feature_nodes`` 8,192, ``batch_size`` 128. Attribution graphs are computed in float32 (the closure holds to
   float tolerance only there), so the model is cast to float32 first (the optimiser's state is freed before). At
   ``batch_size`` 256 the float32 replacement pass does not fit beside the 32 GB model and 17 GB of transcoders on
   an H200 (run out of memory at 137 GB on 2026-12-04), so the script uses 128; it halves the batch again, and says
   so, if that runs out too.
7. ``gpu_script_seconds``: the whole run, model construction included. Goal <= 240.

``--tiny`` runs the same code with a small model of the same family and small sizes on the CPU in under 2 minutes
(CI runs it: ``tests/test_gpu_benchmark.py``); its figures are not GPU figures and its memory ratios are not measured
(``nan``).

Example:
    $ python benchmarks/gpu.py --out bench_gpu.txt          # on a GPU
    $ python benchmarks/gpu.py --tiny --out /tmp/tiny.txt   # anywhere, on the CPU
"""

from __future__ import annotations

import argparse
import gc
import gzip
import importlib.abc
import math
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import _repo  # noqa: F401  (the checkout's interp_widgets: a GPU machine has no install of it)

HERE = Path(__file__).resolve().parent
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# this script's own process: the graph's float32 pass fills most of the card, where fixed-size segments fragment
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

#: Packages of the views and the notebook, absent from a GPU machine's stock image: the compute path must not need them.
VIEW_PACKAGES = frozenset(
    {
        "anywidget",
        "altair",
        "ipywidgets",
        "traitlets",
        "IPython",
        "vl_convert",
        "nbconvert",
        "nbformat",
        "ipykernel",
        "comm",
        "marimo",
    }
)


class RefuseViewPackages(importlib.abc.MetaPathFinder):
    """An import hook that refuses :data:`VIEW_PACKAGES` (and ``interp_widgets.widgets``), naming the import.

    Example:
        >>> finder = RefuseViewPackages()
        >>> finder.find_spec("numpy", None) is None
        True
        >>> finder.find_spec("altair", None)
        Traceback (most recent call last):
        ...
        ImportError: benchmarks/gpu.py: the compute path imported 'altair', a view package that a GPU machine lacks
    """

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in VIEW_PACKAGES or name.startswith("interp_widgets.widgets"):
            raise ImportError(
                f"benchmarks/gpu.py: the compute path imported {name!r}, a view package that a GPU machine lacks"
            )
        return None


#: The sizes of each mode: the full one for an 80+ GB GPU, ``tiny`` for a CPU in CI.
SIZES = {
    "full": dict(
        model=dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
        ),
        prompt_tokens=2048,
        ig_steps=32,
        gen_tokens=64,
        activation_tokens=200_000,
        activation_layer=16,
        sae_latents=32768,
        sae_k=64,
        sae_batch=4096,
        finetune_batch=(8, 512),
        warmup_steps=5,
        run_steps=10,
        monitor_layers=8,
        lens_tokens=64,
        pattern_tokens=512,
        patch_tokens=16,
        graph_tokens=64,
        graph_latents=16384,
        graph_k=64,
        graph_nodes=8192,
        graph_batch=128,
    ),
    "tiny": dict(
        model=dict(
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=128256,
        ),
        prompt_tokens=96,
        ig_steps=8,
        gen_tokens=6,
        activation_tokens=3_000,
        activation_layer=2,
        sae_latents=256,
        sae_k=8,
        sae_batch=256,
        finetune_batch=(2, 32),
        warmup_steps=2,
        run_steps=2,
        monitor_layers=2,
        lens_tokens=16,
        pattern_tokens=32,
        patch_tokens=8,
        graph_tokens=12,
        graph_latents=128,
        graph_k=8,
        graph_nodes=64,
        graph_batch=32,
    ),
}
GOAL_MEMORY_RATIO = 1.3
GOAL_MONITOR_RATIO = 1.03
GOAL_SECONDS = 240


class Report:
    """Prints ``bench:`` lines and appends each to ``path`` at once (``None``: print only).

    Example:
        >>> Report(None).line("x_seconds", 1.23456, "s", goal="<= 2")
        bench: x_seconds = 1.235 s (goal <= 2)
    """

    def __init__(self, path: str | None):
        self.path = path

    def line(self, name: str, value: float, unit: str = "", goal: str | None = None, info: str = "") -> None:
        text = f"bench: {name} = {value:.4g}{' ' + unit if unit else ''}"
        text += f" (goal {goal})" if goal else ""
        text += f" [{info}]" if info else ""
        print(text, flush=True)
        if self.path:
            with open(self.path, "a") as out:
                out.write(text + "\n")


class Device:
    """Timing and peak memory on the device the run uses (CUDA events and allocator counters; on the CPU, wall time
    and no memory figure).

    Example:
        >>> dev = Device("cpu")
        >>> with dev.timed() as t:
        ...     _ = sum(range(1000))
        >>> t.seconds >= 0, math.isnan(dev.peak_over(lambda: None))
        (True, True)
    """

    def __init__(self, name: str):
        import torch

        self.torch = torch
        self.name = name
        self.cuda = name.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    @contextmanager
    def timed(self):
        class Timing:
            seconds = float("nan")

        timing = Timing()
        if self.cuda:
            start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            yield timing
            end.record()
            end.synchronize()
            timing.seconds = start.elapsed_time(end) / 1000
        else:
            t0 = time.perf_counter()
            yield timing
            timing.seconds = time.perf_counter() - t0

    def peak_over(self, run) -> float:
        """Bytes allocated at the peak of ``run()`` beyond what was allocated before it (nan on the CPU)."""
        if not self.cuda:
            run()
            return float("nan")
        self.sync()
        self.torch.cuda.empty_cache()
        self.torch.cuda.reset_peak_memory_stats()
        before = self.torch.cuda.memory_allocated()
        run()
        self.sync()
        return float(self.torch.cuda.max_memory_allocated() - before)


#: ``--profile DIR``: where the extra, profiled repeats write their tables (None: no profiling).
PROFILE_DIR: Path | None = None


@contextmanager
def profiled(name: str, dev: Device):
    """With ``--profile DIR``, where the time of the block goes, written to ``DIR/<name>_profile.txt``: the torch
    profiler's top operators by time on the device and on the host, then cProfile's top Python functions. Without it,
    nothing. Profiled blocks are extra repeats: the timed runs are never profiled.

    Example:
        >>> with profiled("nothing", Device("cpu")):
        ...     pass
    """
    if PROFILE_DIR is None:
        yield
        return
    import cProfile
    import io
    import pstats

    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if dev.cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    python = cProfile.Profile()
    with torch.profiler.profile(activities=activities) as prof:
        python.enable()
        try:
            yield
        finally:
            python.disable()
            dev.sync()
    out = io.StringIO()
    averages = prof.key_averages()
    out.write(averages.table(sort_by="self_cuda_time_total" if dev.cuda else "self_cpu_time_total", row_limit=30))
    out.write("\n")
    out.write(averages.table(sort_by="cpu_time_total", row_limit=20))
    out.write("\n")
    pstats.Stats(python, stream=out).sort_stats("cumulative").print_stats(45)
    (PROFILE_DIR / f"{name}_profile.txt").write_text(out.getvalue())


def load_tokenizer():
    """SmolLM2's tokenizer from the file shipped beside this script.

    Example:
        >>> tokenizer = load_tokenizer()
        >>> tokenizer("The Eiffel Tower").input_ids, tokenizer.bos_token
        ([504, 414, 46682, 18669], '<|im_start|>')
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    with gzip.open(HERE / "data" / "smollm2_tokenizer.json.gz", "rt", encoding="utf-8") as f:
        backend = Tokenizer.from_str(f.read())
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )


def build_model(shape: dict, device: str, dtype):
    """A Llama causal LM of ``shape`` with random weights, made directly on ``device`` in ``dtype``, in eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        **shape,
        max_position_embeddings=8192,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        torch.manual_seed(0)
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def corpus_texts(tokenizer, n_tokens: int) -> tuple[list[str], int]:
    """Texts of the shipped corpus's train split until they hold ``n_tokens`` tokens (and that count)."""
    from interp_widgets.demo import load_text_corpus

    texts, total = [], 0
    for text in load_text_corpus("train"):
        texts.append(text)
        total += len(tokenizer(text, add_special_tokens=False).input_ids)
        if total >= n_tokens:
            break
    return texts, total


def prompt_of(tokenizer, n_tokens: int, offset: int = 0) -> str:
    """A text of exactly ``n_tokens`` tokens (after the tokenizer's own round trip) from the shipped corpus."""
    texts, _ = corpus_texts(tokenizer, n_tokens * 2 + offset + 64)
    ids = tokenizer(" ".join(texts), add_special_tokens=False).input_ids[offset:]
    for cut in range(n_tokens, n_tokens + 64):  # a decode/encode round trip can merge tokens at the cut
        text = tokenizer.decode(ids[:cut])
        if len(tokenizer(text, add_special_tokens=False).input_ids) == n_tokens:
            return text
    raise RuntimeError(f"no {n_tokens}-token prompt found")


def bench_attribution(model, tokenizer, dev: Device, size: dict, report: Report) -> None:
    import torch

    from interp_widgets.attribution import attribute

    n = size["prompt_tokens"]
    prompt = prompt_of(tokenizer, n)
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids.to(dev.name)
    with torch.no_grad():
        target = int(model(input_ids=ids).logits[0, -1].argmax())

    def reference():
        x = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logp = model(inputs_embeds=x).logits[0, -1].float().log_softmax(-1)[target]
        torch.autograd.grad(logp, x)

    reference_bytes = dev.peak_over(reference)
    report.line(f"plain_forward_backward_{n}_peak_gb", reference_bytes / 1e9, "GB")
    for method, params, name in (
        ("saliency", {}, "saliency"),
        ("integrated_gradients", {"n_steps": size["ig_steps"]}, f"ig{size['ig_steps']}"),
    ):
        box: dict = {}

        def run(method=method, params=params, box=box):
            with dev.timed() as timing:
                box["result"] = attribute(
                    model,
                    tokenizer,
                    prompt,
                    method=method,
                    continuation=[target],
                    method_params={**params, "progress": False},
                    max_batch_tokens=n,
                )
            box["seconds"] = timing.seconds

        peak = dev.peak_over(run)
        result = box["result"]
        finite = bool(torch.isfinite(torch.as_tensor(result.scores[:, :n])).all())  # the prompt's scores
        report.line(f"{name}_{n}_seconds", box["seconds"], "s", info=f"finite={finite}")
        report.line(
            f"{name}_{n}_peak_memory_ratio",
            peak / reference_bytes,
            goal=f"<= {GOAL_MEMORY_RATIO}",
            info=f"{peak / 1e9:.2f} GB over the weights",
        )
        if method == "integrated_gradients":
            report.line(f"{name}_{n}_relative_completeness_error", float(result.relative_completeness_error[0]))


def bench_generation(model, tokenizer, dev: Device, size: dict, report: Report) -> None:
    from interp_widgets.attribution import attribute

    steps = size["gen_tokens"]
    with dev.timed() as timing:
        result = attribute(
            model,
            tokenizer,
            "The best way to spend a rainy Sunday afternoon is",
            method="input_x_gradient",
            max_new_tokens=steps,
            method_params={"progress": False},
        )
    passes = result.params["passes"]
    report.line(
        f"generation{steps}_input_x_gradient_seconds", timing.seconds, "s", info=f"{passes['targets']} tokens explained"
    )
    report.line(f"generation{steps}_forward_passes_per_token", passes["forward"] / passes["targets"])
    report.line(f"generation{steps}_backward_passes_per_token", passes["backward"] / passes["targets"])


def bench_concepts(model, tokenizer, dev: Device, size: dict, report: Report) -> None:
    from interp_widgets.concepts import SparseAutoencoder, collect_activations

    texts, _ = corpus_texts(tokenizer, size["activation_tokens"])
    with dev.timed() as timing:
        store = collect_activations(
            model,
            tokenizer,
            texts,
            layer=size["activation_layer"],
            memory_budget="16GB",
            max_batch_tokens=32768,
            progress=False,
        )
    rows = store.shape[0]
    report.line(
        f"activations_{size['activation_tokens'] // 1000}k_tokens_per_second",
        rows / timing.seconds,
        "tok/s",
        info=f"{rows} rows × {store.shape[1]} at layer {size['activation_layer']}, {timing.seconds:.1f} s",
    )
    sae = SparseAutoencoder(
        size["sae_latents"],
        activation="topk",
        k=size["sae_k"],
        batch_size=size["sae_batch"],
        max_epochs=1,
        device=dev.name,
        progress=False,
    )
    with dev.timed() as timing:
        sae.fit(store)
    last = {key: round(float(value), 4) for key, value in sae.fit_info_["history"][-1].items()}
    report.line(
        f"topk_sae_{size['sae_latents']}x{size['sae_k']}_epoch_seconds",
        timing.seconds,
        "s",
        info=f"{rows} rows, batch {size['sae_batch']}, last epoch {last}",
    )
    if PROFILE_DIR is not None:
        with profiled("activations", dev):
            collect_activations(
                model,
                tokenizer,
                texts[: len(texts) // 4],
                layer=size["activation_layer"],
                memory_budget="16GB",
                max_batch_tokens=32768,
                progress=False,
            )
        with profiled("topk_sae", dev):
            SparseAutoencoder(
                size["sae_latents"],
                activation="topk",
                k=size["sae_k"],
                batch_size=size["sae_batch"],
                max_epochs=1,
                device=dev.name,
                progress=False,
            ).fit(store.to_numpy()[: rows // 4])


def bench_finetune(model, tokenizer, dev: Device, size: dict, report: Report) -> None:
    import numpy as np
    import torch

    from interp_widgets.geometry import AnisotropyMonitor

    batch, length = size["finetune_batch"]
    texts, _ = corpus_texts(tokenizer, batch * length * 2)
    flat = tokenizer(" ".join(texts), add_special_tokens=False, return_tensors="pt").input_ids[0]
    ids = flat[: batch * length].view(batch, length).to(dev.name)
    n_layers = model.config.num_hidden_layers
    layers = [f"layer:{i}" for i in range(0, n_layers, max(1, n_layers // size["monitor_layers"]))]
    layers = layers[: size["monitor_layers"]]
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=dev.cuda, foreach=False if not dev.cuda else None)
    monitored_steps = 2 * size["run_steps"]
    schedules = {"every_step": 1, "every_10": 10}  # measure every step, or every 10th
    monitors = {
        name: AnisotropyMonitor(model, layers, rank=16, n_controls=20, fit="early", total_steps=monitored_steps,
                                every=every, optimizer=optimizer, max_tokens=4096)
        for name, every in schedules.items()
    }  # fmt: skip

    def train(steps: int) -> None:
        for _ in range(steps):
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    train(size["warmup_steps"])
    dev.sync()
    times = dict.fromkeys(["plain", *schedules], 0.0)
    for run in ("plain", "every_step", "plain", "every_10") * 2:  # alternated, so drifts hit every run alike
        with dev.timed() as timing:
            if run == "plain":
                train(size["run_steps"])
            else:
                with monitors[run]:
                    train(size["run_steps"])
        times[run] += timing.seconds
    if PROFILE_DIR is not None:
        with profiled("monitored_steps", dev), monitors["every_step"]:
            train(3)
    model.eval()
    plain = times["plain"] / (4 * size["run_steps"])
    report.line(
        "finetune_step_seconds",
        plain,
        "s",
        info=f"{batch}x{length} tokens, bf16 AdamW states, {4 * size['run_steps']} plain steps",
    )
    for name, every in schedules.items():
        monitor = monitors[name]
        energy = monitor.series(f"energy_ratio|{monitor.layers[0]}")[1]
        spent = np.asarray(monitor.series("monitor_ms")[1], dtype=float)  # the monitor's own time per measured step
        report.line(
            f"finetune_monitor_{name}_ratio",
            times[name] / monitored_steps / plain,
            goal=f"<= {GOAL_MONITOR_RATIO}",
            info=f"{len(layers)} layers, rank 16, 20 controls, every {every} step(s), fit early over {monitored_steps} "
            f"steps, {len(energy)} measured; monitor_ms median {np.median(spent):.1f}, max {spent.max():.1f}",
        )


def bench_views(model, tokenizer, dev: Device, size: dict, report: Report) -> None:
    from interp_widgets.attribution.patterns import attention_patterns
    from interp_widgets.interventions import activation_patching
    from interp_widgets.lens import logit_lens

    with dev.timed() as timing:
        logit_lens(model, tokenizer, prompt_of(tokenizer, size["lens_tokens"]), progress=False)
    report.line(f"logit_lens_{size['lens_tokens']}_seconds", timing.seconds, "s")
    with dev.timed() as timing:
        patterns = attention_patterns(model, tokenizer, prompt_of(tokenizer, size["pattern_tokens"]), progress=False)
    report.line(
        f"attention_patterns_{size['pattern_tokens']}_seconds",
        timing.seconds,
        "s",
        info=f"{patterns.n_layers} layers × {patterns.n_heads} heads",
    )
    clean = prompt_of(tokenizer, size["patch_tokens"])
    corrupt = prompt_of(tokenizer, size["patch_tokens"], offset=size["patch_tokens"])
    with dev.timed() as timing:
        activation_patching(model, tokenizer, clean, corrupt, progress=False)
    report.line(
        f"activation_patching_{size['patch_tokens']}_seconds",
        timing.seconds,
        "s",
        info=f"resid_pre at each of {model.config.num_hidden_layers} layers × {size['patch_tokens']} positions",
    )


def random_transcoders(model, size: dict, device: str):
    """A TopK transcoder per layer with random weights (scaled so that features and outputs are of the model's
    order), wrapped as a :class:`~interp_widgets.circuits.TranscoderSet` reading ``mlp_in``."""
    import torch

    from interp_widgets.circuits import TranscoderSet
    from interp_widgets.concepts import Transcoder

    d, n = model.config.hidden_size, size["graph_latents"]
    g = torch.Generator(device=device).manual_seed(0)
    transcoders = {}
    for layer in range(model.config.num_hidden_layers):
        transcoders[layer] = Transcoder.from_weights(
            W_enc=torch.randn(n, d, generator=g, device=device) / math.sqrt(d),
            b_enc=torch.zeros(n, device=device),
            W_dec=torch.randn(n, d, generator=g, device=device) * (0.02 / math.sqrt(size["graph_k"])),
            b_dec=torch.zeros(d, device=device),
            activation="topk",
            k=size["graph_k"],
            layer=f"layer:{layer}.mlp_in",
        )
    return TranscoderSet(transcoders, input_point="mlp_in", n_layers=model.config.num_hidden_layers, d_model=d)


def bench_graph(model, tokenizer, dev: Device, size: dict, report: Report) -> None:
    import torch

    from interp_widgets.circuits import attribution_graph

    model.float()  # graphs are computed in float32; the benchmark's own model, not a user's
    with dev.timed() as timing:
        transcoders = random_transcoders(model, size, dev.name)
    report.line(
        "random_transcoders_seconds",
        timing.seconds,
        "s",
        info=f"{len(transcoders)} layers × {size['graph_latents']} latents",
    )
    prompt = prompt_of(tokenizer, size["graph_tokens"] - 1)  # the graph prepends a BOS
    box = {}

    def run(batch: int):
        with dev.timed() as timing:
            box["graph"] = attribution_graph(
                model,
                tokenizer,
                prompt,
                transcoders,
                max_feature_nodes=size["graph_nodes"],
                batch_size=batch,
                max_memory_gb=120.0,
                progress=False,
            )
        box["seconds"] = timing.seconds

    batch, note = size["graph_batch"], ""
    try:
        peak = dev.peak_over(lambda: run(batch))
    except torch.cuda.OutOfMemoryError:
        peak = None  # retried below, outside this block: the exception's frames hold the failed run's tensors
    if peak is None:  # say so, and measure at half the batch rather than report nothing
        box.clear()
        gc.collect()
        torch.cuda.empty_cache()
        batch, note = batch // 2, f"batch {batch} ran out of GPU memory; "
        peak = dev.peak_over(lambda: run(batch))
    graph = box["graph"]
    finite = bool(torch.isfinite(torch.as_tensor(graph.adjacency)).all())
    report.line(
        f"attribution_graph_{size['graph_tokens']}_seconds",
        box["seconds"],
        "s",
        info=f"{note}{len(graph.features)} feature nodes, batch {batch}, finite={finite}, "
        f"peak {peak / 1e9:.1f} GB over the model and transcoders",
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a small model of the same family, on the CPU")
    parser.add_argument("--out", help="append each bench: line to this file as it is measured")
    parser.add_argument(
        "--only", nargs="*", help="run only these parts (attribution generation concepts finetune views graph)"
    )
    parser.add_argument(
        "--profile", help="also profile extra repeats of the activations, SAE and monitored steps into this folder"
    )
    args = parser.parse_args(argv)
    global PROFILE_DIR
    PROFILE_DIR = Path(args.profile) if args.profile else None
    if PROFILE_DIR is not None:
        PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    sys.meta_path.insert(0, RefuseViewPackages())
    t0 = time.perf_counter()
    import torch

    size = SIZES["tiny" if args.tiny else "full"]
    device = "cpu" if args.tiny else "cuda"
    if not args.tiny and not torch.cuda.is_available():
        parser.error("no CUDA device: run with --tiny on a CPU")
    dev = Device(device)
    report = Report(args.out)
    where = "cpu (tiny)" if args.tiny else torch.cuda.get_device_name()
    print(f"gpu.py on {where}: torch {torch.__version__}, python {sys.version.split()[0]}", flush=True)
    tokenizer = load_tokenizer()
    with dev.timed() as timing:
        model = build_model(size["model"], device, torch.bfloat16)
    report.line(
        "model_construction_seconds",
        timing.seconds,
        "s",
        info=f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, bf16, on {where}",
    )
    parts = {
        "attribution": bench_attribution,
        "generation": bench_generation,
        "concepts": bench_concepts,
        "finetune": bench_finetune,
        "views": bench_views,
        "graph": bench_graph,
    }
    failed = []
    for name, part in parts.items():
        if args.only and name not in args.only:
            continue
        try:
            part(model, tokenizer, dev, size, report)
        except Exception as exc:  # report and go on: one run must say as much as it can
            import traceback

            traceback.print_exc()
            print(f"bench-error: {name}: {type(exc).__name__}: {exc}", flush=True)
            failed.append(name)
            if dev.cuda:
                torch.cuda.empty_cache()
    report.line(
        "gpu_script_seconds",
        time.perf_counter() - t0,
        "s",
        goal=f"<= {GOAL_SECONDS}",
        info="tiny mode on the CPU: not a GPU figure" if args.tiny else where,
    )
    if failed:
        print(f"failed parts: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
