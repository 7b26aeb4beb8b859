"""A Gemma 3 GGUF (llama.cpp's layout, e.g. google/gemma-3-270m in Q4_K_M) as a Hugging Face
folder, read with the ``gguf`` package alone: config, fp32 weights and a tokenizer.

Why not transformers' own GGUF loader (5.x), which the other packaged models use? Its
weights are right for Gemma 3, its tokenizer is not (measured: docs/engine.md, "The model
shelf"):

1. it builds a Unigram model from ``tokenizer.ggml.scores``, but Gemma's SentencePiece model
   is BPE and those scores are merge ranks, so the shortest pieces win ("The ▁c ap it al");
2. it ignores ``tokenizer.ggml.add_bos_token``, and Gemma without ``<bos>`` repeats one word;
3. it renames the tab byte ``<0x09>`` (id 247) to a tab that already has id 255968, leaving a
   hole in the vocabulary;
4. the tokenizer it saves reloads without merges (one token per character).

What this module writes matches llama.cpp on the same file: perplexity 9.50 per token on
plain English (llama.cpp: 9.60), the same top token at 96% of positions.

Weights: llama.cpp stores every ``*norm.weight`` as ``w + 1`` and Gemma's RMSNorm multiplies
by ``1 + w``, so 1 is subtracted once; Gemma's query and key rows are not permuted (its rope
is the NEOX one, Hugging Face's ``rotate_half``); the embeddings are tied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NORMAL, CONTROL, USER_DEFINED = 1, 3, 4
"""GGUF token types the tokenizer treats apart."""

GLOBAL_EVERY = 6
"""Every 6th layer attends to the whole context, the others to a sliding window (llama.cpp's
rule for Gemma 3, which the GGUF does not store)."""

PLAIN_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['content'] }}\n\n{% endfor %}"
)
"""The chat template of a base Gemma: the studio's plain blocks (``Prompt.text`` without a
template), led by ``<bos>``, which the studio's prompts (encoded without special tokens)
would otherwise lack."""

_BLOCK_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm",
              "output": "lm_head"}


class Gemma3Error(ValueError):
    """The GGUF is not a Gemma 3 this module can convert; the message says what differs."""


def _value(reader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _config(reader, vocab_size: int, tied: bool):
    """The model's config from its ``gemma3.*`` metadata, with llama.cpp's rules for what the
    GGUF leaves out (local rope base 10,000, the global layers, the attention scale)."""
    from transformers import Gemma3TextConfig

    arch = _value(reader, "general.architecture")
    if arch != "gemma3":
        raise Gemma3Error(f"general.architecture is {arch!r}, not 'gemma3'")

    def meta(key, default=None):
        return _value(reader, f"gemma3.{key}", default)

    hidden, heads = int(meta("embedding_length")), int(meta("attention.head_count"))
    layers = int(meta("block_count"))
    head_dim = int(meta("attention.key_length", hidden // heads))
    if meta("rope.scaling.type") not in (None, "none"):
        raise Gemma3Error(f"rope scaling {meta('rope.scaling.type')!r} is not handled")
    return Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=hidden,
        intermediate_size=int(meta("feed_forward_length")), num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=int(meta("attention.head_count_kv", heads)),
        head_dim=head_dim, hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=int(meta("context_length")),
        rms_norm_eps=float(meta("attention.layer_norm_rms_epsilon", 1e-6)),
        sliding_window=int(meta("attention.sliding_window", 512)),
        layer_types=["full_attention" if (i + 1) % GLOBAL_EVERY == 0 else "sliding_attention"
                     for i in range(layers)],
        rope_parameters={
            "sliding_attention": {"rope_type": "default",
                                  "rope_theta": float(meta("rope.freq_base_swa", 10_000.0))},
            "full_attention": {"rope_type": "default",
                               "rope_theta": float(meta("rope.freq_base", 1_000_000.0))}},
        query_pre_attn_scalar=hidden // heads if layers == 62 else head_dim,  # 27B: by width
        final_logit_softcapping=meta("final_logit_softcapping"),
        attn_logit_softcapping=meta("attn_logit_softcapping"),
        tie_word_embeddings=tied,
        bos_token_id=int(_value(reader, "tokenizer.ggml.bos_token_id", 2)),
        eos_token_id=int(_value(reader, "tokenizer.ggml.eos_token_id", 1)),
        pad_token_id=int(_value(reader, "tokenizer.ggml.padding_token_id", 0)),
        architectures=["Gemma3ForCausalLM"])


def _hf_name(gguf_name: str) -> str:
    stem, suffix = gguf_name.rsplit(".", 1)
    if stem.startswith("blk."):
        _, layer, part = stem.split(".", 2)
        return f"model.layers.{int(layer)}.{_BLOCK_NAMES[part]}.{suffix}"
    return f"{_TOP_NAMES[stem]}.{suffix}"


def _weights(reader) -> dict:
    """fp32 tensors under Hugging Face's names (de-quantised rows come out as
    (out_features, in_features) already)."""
    import numpy as np
    import torch
    from gguf.quants import dequantize

    weights = {}
    for tensor in reader.tensors:
        array = dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
        array = array.reshape(tuple(int(d) for d in reversed(tensor.shape.tolist())))
        if tensor.name.endswith("norm.weight"):
            array = array - 1.0
        weights[_hf_name(tensor.name)] = torch.tensor(array)  # a copy: the file is mapped
    return weights


def _merges(pieces: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """SentencePiece-BPE as merges, best first: SentencePiece joins the adjacent pair whose
    join is the normal piece of highest score, so every split of a normal piece into two
    normal pieces is a merge ranked by that piece's score."""
    normal = {piece for piece, kind in zip(pieces, types, strict=True) if kind == NORMAL}
    ranked = sorted((i for i, kind in enumerate(types) if kind == NORMAL),
                    key=lambda i: (-scores[i], i))
    return [(pieces[i][:cut], pieces[i][cut:]) for i in ranked
            for cut in range(1, len(pieces[i]))
            if pieces[i][:cut] in normal and pieces[i][cut:] in normal]


