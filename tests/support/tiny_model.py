"""A tiny, randomly initialised causal LM with a SmolLM2-style tokenizer.

Built offline in well under two seconds, so engine and training tests can
run real multi-turn rollouts (tag protocol, chat template, eos handling)
without the 135M default model.

The tokenizer is byte-level BPE (any text round-trips exactly), trained on a
small built-in text, with the SmolLM2 special tokens at the same ids:
``<|endoftext|>`` = 0, ``<|im_start|>`` = 1, ``<|im_end|>`` = 2; eos = pad =
``<|im_end|>``, and a ChatML chat template.
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Text the BPE merges are learnt from: English plus the tags of the search
# protocol, so that typical prompts tokenize into a realistic number of tokens.
_TRAINING_TEXT = [
    "You are a helpful assistant. Answer the question. You can search for facts.",
    "To search, write <search>your query</search> and wait for the results.",
    "Results come back as <information>passages that match the query</information>.",
    "When you know the answer, write <answer>the short answer</answer> and stop.",
    "Think step by step inside <think>your reasoning</think> before you answer.",
    "Question: who wrote the novel about the white whale?",
    "<search>who wrote moby dick</search>",
    "<information>Moby-Dick is an 1851 novel by the American writer Herman Melville.</information>",
    "<answer>Herman Melville</answer>",
    "Question: what is the capital of France?",
    "<search>capital of France</search>",
    "<information>Paris is the capital and the largest city of France.</information>",
    "<answer>Paris</answer>",
    "Question: when did the first person walk on the moon, and who was it?",
    "<search>first moon landing year</search>",
    "<information>On 20 July 1969 Neil Armstrong became the first person to walk on the Moon."
    "</information>",
    "<answer>1969, Neil Armstrong</answer>",
    "The user asks a question; the assistant searches, reads the information and answers.",
    "Which river flows through the city? Where was she born? How many people live there?",
    "system user assistant question answer search information the of and to in is was by for",
    "0123456789 , . ; : ! ? ' \" ( ) [ ] { } - _ / \\ = + * & % $ # @",
]

DEFAULT_VOCAB_SIZE = 512


def build_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE):
    """A ``PreTrainedTokenizerFast`` (byte-level BPE, ChatML, eos = pad = <|im_end|>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeat the text so that frequent pairs merge; the merges are deterministic.
    backend.train_from_iterator(_TRAINING_TEXT * 4, trainer)
    for token_id, token in enumerate(SPECIAL_TOKENS):
        assert backend.token_to_id(token) == token_id, (token, backend.token_to_id(token))

    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=IM_START,
        eos_token=IM_END,
        pad_token=IM_END,
        unk_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
        model_max_length=2048,
        chat_template=CHATML_TEMPLATE,
    )


def build_tiny_model(
    folder: Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> Path:
    """Save a tiny random Llama causal LM and its tokenizer into ``folder``.

    The result loads with ``AutoModelForCausalLM.from_pretrained(folder)``,
    ``AutoTokenizer.from_pretrained(folder)`` and
    ``studio.models.base_models.resolve_model(str(folder), data_dir)``.
    The same ``seed`` gives the same weights; the global torch RNG is left as
    it was.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    bos_id = tokenizer.convert_tokens_to_ids(IM_START)

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model = model.to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=eos_id
    )

    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder
