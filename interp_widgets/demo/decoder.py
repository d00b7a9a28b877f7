"""The demo decoder: a small GPT-2-style language model trained from scratch on the shipped review corpus.

Both the model and its byte-level BPE tokenizer are trained by this module on the training split of the demo
sentences (``interp_widgets/demo/data``, CC0-1.0), on CPU in a few minutes, with a progress bar. The result is cached
as safetensors in :func:`interp_widgets.demo.cache_dir`, keyed by a fingerprint of the data and the configuration, so
later calls load it in about a second. Held-out perplexity on the test split is recorded in :func:`decoder_report`.

It is a toy: about a million parameters fitted to ~13k tokens (2,048-token vocabulary). It writes short,
review-like, often repetitive sentences, which is enough to make per-generated-token attributions meaningful, and
nothing more.

Example:
    >>> from interp_widgets.demo.decoder import load_decoder
    >>> model, tokenizer = load_decoder(progress=False)
    >>> prompt = tokenizer("The hotel was", return_tensors="pt")
    >>> tokenizer.convert_ids_to_tokens(prompt.input_ids[0])
    ['<|endoftext|>', 'The', 'Ġhotel', 'Ġwas']
    >>> out = model.generate(**prompt, max_new_tokens=12, do_sample=False)
    >>> tokenizer.decode(out[0], skip_special_tokens=True)
    'The hotel was a bit of the first film was a bit of the game'
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

from interp_widgets.demo import DATA_DIR, _training_step, cache_dir, load_dataset

_CACHE_VERSION = "decoder-v1"
BOUNDARY = "<|endoftext|>"
DECODER = {
    "vocab_size": 2048,
    "n_embd": 128,
    "n_layer": 4,
    "n_head": 4,
    "n_positions": 128,
    "dropout": 0.2,
}
DECODER_TRAINING = {
    "epochs": 30,
    "batch_size": 32,
    "learning_rate": 2e-3,
    "weight_decay": 0.1,
    "warmup": 0.05,
    "seed": 7,
}


def _fingerprint() -> str:
    digest = hashlib.sha256(_CACHE_VERSION.encode())
    digest.update(json.dumps([DECODER, DECODER_TRAINING], sort_keys=True).encode())
    for path in sorted(DATA_DIR.glob("sentiment_part_*.csv")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _target() -> Path:
    return cache_dir() / f"{_CACHE_VERSION}-{_fingerprint()}"


def train_tokenizer(texts: list[str], vocab_size: int = DECODER["vocab_size"]):
    """A byte-level BPE tokenizer trained on ``texts`` that starts every encoding with ``<|endoftext|>``.

    The boundary token marks the start of a text (it is flagged as a special token, so attributions skip it) and is
    also the end-of-text token the model emits when a review is finished.

    Example:
        >>> tok = train_tokenizer(["The room was clean.", "The staff were rude."], vocab_size=300)
        >>> tok.convert_ids_to_tokens(tok("The room")["input_ids"])
        ['<|endoftext|>', 'The', 'Ġroom']
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOUNDARY],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    boundary_id = tok.token_to_id(BOUNDARY)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=True),
        processors.TemplateProcessing(single=f"{BOUNDARY} $A", pair=f"{BOUNDARY} $A {BOUNDARY} $B",
                                      special_tokens=[(BOUNDARY, boundary_id)]),
    ])  # fmt: skip
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOUNDARY,
        eos_token=BOUNDARY,
        unk_token=BOUNDARY,
        pad_token=BOUNDARY,
        model_max_length=DECODER["n_positions"],
    )


def load_decoder(retrain: bool = False, progress: bool = True):
    """The demo causal language model and its tokenizer, trained on first use (a few minutes on CPU), then cached.

    Returns ``(model, tokenizer)`` with the model in eval mode. Greedy generation is deterministic.

    Example:
        >>> model, tokenizer = load_decoder(progress=False)
        >>> model.config.model_type, model.config.n_layer, len(tokenizer), model.training
        ('gpt2', 4, 2048, False)
    """
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    target = _target()
    if retrain or not (target / "model.safetensors").exists():
        _train(target, progress=progress)
    model = GPT2LMHeadModel.from_pretrained(target, local_files_only=True)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(target, local_files_only=True)
    model.eval()
    return model, tokenizer


def decoder_report() -> dict:
    """Held-out numbers recorded when the cached decoder was trained (trains it if needed).

    ``test_perplexity`` is exp(mean negative log-likelihood per token) over the test-split sentences, counting every
    token after the leading boundary, including the end-of-text token.

    Example:
        >>> report = decoder_report()
        >>> report["n_train_texts"], report["n_test_texts"], report["n_parameters"]
        (600, 150, 1071872)
        >>> report["train_perplexity"] < report["test_perplexity"] < 300  # a toy: it overfits its 13k tokens
        True
    """
    target = _target()
    if not (target / "training.json").exists():
        load_decoder()
    return json.loads((target / "training.json").read_text())


def encode_texts(tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of each text as the decoder sees it in training: boundary, text, boundary.

    Example:
        >>> model, tokenizer = load_decoder(progress=False)
        >>> ids = encode_texts(tokenizer, ["Nice."])
        >>> ids, tokenizer.convert_ids_to_tokens(ids[0])
        ([[0, 1439, 14, 0]], ['<|endoftext|>', 'Nice', '.', '<|endoftext|>'])
    """
    eos = tokenizer.eos_token_id
    return [ids + [eos] for ids in tokenizer(texts)["input_ids"]]


def perplexity(model, tokenizer, texts: list[str], batch_size: int = 64) -> float:
    """exp(mean per-token negative log-likelihood) of ``texts`` (each scored from its leading boundary token).

    Example:
        >>> model, tokenizer = load_decoder(progress=False)
        >>> fluent = perplexity(model, tokenizer, ["The staff were friendly."])
        >>> scrambled = perplexity(model, tokenizer, ["Friendly staff the were."])
        >>> fluent < scrambled
        True
    """
    import torch

    sequences = encode_texts(tokenizer, texts)
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for i in range(0, len(sequences), batch_size):
                ids, mask, labels = _batch(sequences[i : i + batch_size], tokenizer.pad_token_id)
                logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
                nll = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100, reduction="sum"
                )
                total += float(nll)
                count += int((labels[:, 1:] != -100).sum())
    finally:
        model.train(was_training)
    return math.exp(total / count)


def _batch(sequences: list[list[int]], pad_id: int):
    import torch

    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(seq)
        mask[row, : len(seq)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


def _epoch_batches(sequences: list[list[int]], batch_size: int, generator) -> list[list[list[int]]]:
    """One epoch of shuffled batches of similar length (less padding): shuffle, sort within windows of eight
    batches by length, cut into batches, shuffle the batches."""
    import torch

    order = torch.randperm(len(sequences), generator=generator).tolist()
    window = 8 * batch_size
    batches = []
    for w in range(0, len(order), window):
        chunk = sorted(order[w : w + window], key=lambda i: len(sequences[i]))
        batches += [[sequences[i] for i in chunk[b : b + batch_size]] for b in range(0, len(chunk), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def _train(target: Path, *, progress: bool) -> None:
    import torch
    from tqdm.auto import tqdm
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg, arch = DECODER_TRAINING, DECODER
    train_texts = load_dataset("train")["text"].tolist()
    test_texts = load_dataset("test")["text"].tolist()
    tokenizer = train_tokenizer(train_texts, arch["vocab_size"])
    sequences = encode_texts(tokenizer, train_texts)
    torch.manual_seed(cfg["seed"])
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=arch["n_positions"],
        n_embd=arch["n_embd"],
        n_layer=arch["n_layer"],
        n_head=arch["n_head"],
        resid_pdrop=arch["dropout"],
        embd_pdrop=arch["dropout"],
        attn_pdrop=arch["dropout"],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = GPT2LMHeadModel(config)
    generator = torch.Generator().manual_seed(cfg["seed"])
    n_batches = math.ceil(len(sequences) / cfg["batch_size"])
    total = n_batches * cfg["epochs"]
    warmup = max(1, int(cfg["warmup"] * total))
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg["learning_rate"], weight_decay=cfg["weight_decay"], betas=(0.9, 0.98)
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: min((step + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(1.0, step / total)))),
    )
    start = time.time()
    model.train()
    bar = tqdm(total=total, desc="training the demo decoder", disable=not progress)
    try:
        for _ in range(cfg["epochs"]):
            for batch in _epoch_batches(sequences, cfg["batch_size"], generator):
                ids, mask, labels = _batch(batch, tokenizer.pad_token_id)
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
                _training_step(loss, model, optimizer, scheduler, bar)
    finally:
        bar.close()
    model.eval()
    report = {
        "test_perplexity": perplexity(model, tokenizer, test_texts),
        "train_perplexity": perplexity(model, tokenizer, train_texts),
        "n_train_texts": len(train_texts),
        "n_test_texts": len(test_texts),
        "n_train_tokens": int(sum(len(s) - 1 for s in sequences)),
        "n_parameters": int(sum(p.numel() for p in model.parameters())),
        "architecture": arch,
        "training": cfg,
        "seconds": round(time.time() - start, 1),
        "data": "interp_widgets/demo/data (CC0-1.0), train split; tokenizer trained on the same texts",
    }
    partial = target.with_name(target.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    (partial / "training.json").write_text(json.dumps(report, indent=2))
    target.mkdir(parents=True, exist_ok=True)
    for item in partial.iterdir():
        item.replace(target / item.name)
    partial.rmdir()
