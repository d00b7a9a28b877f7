"""Scale on the real pretrained decoder SmolLM2-135M-Instruct: 2,048-token prompts and passes per generated token.

SmolLM2 here is the dequantised Q4_1 copy of ``interp_widgets.demo.load_lm`` (float32), 2 threads. Every memory figure
is measured in a fresh subprocess (``python benchmarks/llm_scale.py --probe KIND LENGTH [MAX_BATCH_TOKENS]``): the
peak RSS (``resource.getrusage``) minus the RSS just before the measured call, with the model already loaded and its
weights paged in by an 8-token forward pass. The
reference is the model's own forward+backward at that length: ``model(inputs_embeds=x)`` with its full logits, the
log-probability of the explained token, ``torch.autograd.grad`` to ``x``. Prints ``bench:`` lines:

1. saliency_2048_peak_rss_ratio: peak RSS growth of ``Saliency`` explaining one token after a 2,048-token prompt /
   the reference's. Goal <= 1.3 (also a CI test: ``tests/test_scale.py``). The ratio of whole-process peaks
   (weights included) is printed as info.
2. input_x_gradient_2048_peak_rss_ratio: the same for ``InputXGradient``. Goal <= 1.3.
3. ig_2048_peak_rss_ratio: one 2,048-token ``IntegratedGradients(n_steps=16)`` of one target with
   ``max_batch_tokens=2048`` (one row per pass: 16 nodes + the 2 endpoint rows), its peak RSS growth / the
   reference's. Goal <= 1.3. Its time and completeness error are info.
4. gen8_<method>_forward_passes_per_token and gen8_<method>_backward_passes_per_token: passes per explained token
   when explaining an 8-token greedy generation after a 12-token prompt, for saliency, input x gradient and IG at
   32 steps (from ``result.params["passes"]``). One forward pass serves all 8 targets and one backward pass, batched
   over the targets, gives their 8 gradients, so the goal is <= 1/8 = 0.125 each. The rows each pass ran and the
   gradients (vector-Jacobian products) per token are info, beside inseq's step-by-step attribution counted on the
   same model, prompt and continuation (forward calls and their rows through a forward pre-hook on the benchmark's
   own model, backward passes by wrapping ``torch.autograd.grad``).

Example:
    $ python benchmarks/llm_scale.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(2)

LENGTH = 2048
GOAL_RSS = 1.3
GEN_PROMPT = "The best way to spend a rainy Sunday afternoon is"
GEN_TOKENS = 8


def long_prompt(tokenizer, n_tokens: int) -> str:
    """A prompt of exactly ``n_tokens`` tokens made of distinct demo sentences (the content does not matter here)."""
    from interp_widgets.demo import corpus

    text, ids = "", []
    for sentence in corpus():
        text = (text + " " + sentence).strip()
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) >= n_tokens:
            break
    k = n_tokens
    while True:
        prompt = tokenizer.decode(ids[:k])
        got = len(tokenizer(prompt)["input_ids"])
        if got == n_tokens or k <= n_tokens - 16:
            return prompt
        k += 1 if got < n_tokens else -1


def _rss() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def probe(kind: str, length: int, max_batch_tokens: int | None = None) -> dict:
    """Run one measured call in this (fresh) process: ``reference``, ``saliency``, ``input_x_gradient`` or ``ig``."""
    from interp_widgets.attribution import InputXGradient, IntegratedGradients, Saliency
    from interp_widgets.demo import load_lm

    model, tokenizer = load_lm(progress=False)
    prompt = long_prompt(tokenizer, length)
    prompt_ids = tokenizer(prompt)["input_ids"]
    continuation = [tokenizer(" the", add_special_tokens=False)["input_ids"][0]]
    with torch.no_grad():  # warm-up: page the (memory-mapped) weights in, so the growth is the call's own memory
        model(input_ids=torch.tensor([prompt_ids[:8]]))
    before = _rss()
    start = time.perf_counter()
    extra = {}
    if kind == "reference":
        ids = torch.tensor([prompt_ids + continuation])
        with torch.no_grad():
            x = model.get_input_embeddings()(ids)
        x.requires_grad_(True)
        logits = model(inputs_embeds=x).logits
        score = torch.log_softmax(logits[0, len(prompt_ids) - 1].float(), dim=-1)[continuation[0]]
        torch.autograd.grad(score, x)
    else:
        method = {
            "saliency": Saliency(progress=False),
            "input_x_gradient": InputXGradient(progress=False),
            "ig": IntegratedGradients(n_steps=16, progress=False),
        }[kind]
        result = method.attribute(
            model, tokenizer, prompt, continuation=continuation, max_batch_tokens=max_batch_tokens
        )
        extra = {"passes": result.params["passes"]}
        if result.completeness_error is not None:
            extra["relative_completeness_error"] = float(np.abs(result.relative_completeness_error).max())
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "kind": kind,
        "tokens": len(prompt_ids) + len(continuation),
        "rss_before_mb": before,
        "peak_mb": peak,
        "growth_mb": peak - before,
        "seconds": seconds,
        **extra,
    }


def probe_child(kind: str, length: int = LENGTH, max_batch_tokens: int | None = None) -> dict:
    """:func:`probe` in a fresh subprocess; returns its JSON."""
    args = [sys.executable, os.path.abspath(__file__), "--probe", kind, str(length)]
    if max_batch_tokens is not None:
        args.append(str(max_batch_tokens))
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


class _Counter:
    """Forward calls and rows of a model (a forward pre-hook) and backward passes (torch.autograd.grad calls)."""

    def __init__(self, model):
        self.model, self.forward, self.rows, self.backward = model, 0, 0, 0

    def __enter__(self):
        def pre(module, args, kwargs):
            candidates = (kwargs.get("input_ids"), kwargs.get("inputs_embeds"), *args)
            x = next((v for v in candidates if isinstance(v, torch.Tensor)), None)
            self.forward += 1
            self.rows += int(x.shape[0]) if isinstance(x, torch.Tensor) else 1

        self._grad = torch.autograd.grad

        def grad(*args, **kwargs):
            self.backward += 1
            return self._grad(*args, **kwargs)

        self._handle = self.model.register_forward_pre_hook(pre, with_kwargs=True)
        torch.autograd.grad = grad
        return self

    def __exit__(self, *exc):
        self._handle.remove()
        torch.autograd.grad = self._grad


def generation_counts() -> None:
    import inseq

    from interp_widgets.adapter import ModelAdapter
    from interp_widgets.tasks import task_for
    from interp_widgets.attribution import InputXGradient, IntegratedGradients, Saliency
    from interp_widgets.demo import load_lm

    model, tokenizer = load_lm(progress=False)
    adapter = ModelAdapter(model, tokenizer)
    new_ids, _ = task_for(adapter).generate(
        adapter.encode(GEN_PROMPT).input_ids, max_new_tokens=GEN_TOKENS, stop_at_eos=False
    )
    continuation = tokenizer.decode(new_ids)
    print(
        f"info: prompt {GEN_PROMPT!r} ({len(adapter.encode(GEN_PROMPT))} tokens), greedy continuation "
        f"{continuation!r} ({len(new_ids)} tokens)"
    )
    ours = {
        "saliency": Saliency(progress=False),
        "input_x_gradient": InputXGradient(progress=False),
        "ig32": IntegratedGradients(n_steps=32, progress=False),
    }
    theirs = {
        "saliency": ("saliency", {}),
        "input_x_gradient": ("input_x_gradient", {}),
        "ig32": ("integrated_gradients", {"n_steps": 32, "internal_batch_size": 34}),
    }
    for name, method in ours.items():
        start = time.perf_counter()
        result = method.attribute(adapter, None, GEN_PROMPT, continuation=new_ids.tolist())
        seconds = time.perf_counter() - start
        passes = result.params["passes"]
        n = passes["targets"]
        inseq_method, inseq_args = theirs[name]
        inseq_model = inseq.load_model(model, inseq_method, tokenizer=tokenizer)
        with _Counter(model) as counted:
            start = time.perf_counter()
            inseq_model.attribute(
                GEN_PROMPT, generated_texts=GEN_PROMPT + continuation, show_progress=False, **inseq_args
            )
            inseq_seconds = time.perf_counter() - start
        print(
            f"info: {name}: ours {passes['forward'] / n:.3f} forward passes ({passes['forward_rows'] / n:.2f} rows), "
            f"{passes['backward'] / n:.3f} backward passes ({passes['backward_rows'] / n:.2f} gradients) per token, "
            f"{seconds:.1f}s; inseq {counted.forward / n:.3f} forward passes ({counted.rows / n:.2f} rows), "
            f"{counted.backward / n:.3f} backward passes per token, {inseq_seconds:.1f}s"
        )
        print(f"bench: gen8_{name}_forward_passes_per_token = {passes['forward'] / n:.3f} (goal <= 0.125)")
        print(f"bench: gen8_{name}_backward_passes_per_token = {passes['backward'] / n:.3f} (goal <= 0.125)")


def main() -> None:
    reference = probe_child("reference")
    print(
        f"info: reference (the model's own forward+backward, full logits) at {reference['tokens']} tokens: peak RSS "
        f"{reference['peak_mb']:.0f} MB, growth {reference['growth_mb']:.0f} MB, {reference['seconds']:.1f}s"
    )
    for kind, budget, name in (
        ("saliency", None, "saliency"),
        ("input_x_gradient", None, "input_x_gradient"),
        ("ig", 2048, "ig"),
    ):
        got = probe_child(kind, max_batch_tokens=budget)
        passes = got["passes"]
        detail = (
            f", relative completeness error {got['relative_completeness_error']:.4f}"
            if "relative_completeness_error" in got
            else ""
        )
        print(
            f"info: {name} at {got['tokens']} tokens (max_batch_tokens={budget or 'default 16384'}): peak RSS "
            f"{got['peak_mb']:.0f} MB (whole-process ratio {got['peak_mb'] / reference['peak_mb']:.3f}), growth "
            f"{got['growth_mb']:.0f} MB, {got['seconds']:.1f}s, {passes['forward']} forward / {passes['backward']} "
            f"backward passes{detail}"
        )
        print(
            f"bench: {name}_2048_peak_rss_ratio = {got['growth_mb'] / reference['growth_mb']:.3f} (goal <= {GOAL_RSS})"
        )
    generation_counts()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        print(json.dumps(probe(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else None)))
    else:
        main()
