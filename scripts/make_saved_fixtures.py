"""Write the saved-file fixtures of tests/fixtures/saved_v0_1/: files saved by interp_widgets 0.1 that every later
version must still load (issue 30). Run from the repository root: ``PYTHONPATH=. python scripts/make_saved_fixtures.py``.

It writes, from the tiny offline models of ``tests/tiny_models.py``:

- ``attribution.safetensors``: an ``AttributionResult`` (saliency of the BERT classifier, two targets);
- ``attribution_generation.safetensors``: a contrastive generation ``AttributionResult`` of the GPT-2 LM;
- ``lens.safetensors``: a ``LensResult`` (logit lens of the GPT-2 LM, one extra target);
- ``interpretation.safetensors``: a ``ConceptInterpretation`` (NMF concepts of the classifier's layer 1);
- ``geometry_log/``: a ``GeometryLog`` saved by an ``AnisotropyMonitor`` (with its proxy bases);
- ``views.ipynb``: a notebook executed with nbclient whose outputs hold the saved payloads of several views;
- ``expected.json``: values read from the objects at generation, which ``tests/test_saved_fixtures.py`` compares the
  loaded files with.

The files are committed and stand for the files users already have: never refresh them. The script reads 0.1's
attributes (``result.reduce``), so it runs on the code of the commit that added it; to reproduce the files, check
that commit out in a worktree (``git log --diff-filter=A -- scripts/make_saved_fixtures.py`` names it) and run the
script there with ``--out DIR``. It refuses to overwrite an existing fixture directory.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "tests" / "fixtures" / "saved_v0_1"

NOTEBOOK_SETUP = """\
import numpy as np
from interp_widgets.attribution import Saliency, InputXGradient
from interp_widgets.lens import logit_lens
from interp_widgets.widgets import compare
from tests import tiny_models
model, tokenizer = tiny_models.bert_classifier()
lm, lm_tokenizer = tiny_models.gpt2_lm()"""

NOTEBOOK_VIEWS = [
    'result = Saliency(progress=False).attribute(model, tokenizer, "Not <b>bad</b> at all.", target=["negative", '
    '"positive"])\nresult.widget(granularity="word")',
    'Saliency(progress=False).attribute(lm, lm_tokenizer, "The room was", max_new_tokens=3).widget()',
    'logit_lens(lm, lm_tokenizer, "The room was quiet", top_k=3, progress=False).widget()',
    'text = "Not bad at all."\ncompare([Saliency(progress=False).attribute(model, tokenizer, text), '
    'InputXGradient(progress=False).attribute(model, tokenizer, text)], target="positive", k=2)',
    'Saliency(progress=False).attribute(model, tokenizer, ["Great!", "Awful food.", "Fine."]).widget()',
]


def _listed(array) -> list:
    import numpy as np

    return np.asarray(array).tolist()


def attribution(expected: dict) -> None:
    from interp_widgets.attribution import IntegratedGradients, Saliency
    from tests import tiny_models

    model, tokenizer = tiny_models.bert_classifier()
    result = Saliency(progress=False).attribute(model, tokenizer, "Not bad at all.", target=["negative", "positive"])
    result.save(OUT / "attribution.safetensors")
    expected["attribution"] = {
        "text": result.text,
        "tokens": result.tokens,
        "offsets": _listed(result.offsets),
        "special_mask": _listed(result.special_mask),
        "word_ids": _listed(result.word_ids),
        "scores": _listed(result.scores),
        "target_labels": result.target_labels,
        "target_ids": _listed(result.target_ids),
        "target_probs": _listed(result.target_probs),
        "method": result.method,
        "score_meaning": result.reduce,
        "signed": result.signed,
        "repr": repr(result),
        "words": result.aggregate("word").tokens,
    }
    lm, lm_tokenizer = tiny_models.gpt2_lm()
    generated = IntegratedGradients(n_steps=8, progress=False).attribute(
        lm, lm_tokenizer, "The room was", continuation=" quiet and", contrast=" loud and"
    )
    generated.save(OUT / "attribution_generation.safetensors")
    expected["attribution_generation"] = {
        "tokens": generated.tokens,
        "scores": _listed(generated.scores),
        "target_labels": generated.target_labels,
        "target_ids": _listed(generated.target_ids),
        "target_positions": _listed(generated.target_positions),
        "generated_mask": _listed(generated.generated_mask),
        "foil_labels": generated.foil_labels,
        "foil_ids": _listed(generated.foil_ids),
        "contrast": generated.contrast,
        "completeness_error": _listed(generated.completeness_error),
        "score_delta": _listed(generated.score_delta),
        "method": generated.method,
        "score_meaning": generated.reduce,
        "params": json.loads(json.dumps(generated.params, default=str)),
        "repr": repr(generated),
    }


def lens(expected: dict) -> None:
    from interp_widgets.lens import logit_lens
    from tests import tiny_models

    lm, lm_tokenizer = tiny_models.gpt2_lm()
    result = logit_lens(lm, lm_tokenizer, "The room was quiet", targets=[" and"], top_k=3, progress=False)
    result.save(OUT / "lens.safetensors")
    expected["lens"] = {
        "tokens": result.tokens,
        "token_ids": _listed(result.token_ids),
        "layers": result.layers,
        "lenses": result.lenses,
        "target_labels": result.target_labels,
        "target_ids": _listed(result.target_ids),
        "target_probs": _listed(result.target_probs),
        "target_ranks": _listed(result.target_ranks),
        "top_ids": _listed(result.top_ids),
        "kl": _listed(result.kl),
        "repr": repr(result),
    }


def interpretation(expected: dict) -> None:
    from interp_widgets.concepts import NMFConcepts, collect_activations, interpret_concepts
    from interp_widgets.demo import corpus
    from tests import tiny_models

    model, tokenizer = tiny_models.bert_classifier()
    store = collect_activations(model, tokenizer, corpus()[:12], layer=1, progress=False)
    concepts = NMFConcepts(4, nonnegative="shift", estimator_params={"random_state": 0}).fit(store)
    interp = interpret_concepts(concepts, store, k=3, window=2, bins=5, progress=False)
    interp.save(OUT / "interpretation.safetensors")
    expected["interpretation"] = {
        "labels": interp.labels,
        "layer": interp.layer,
        "method": interp.method,
        "n_concepts": interp.n_concepts,
        "density": _listed(interp.density),
        "top_rows": _listed(interp.top_rows),
        "repr": repr(interp),
    }


def geometry(expected: dict) -> None:
    import torch

    from interp_widgets.geometry import AnisotropyMonitor

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    monitor = AnisotropyMonitor(net, ["0"], rank=2, n_controls=3, total_steps=4, optimizer=opt)
    with monitor:
        for _ in range(4):
            net(torch.randn(32, 16)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    path = OUT / "geometry_log"
    shutil.rmtree(path, ignore_errors=True)
    log = monitor.snapshot()
    log.save(path)
    expected["geometry_log"] = {
        "layers": log.layers,
        "x_label": log.x_label,
        "steps": _listed(log.steps),
        "series": {name: _listed(log.series(name)[1]) for name in ("energy_ratio|0", "fitting")},
        "proxies": {name: list(basis.shape) for name, basis in log.proxies.items()},
        "repr": repr(log),
    }


def notebook(expected: dict) -> None:
    import nbformat
    from nbclient import NotebookClient

    from interp_widgets.widgets import MIME_TYPE

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(NOTEBOOK_SETUP)] + [nbformat.v4.new_code_cell(c) for c in NOTEBOOK_VIEWS]
    NotebookClient(nb, kernel_name="python3", timeout=300, store_widget_state=False,
                   resources={"metadata": {"path": str(ROOT)}}).execute()  # fmt: skip
    views = []
    for cell in nb.cells[1:]:
        (output,) = [o for o in cell.outputs if o.get("output_type") == "execute_result"]
        views.append(output["data"][MIME_TYPE]["view"])
        for key in ("execution_count",):
            output[key] = None
        cell["execution_count"] = None
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    nbformat.write(nb, OUT / "views.ipynb")
    expected["notebook"] = {"views": views}


def main() -> None:
    global OUT
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"directory to write (default {OUT})")
    OUT = parser.parse_args().out.resolve()
    if OUT.exists() and any(OUT.iterdir()):
        raise SystemExit(f"{OUT} already holds fixtures; they stand for files users have: write elsewhere (--out)")
    OUT.mkdir(parents=True, exist_ok=True)
    expected: dict = {}
    for step in (attribution, lens, interpretation, geometry, notebook):
        step(expected)
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")
    for path in sorted(OUT.rglob("*")):
        if path.is_file():
            print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
