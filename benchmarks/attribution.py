"""Attribution speed, accuracy and memory against Captum and the raw forward+backward floor.

Uses the offline demo MiniLM classifier. Prints ``bench:`` lines:
1. ig_time_to_1pct_ratio: time for IG to reach relative completeness error <= 1% on 16 mixed-length texts,
   ours (adaptive Gauss-Legendre) / Captum LayerIntegratedGradients (its default rule, the smallest step count in
   8, 16, 32, ... that reaches 1% on every text). Goal <= 0.5.
2. ig_over_raw_floor: our IG at 32 steps / raw batched forward+backward over the same evaluations. Goal <= 1.15.
3. ig_throughput_ratio: texts per second on 64 texts of 5-200 tokens, ours / Captum, each at its default settings
   (ours: adaptive, <= 1% completeness error on every text; Captum: 50 Gauss-Legendre steps), with the completeness
   errors printed; the ratio at equal steps (32) is printed as info. Goal >= 2.
4. kernelshap_mae_ratio: mean absolute error against exact Shapley values on 10-token inputs at equal sample
   counts, ours / Captum KernelShap. Goal <= 0.5.
5. ig_peak_memory_over_budget: peak RSS growth of IG at 256 steps on a 512-token input / peak RSS growth of one raw
   forward+backward batch of max_batch_tokens tokens. Goal <= 1.2.

Example:
    $ python benchmarks/attribution.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(2)

from interp_widgets import demo  # noqa: E402
from interp_widgets.adapter import ModelAdapter  # noqa: E402
from interp_widgets.attribution import IntegratedGradients  # noqa: E402

MAX_BATCH_TOKENS = 16384


def mixed_texts(n: int, min_tokens: int, max_tokens: int, tokenizer, seed: int = 0) -> list[str]:
    """Texts built from the demo corpus with token lengths spread evenly over [min_tokens, max_tokens]."""
    rng = np.random.default_rng(seed)
    sentences = demo.corpus()
    texts = []
    for target in np.linspace(min_tokens, max_tokens, n).astype(int):
        text = ""
        while True:
            candidate = (text + " " + sentences[rng.integers(len(sentences))]).strip()
            if len(tokenizer(candidate)["input_ids"]) > target and text:
                break
            text = candidate
            if len(tokenizer(text)["input_ids"]) >= target:
                break
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: max(1, target - 2)]
        texts.append(tokenizer.decode(ids))
    return texts


def timed(fn, repeat: int = 2) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def captum_ig(model, tokenizer, texts, targets, n_steps, method="gausslegendre"):
    from captum.attr import LayerIntegratedGradients

    lig = LayerIntegratedGradients(lambda ids: model(input_ids=ids).logits, model.get_input_embeddings())
    errors = []
    for text, target in zip(texts, targets):
        enc = tokenizer(text, return_tensors="pt", return_special_tokens_mask=True)
        ids = enc["input_ids"]
        ref = torch.where(enc["special_tokens_mask"].bool(), ids, torch.full_like(ids, tokenizer.pad_token_id))
        attr, delta = lig.attribute(
            ids,
            baselines=ref,
            target=target,
            n_steps=n_steps,
            method=method,
            internal_batch_size=max(1, MAX_BATCH_TOKENS // ids.shape[1]),
            return_convergence_delta=True,
        )
        with torch.no_grad():
            f = model(input_ids=ids).logits[0, target] - model(input_ids=ref).logits[0, target]
        errors.append(abs(float(delta)) / max(abs(float(f)), 1e-3))
    return np.array(errors)


def raw_floor(adapter, texts, n_rows):
    """Forward+backward of ``n_rows`` copies of each text's embeddings, batched under the same token budget."""
    for text in texts:
        ids = torch.as_tensor(adapter.encode(text).input_ids)[None]
        x = adapter.embed(ids).detach()
        per_batch = adapter.rows_per_batch(ids.shape[1])
        for start in range(0, n_rows, per_batch):
            rows = x.expand(min(per_batch, n_rows - start), -1, -1).clone().requires_grad_(True)
            logits = adapter.forward_embeds(rows)
            torch.autograd.grad(logits[:, 1].sum(), rows)


