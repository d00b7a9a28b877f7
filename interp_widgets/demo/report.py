"""The ``interp-widgets demo`` report in one self-contained offline HTML page: attributions, concepts and training
geometry of the demo classifier, and per-generated-token attributions of the pretrained decoder SmolLM2-135M-Instruct
(:func:`interp_widgets.demo.load_lm`).

Example:
    >>> from interp_widgets.demo import report
    >>> report.CONCEPT_LAYER, report.N_CONCEPTS, report.CONCEPT_K, report.MONITOR_LAYERS, report.DEFAULT_STEPS
    ('layer:3', 32, 4, ('layer:2', 'layer:4'), 24)
    >>> report.GENERATION_PROMPT, report.MAX_NEW_TOKENS
    ('The Great Wall of China was built to', 6)

Not run here: the report trains concepts and fine-tunes the demo classifier (about 3 minutes on a CPU)::

    html = report.build_report(["Not bad at all."], steps=6)
"""

from __future__ import annotations

import math
from typing import Sequence

from interp_widgets.validation import check_int

CONCEPT_LAYER = "layer:3"
N_CONCEPTS = 32
CONCEPT_K = 4  # active concepts per token (TopK sparse autoencoder)
CONCEPT_CORPUS = 80  # sentences the concepts are fitted on
MONITOR_LAYERS = ("layer:2", "layer:4")
MONITOR_RANK = 8
BATCH_SIZE = 8
DEFAULT_STEPS = 24
FINE_TUNE_LR = 1e-4
GENERATION_PROMPT = "The Great Wall of China was built to"
MAX_NEW_TOKENS = 6


def build_report(
    texts: Sequence[str], *, steps: int = DEFAULT_STEPS, prompt: str = GENERATION_PROMPT, progress: bool = True
) -> str:
    """Explain ``texts`` with the demo classifier and ``prompt``'s continuation with SmolLM2, and return the report
    page (HTML) with four sections.

    1. Attributions: the example list (integrated gradients for every text), integrated gradients at word
       granularity per text (its completeness error shows in the widget) and a comparison with saliency.
    2. Concepts: TopK sparse-autoencoder concepts of layer 3 on shipped sentences, in the concept browser, with
       the concept importance of each text's prediction.
    3. Training geometry: a short fine-tuning run (``steps`` batches of 8, from the base encoder with a new head)
       under :class:`~interp_widgets.geometry.AnisotropyMonitor`, shown in the monitor widget.
    4. Generation: SmolLM2-135M-Instruct (a dequantised Q4_1 copy, :func:`~interp_widgets.demo.load_lm`) continues
       ``prompt`` greedily for ``MAX_NEW_TOKENS`` tokens; input × gradient explains every generated token by the
       prompt and the tokens generated before it, in the generation view.

    Example:
        >>> build_report([])
        Traceback (most recent call last):
        ...
        ValueError: build_report needs at least one text to explain

    Not run here: it trains concepts and fine-tunes the demo classifier (about 3 minutes on a CPU)::

        html = build_report(["Not bad at all."], steps=6, progress=False)
        pathlib.Path("report.html").write_text(html, encoding="utf-8")
    """
    from interp_widgets import demo
    from interp_widgets.widgets.export import html_page

    texts = list(texts)
    if not texts:
        raise ValueError("build_report needs at least one text to explain")
    check_int("steps", steps, minimum=2, hint="the monitor fits its proxy on the first steps")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(
            f"the generation prompt is empty or not a string ({prompt!r}); pass a prompt such as {GENERATION_PROMPT!r}"
        )
    model, tokenizer = demo.load_classifier(progress=progress)
    report = demo.training_report()
    items: list = [
        "About",
        _note(
            f"Demo classifier: all-MiniLM-L6-v2 fine-tuned on {report['n_train']} hand-written sentences, held-out "
            f"accuracy {report['test_accuracy']:.1%} on {report['n_test']}. Every view below is interactive and "
            "works offline; without JavaScript each shows its static picture."
        ),
    ]
    items += _attributions(model, tokenizer, texts, progress)
    items += _concepts(model, tokenizer, texts, progress)
    items += _training(steps, progress)
    items += _generation(prompt, progress)
    return html_page(items, title="interp_widgets demo report")


def _note(text: str):
    from interp_widgets.widgets.export import Note

    return Note(text)


def _attributions(model, tokenizer, texts: list[str], progress: bool) -> list:
    from interp_widgets.attribution import IntegratedGradients, Saliency
    from interp_widgets.widgets import compare

    ig = IntegratedGradients(progress=progress).attribute(model, tokenizer, texts)
    saliency = Saliency(progress=progress).attribute(model, tokenizer, texts)
    items: list = [
        "1. Attributions",
        _note(
            "Integrated gradients (signed: orange pushes towards the predicted class, blue away) for every text; "
            "click a row to see its tokens."
        ),
        ig.widget(),
    ]
    for i, by_ig in enumerate(ig, start=1):
        items += [f"Text {i}: integrated gradients by word", by_ig.widget(granularity="word")]
    items += [
        "Text 1: integrated gradients against saliency",
        _note("Saliency is the gradient norm (unsigned); the table gives the rank agreement of the two methods."),
        compare([ig[0], saliency[0]]),
    ]
    return items


def concept_browser(model, tokenizer, texts: Sequence[str], *, progress: bool = True):
    """The report's concept browser: TopK sparse-autoencoder concepts of layer 3 on shipped sentences (sparse, so
    each has a readable label; semi-NMF concepts of this layer are all dense), with the concept importance of the
    prediction for each of ``texts``.

    Example:
        Not run here: it trains a 32-concept sparse autoencoder on the demo classifier (several seconds)::

            from interp_widgets import demo
            browser = concept_browser(*demo.load_classifier(), ["Not bad at all."])
    """
    from interp_widgets import demo
    from interp_widgets.concepts import SparseAutoencoder, collect_activations, concept_importance, interpret_concepts

    corpus = demo.corpus()[:CONCEPT_CORPUS]
    store = collect_activations(model, tokenizer, corpus, layer=CONCEPT_LAYER, progress=progress)
    concepts = SparseAutoencoder(N_CONCEPTS, k=CONCEPT_K, batch_size=256, max_epochs=200, progress=progress).fit(store)
    interpretation = interpret_concepts(concepts, store, progress=progress)
    importances = [concept_importance(concepts, model, tokenizer, text, layer=CONCEPT_LAYER) for text in texts]
    return interpretation.widget(texts=importances)


def _concepts(model, tokenizer, texts: list[str], progress: bool) -> list:
    browser = concept_browser(model, tokenizer, texts, progress=progress)
    return [
        "2. Concepts",
        _note(
            f"{N_CONCEPTS} concepts of a TopK sparse autoencoder ({CONCEPT_K} active per token) on {CONCEPT_LAYER} "
            f"activations of {CONCEPT_CORPUS} shipped sentences ({browser.n_rows} tokens). Importance is the gradient "
            "of the predicted class's logit with respect to "
            "each concept's coefficients, for the selected text."
        ),
        browser,
    ]


def monitored_fine_tuning(steps: int = DEFAULT_STEPS, *, progress: bool = True):
    """Fine-tune the **base** all-MiniLM-L6-v2 encoder with a new 2-class head (not the already fine-tuned demo
    classifier, whose loss is near 0: its curves would show noise around a converged model) for ``steps``
    batches of 8 demo sentences under an :class:`~interp_widgets.geometry.AnisotropyMonitor` (layers 2 and 4,
    rank 8), and return the monitor (its ``loss`` series shows the learning).

    Example:
        Not run here: it fine-tunes the 6-layer encoder under the monitor (tens of seconds on a CPU)::

            monitored_fine_tuning(6, progress=False).widget()
    """
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from interp_widgets import demo
    from interp_widgets.geometry import AnisotropyMonitor

    source = demo._encoder_path()
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the new classification head is expected; don't print a load report
    try:
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(source, local_files_only=True, num_labels=2)
    finally:
        hf_logging.set_verbosity(verbosity)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=FINE_TUNE_LR)
    monitor = AnisotropyMonitor(model, list(MONITOR_LAYERS), rank=MONITOR_RANK, total_steps=steps, optimizer=optimizer,
                                special_token_ids=tokenizer.all_special_ids, spectrum_every=1)  # fmt: skip
    data = demo.load_dataset("train")
    data = data.sample(min(len(data), BATCH_SIZE * steps), random_state=0, replace=BATCH_SIZE * steps > len(data))
    texts = data["text"].tolist()
    labels = torch.tensor((data["label"] == "positive").to_numpy().astype(int))
    with monitor:
        for step in tqdm(range(steps), desc="monitored fine-tuning", disable=not progress):
            rows = slice(BATCH_SIZE * step, BATCH_SIZE * (step + 1))
            batch = tokenizer(texts[rows], padding=True, return_tensors="pt")
            monitor.track(step, attention_mask=batch["attention_mask"])
            loss = model(**batch, labels=labels[rows]).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            monitor.log(step, loss=loss.item())
    return monitor


def _training(steps: int, progress: bool) -> list:
    monitor = monitored_fine_tuning(steps, progress=progress)
    return [
        "3. Geometry during training",
        _note(
            f"{steps} fine-tuning steps (batches of {BATCH_SIZE}) of the base all-MiniLM-L6-v2 encoder with a new "
            f"sentiment head, under the anisotropy monitor: {_loss_change(monitor)} The rank-{MONITOR_RANK} tangent proxy of each layer is fitted on the first "
            "30% of the steps; after that, the energy ratio compares the share of gradient energy inside the proxy "
            "with matched-rank random controls (1 = no alignment). " + _final_ratios(monitor)
        ),
        monitor.widget(),
    ]


def explained_generation(
    prompt: str = GENERATION_PROMPT, *, max_new_tokens: int = MAX_NEW_TOKENS, progress: bool = True
):
    """The report's generation: SmolLM2-135M-Instruct continues ``prompt`` greedily and input × gradient explains
    each generated token (its log-probability) by every token before it.

    Example:
        Not run here: it loads the 135M-parameter SmolLM2 (dequantised on first use, about 30 s)::

            explained_generation("The capital of France is", max_new_tokens=2).widget()
    """
    from interp_widgets.attribution import InputXGradient
    from interp_widgets.demo import load_lm

    model, tokenizer = load_lm(progress=progress)
    return InputXGradient(progress=progress).attribute(model, tokenizer, prompt, max_new_tokens=max_new_tokens)


def _generation(prompt: str, progress: bool) -> list:
    from interp_widgets.demo.lm import LM_NAME

    generation = explained_generation(prompt, progress=progress)
    steps = len(generation.target_labels)
    return [
        "4. Generation",
        _note(
            f"{LM_NAME}, a real pretrained instruction-tuned Llama-architecture decoder (30 layers, d = 576), "
            f"continues the prompt greedily for up to {MAX_NEW_TOKENS} tokens ({steps} generated). Input × gradient "
            "explains each generated token's log-probability by the prompt and by the tokens generated before it; "
            "hover or click a generated token to colour its sources, or switch to the heatmap of all steps. The "
            "weights are a dequantised Q4_1 copy of the released model, so its numbers are close to, not equal "
            "to, published SmolLM2 figures."
        ),
        generation.widget(selected_step=0),
    ]


def _loss_change(monitor) -> str:
    losses = [float(v) for v in monitor.series("loss")[1] if math.isfinite(v)]
    if len(losses) < 4:
        return "too few steps to show the loss."
    quarter = max(1, len(losses) // 4)
    first, last = sum(losses[:quarter]) / quarter, sum(losses[-quarter:]) / quarter
    return (
        f"the loss goes from {first:.3f} (mean of the first {quarter} steps) to {last:.3f} (last {quarter}), "
        "so the curves show a model that is learning."
    )


def _final_ratios(monitor) -> str:
    parts = []
    for layer in MONITOR_LAYERS:
        steps, values = monitor.series(f"energy_ratio|{layer}")
        finite = [(int(s), float(v)) for s, v in zip(steps, values) if math.isfinite(v)]
        if finite:
            step, value = finite[-1]
            parts.append(f"{layer}: {value:.1f} at step {step}")
    return ("Last measured energy ratios: " + "; ".join(parts) + ".") if parts else "No step was measured."
