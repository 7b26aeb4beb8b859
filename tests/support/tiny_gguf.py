"""A tiny GGUF file written from a tiny Hugging Face Llama (``tiny_model``), laid out as
llama.cpp's converter lays out a real one: the studio's GGUF conversion can be tested on it
and its result compared with the model it came from, weight for weight."""

from __future__ import annotations

import json
from pathlib import Path

NORMAL, CONTROL = 1, 3  # GGUF token types


def _interleave_rotary_halves(weight, heads: int):
    """GGUF keeps each head's query/key rows with the two rotary halves interleaved (pairs
    of rows), where Hugging Face keeps them as two blocks; loaders undo this."""
    rows, cols = weight.shape
    half = rows // heads // 2
    return weight.reshape(heads, 2, half, cols).swapaxes(1, 2).reshape(rows, cols)


def _write_out(writer) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_tiny_gguf(model_folder: Path, path: Path) -> Path:
    """Write the tiny model in ``model_folder`` (``build_tiny_model``) as a float32 GGUF."""
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((model_folder / "config.json").read_text())
    tok = json.loads((model_folder / "tokenizer.json").read_text())
    tok_config = json.loads((model_folder / "tokenizer_config.json").read_text())
    weights = load_file(str(model_folder / "model.safetensors"))
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config.get("rope_theta")
                              or config["rope_parameters"]["rope_theta"])
    writer.add_rope_dimension_count(config["hidden_size"] // heads)

    vocab = sorted(tok["model"]["vocab"].items(), key=lambda item: item[1])
    specials = {added["content"]: added["id"] for added in tok["added_tokens"]}
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([token for token, _ in vocab])
    writer.add_token_types([CONTROL if token in specials else NORMAL for token, _ in vocab])
    writer.add_token_merges([merge if isinstance(merge, str) else " ".join(merge)
                             for merge in tok["model"]["merges"]])
    writer.add_bos_token_id(specials[tok_config["bos_token"]])
    writer.add_eos_token_id(specials[tok_config["eos_token"]])
    writer.add_pad_token_id(specials[tok_config["pad_token"]])
    template = model_folder / "chat_template.jinja"
    writer.add_chat_template(template.read_text() if template.is_file()
                             else tok_config["chat_template"])

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
             "output_norm.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
                 "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
                 "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    for layer in range(config["num_hidden_layers"]):
        for hf, ours in per_layer.items():
            names[f"model.layers.{layer}.{hf}.weight"] = f"blk.{layer}.{ours}.weight"
    for hf_name, gguf_name in names.items():
        weight = weights[hf_name]
        if gguf_name.endswith("attn_q.weight"):
            weight = _interleave_rotary_halves(weight, heads)
        elif gguf_name.endswith("attn_k.weight"):
            weight = _interleave_rotary_halves(weight, kv_heads)
        writer.add_tensor(gguf_name, weight)
    _write_out(writer)
    return path


GEMMA_WORDS = ("the", "theme", "there", "harbour", "island", "search", "answer", "is", "in")
"""Words the tiny Gemma vocabulary merges whole; any other text falls back to its bytes."""


def _gemma_vocabulary() -> tuple[list[str], list[float], list[int]]:
    """A tiny SentencePiece-BPE vocabulary as Gemma's GGUF lays it out: control pieces, the
    unknown piece, 256 byte pieces, then normal pieces scored by merge rank (best first)."""
    pieces = ["<pad>", "<eos>", "<bos>", "<unk>", "<end_of_turn>"]
    types = [CONTROL, CONTROL, CONTROL, 2, CONTROL]
    pieces += [f"<0x{byte:02X}>" for byte in range(256)]
    types += [6] * 256
    normal = ["▁", *sorted(set("".join(GEMMA_WORDS)))]
    for text in [form for word in GEMMA_WORDS for form in (word, "▁" + word)]:
        # every prefix, so that each merge joins two pieces
        normal += [text[:end] for end in range(2, len(text) + 1) if text[:end] not in normal]
    scores = [0.0] * len(pieces) + [-float(rank) for rank in range(len(normal))]
    return pieces + normal, scores, types + [NORMAL] * len(normal)


def write_tiny_gemma3_gguf(path: Path, *, seed: int = 0):
    """A tiny random Gemma 3 written as llama.cpp writes one (norms stored as w + 1, no
    output tensor: tied); returns the Hugging Face model it was written from."""
    import gguf
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    pieces, scores, types = _gemma_vocabulary()
    config = Gemma3TextConfig(
        vocab_size=len(pieces), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, sliding_window=16,
        max_position_embeddings=256, layer_types=["sliding_attention"] * 2,
        query_pre_attn_scalar=32, tie_word_embeddings=True, bos_token_id=2, eos_token_id=1,
        pad_token_id=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Gemma3ForCausalLM(config).eval()
        for name, weight in model.named_parameters():  # norms start at 0: make them count
            if name.endswith("norm.weight"):
                weight.data.normal_(0, 0.1)

    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_block_count(2)
    writer.add_feed_forward_length(128)
    writer.add_head_count(2)
    writer.add_head_count_kv(1)
    writer.add_key_length(32)
    writer.add_value_length(32)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_sliding_window(16)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(pieces)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_unk_token_id(3)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(False)
    gguf_names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
                  "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                  "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
                  "self_attn.k_norm": "attn_k_norm",
                  "post_attention_layernorm": "post_attention_norm",
                  "pre_feedforward_layernorm": "ffn_norm",
                  "post_feedforward_layernorm": "post_ffw_norm", "mlp.gate_proj": "ffn_gate",
                  "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for name, weight in model.state_dict().items():
        if name == "lm_head.weight":
            continue
        array = weight.numpy() + (1.0 if name.endswith("norm.weight") else 0.0)
        if name.startswith("model.layers."):
            _, _, layer, rest = name.split(".", 3)
            target = f"blk.{layer}.{gguf_names[rest.removesuffix('.weight')]}.weight"
        else:
            target = {"model.embed_tokens.weight": "token_embd.weight",
                      "model.norm.weight": "output_norm.weight"}[name]
        writer.add_tensor(target, array)
    _write_out(writer)
    return model