def peak_rss_child(kind: str) -> float:
    """Peak RSS growth in MB of a fresh process doing one job (``ig`` or ``raw``) after loading the model."""
    code = f"""
import torch, json, gc
torch.set_num_threads(2)
from interp_widgets import demo
from interp_widgets.adapter import ModelAdapter
from interp_widgets.attribution import IntegratedGradients
model, tok = demo.load_classifier(progress=False)
adapter = ModelAdapter(model, tok, max_batch_tokens={MAX_BATCH_TOKENS})
text = ""
for sentence in demo.corpus():  # grow a 510-token text without one huge tokenizer call (that would set the peak)
    if len(tok(text + " " + sentence, add_special_tokens=False)["input_ids"]) > 510:
        break
    text = (text + " " + sentence).strip()
with torch.no_grad():
    model(**tok("warm up", return_tensors="pt"))
gc.collect()
def status_mb(key):  # from /proc/self/status, in MB
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1]) / 1024
with open("/proc/self/clear_refs", "w") as refs:  # reset the peak (VmHWM) to the current RSS: loading peaked higher
    refs.write("5")
before = status_mb("VmRSS:")
if "{kind}" == "ig":
    IntegratedGradients(n_steps=256, progress=False).attribute(adapter, None, text, target=1)
else:
    x = adapter.embed(torch.as_tensor(adapter.encode(text).input_ids)[None]).detach()
    rows = x.expand(adapter.rows_per_batch(x.shape[1]), -1, -1).clone().requires_grad_(True)
    torch.autograd.grad(adapter.forward_embeds(rows)[:, 1].sum(), rows)
print(json.dumps(status_mb("VmHWM:") - before))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def kernelshap_mae_ratio(model, tokenizer) -> float | None:
    try:
        from interp_widgets.attribution import KernelShap
    except ImportError:
        return None
    from captum.attr import KernelShap as CaptumKernelShap

    from interp_widgets.tasks import prepare_inputs

    adapter = ModelAdapter(model, tokenizer)
    texts = [t for t in demo.corpus() if len(adapter.encode(t).input_ids) == 12][:6]
    samples = 256
    ours_err, captum_err = [], []
    for text in texts:
        exact = KernelShap(n_samples=samples, progress=False).attribute(model, tokenizer, text, target=1)
        if exact.params.get("exact") is not True:
            return None
        enc = tokenizer(text, return_tensors="pt", return_special_tokens_mask=True)
        ids = enc["input_ids"]
        ref = torch.where(enc["special_tokens_mask"].bool(), ids, torch.full_like(ids, tokenizer.pad_token_id))
        mask = torch.arange(ids.shape[1])[None]
        captum = CaptumKernelShap(lambda x: model(input_ids=x).logits)
        with torch.no_grad():
            attr = captum.attribute(
                ids, baselines=ref, target=1, n_samples=samples, feature_mask=mask, perturbations_per_eval=64
            )[0]
        captum_scores = attr[~enc["special_tokens_mask"][0].bool()].numpy()
        truth = exact.scores[0][~exact.special_mask]
        sampled = KernelShap(n_samples=samples, exact_max_units=0, seed=0, progress=False).attribute(
            model, tokenizer, text, target=1
        )
        ours_err.append(np.abs(sampled.scores[0][~sampled.special_mask] - truth).mean())
        captum_err.append(np.abs(captum_scores - truth).mean())
    del prepare_inputs
    return float(np.mean(ours_err) / np.mean(captum_err))


def main() -> None:
    model, tokenizer = demo.load_classifier(progress=False)
    adapter = ModelAdapter(model, tokenizer, max_batch_tokens=MAX_BATCH_TOKENS)

    # 1. time to completeness <= 1%
    texts16 = mixed_texts(16, 8, 120, tokenizer, seed=1)
    targets = [1] * len(texts16)
    ours_time, ours = timed(lambda: IntegratedGradients(progress=False).attribute(adapter, None, texts16, target=1), 1)
    ours_err = max(float(r.relative_completeness_error.max()) for r in ours)
    steps_used = sorted({r.params["n_steps"] for r in ours})
    captum_steps = None
    for steps in (8, 16, 32, 64, 128, 256, 512):
        if captum_ig(model, tokenizer, texts16, targets, steps).max() <= 0.01:
            captum_steps = steps
            break
    captum_time, _ = timed(lambda: captum_ig(model, tokenizer, texts16, targets, captum_steps), 1)
    print(
        f"info: ours reached max relative error {ours_err:.4f} with steps {steps_used}; Captum needed {captum_steps} steps"
    )
    print(f"info: ours {ours_time:.2f}s, Captum {captum_time:.2f}s")
    print(f"bench: ig_time_to_1pct_ratio = {ours_time / captum_time:.3f} (goal <= 0.5)")

    # 2. overhead over the raw forward+backward floor
    fixed = IntegratedGradients(n_steps=32, progress=False)
    ig_time, _ = timed(lambda: fixed.attribute(adapter, None, texts16, target=1))
    floor_time, _ = timed(lambda: raw_floor(adapter, texts16, 32 + 2))
    print(f"info: IG(32) {ig_time:.2f}s vs raw floor (34 evaluations per text incl. endpoints) {floor_time:.2f}s")
    print(f"bench: ig_over_raw_floor = {ig_time / floor_time:.3f} (goal <= 1.15)")

    # 3. throughput on 64 texts of 5-200 tokens: each library at its defaults (ours: the adaptive path mesh that
    # stops at 1% completeness error; Captum: 50 Gauss-Legendre steps), with the completeness each reached; and at
    # equal steps (32 each), where both sit near the raw floor.
    texts64 = mixed_texts(64, 5, 200, tokenizer, seed=2)
    default_t, results = timed(
        lambda: IntegratedGradients(progress=False).attribute(adapter, None, texts64, target=1), 1
    )
    captum_default_t, captum_errors = timed(lambda: captum_ig(model, tokenizer, texts64, [1] * 64, 50), 1)
    ours_errors = np.array([float(np.abs(r.relative_completeness_error).max()) for r in results])
    print(
        f"info: 64 texts at defaults: ours {64 / default_t:.2f} texts/s (max completeness error "
        f"{ours_errors.max():.4f}), Captum 50 steps {64 / captum_default_t:.2f} texts/s (max {captum_errors.max():.4f}, "
        f"{int((captum_errors > 0.01).sum())} texts above 1%)"
    )
    print(
        f"bench: ig_throughput_ratio = {captum_default_t / default_t:.3f} (goal >= 2; each library's defaults, ours "
        f"<= 1% completeness error on every text)"
    )
    ours_t, _ = timed(lambda: fixed.attribute(adapter, None, texts64, target=1), 1)
    captum_t, _ = timed(lambda: captum_ig(model, tokenizer, texts64, [1] * 64, 32), 1)
    print(
        f"info: 64 texts at 32 steps each: ours {64 / ours_t:.2f} texts/s, Captum {64 / captum_t:.2f} texts/s, "
        f"ratio {captum_t / ours_t:.3f} (both near the raw floor)"
    )

    # 4. KernelSHAP accuracy at equal samples
    ratio = kernelshap_mae_ratio(model, tokenizer)
    if ratio is None:
        print("info: KernelShap with exact enumeration is not available yet; kernelshap_mae_ratio not measured")
    else:
        print(f"bench: kernelshap_mae_ratio = {ratio:.3f} (goal <= 0.5)")

    # 5. peak memory bounded by max_batch_tokens
    ig_mb, raw_mb = peak_rss_child("ig"), peak_rss_child("raw")
    print(
        f"info: peak RSS growth: IG 256 steps x 512 tokens {ig_mb:.0f} MB; one raw batch of {MAX_BATCH_TOKENS} tokens {raw_mb:.0f} MB"
    )
    print(f"bench: ig_peak_memory_over_budget = {ig_mb / raw_mb:.3f} (goal <= 1.2)")


if __name__ == "__main__":
    main()