def _tokenizer(reader, model_max_length: int):
    """A fast tokenizer that splits text as llama.cpp does with this GGUF, ids unchanged,
    adding ``<bos>`` as the GGUF asks."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, processors
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    field = reader.fields["tokenizer.ggml.tokens"]
    pieces = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    scores = [float(x) for x in _value(reader, "tokenizer.ggml.scores")]
    types = [int(x) for x in _value(reader, "tokenizer.ggml.token_type")]
    if _value(reader, "tokenizer.ggml.model") != "llama":
        raise Gemma3Error("the vocabulary is not SentencePiece's ('llama')")
    if _value(reader, "tokenizer.ggml.add_space_prefix", False) or \
            _value(reader, "tokenizer.ggml.add_eos_token", False):
        raise Gemma3Error("a space prefix or an added eos is not handled")
    if len(set(pieces)) != len(pieces):
        raise Gemma3Error("the vocabulary holds a piece twice")
    special = {role: pieces[int(_value(reader, f"tokenizer.ggml.{key}"))] for role, key in (
        ("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id"),
        ("pad", "padding_token_id"))}

    backend = Tokenizer(BPE(vocab={piece: i for i, piece in enumerate(pieces)},
                            merges=_merges(pieces, scores, types), unk_token=special["unk"],
                            fuse_unk=True, byte_fallback=True))
    backend.normalizer = normalizers.Replace(" ", "▁")
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                         decoders.Fuse()])
    # control pieces are special; user-defined ones (runs of spaces, newlines, tabs; html
    # tags) are matched in the raw text before BPE, as SentencePiece does
    backend.add_tokens([AddedToken(piece, special=True, normalized=False)
                        for piece, kind in zip(pieces, types, strict=True) if kind == CONTROL])
    backend.add_tokens([AddedToken(piece, special=False, normalized=False)
                        for piece, kind in zip(pieces, types, strict=True)
                        if kind == USER_DEFINED])
    bos_id = pieces.index(special["bos"])
    if _value(reader, "tokenizer.ggml.add_bos_token", True):
        backend.post_processor = processors.TemplateProcessing(
            single=f"{special['bos']}:0 $A:0", pair=f"{special['bos']}:0 $A:0 $B:1",
            special_tokens=[(special["bos"], bos_id)])
    if backend.get_vocab_size(with_added_tokens=True) != len(pieces):
        raise Gemma3Error("the added tokens changed the vocabulary's size")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=special["bos"], eos_token=special["eos"],
        unk_token=special["unk"], pad_token=special["pad"], clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
        chat_template=_value(reader, "tokenizer.chat_template") or PLAIN_TEMPLATE)


def write_gemma3_folder(gguf: Path, out: Path) -> None:
    """Write config, generation config, fp32 safetensors and tokenizer for the Gemma 3 GGUF
    at ``gguf`` into ``out``; Gemma3Error when it is not one this module handles."""
    import torch
    from gguf import GGUFReader
    from safetensors.torch import save_file
    from transformers import Gemma3ForCausalLM, GenerationConfig

    reader = GGUFReader(str(gguf))
    weights = _weights(reader)
    tied = "lm_head.weight" not in weights
    config = _config(reader, weights["model.embed_tokens.weight"].shape[0], tied)
    with torch.device("meta"):
        expected = {name: tuple(t.shape) for name, t in
                    Gemma3ForCausalLM(config).state_dict().items()
                    if not (tied and name == "lm_head.weight")}
    found = {name: tuple(t.shape) for name, t in weights.items()}
    if found != expected:
        wrong = sorted(set(found) ^ set(expected)) or \
            [name for name in expected if found[name] != expected[name]]
        raise Gemma3Error(f"its tensors do not fit Gemma 3: {', '.join(wrong[:5])}")
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(str(out))
    tokenizer = _tokenizer(reader, config.max_position_embeddings)
    tokenizer.save_pretrained(str(out))
    stops = [config.eos_token_id]  # a base Gemma also ends at <end_of_turn>, as Google's does
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    if isinstance(end_of_turn, int) and end_of_turn != tokenizer.unk_token_id:
        stops.append(end_of_turn)
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=stops,
                     pad_token_id=config.pad_token_id).save_pretrained(str(out))
    settings = out / "tokenizer_config.json"  # for readers other than transformers 5
    settings.write_text(json.dumps({**json.loads(settings.read_text(encoding="utf-8")),
                                    "add_bos_token": True}, indent=2) + "\n", encoding="utf-8")
