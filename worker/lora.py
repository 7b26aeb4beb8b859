"""LoRA adapters (PEFT) for a run with `lora:` set: the policy, its checkpoints, their loading.

The engines never hand PEFT's `PeftModel` wrapper to the GRPO and rollout code: they get
the Hugging Face causal LM inside it (`inner`), whose projections PEFT replaced in place by
LoRA layers. It is still a plain `LlamaForCausalLM` (or Qwen2..., ...) with its decoder and
its linear head, so the fast paths that need one (the head on the scored positions only,
the grouped-attention switch of the rollout) apply as they do without LoRA.

A checkpoint of a LoRA run holds the adapter only (`adapter_config.json`,
`adapter_model.safetensors`), beside the tokenizer and the trainer state; the base is the
run's `model`. veRL's merger writes a LoRA run's checkpoint as the base weights with the
adapter in `lora_adapter/` (`studio.services.run_folder` spells these files). `load_checkpoint`
reads all three kinds (full weights too).
"""

from __future__ import annotations

from pathlib import Path

import torch

from studio.models.base_models import load_causal_lm, load_tokenizer
from studio.run_config import LoraSpec
from studio.services.run_folder import adapter_folder


def add_adapters(model: torch.nn.Module, spec: LoraSpec, seed: int):
    """`model` with new LoRA adapters (B = 0, so it computes what the base computes), as a
    `PeftModel`. A's random start is drawn from `seed`, so a run repeats exactly."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                        target_modules=spec.target_modules, bias="none", task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def load_adapters(model: torch.nn.Module, folder: Path, trainable: bool = False):
    """`model` with the adapter saved in `folder`, as a `PeftModel`."""
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(folder), is_trainable=trainable)


def inner(peft_model) -> torch.nn.Module:
    """The Hugging Face causal LM inside a `PeftModel`, LoRA layers in place (see above)."""
    return peft_model.base_model.model


def load_checkpoint(checkpoint: Path, base_ref: str, data_dir: Path, dtype=None):
    """(model, tokenizer) of a run's checkpoint; the model is one plain causal LM (an adapter
    is merged into its base), so evaluating or exporting it needs no PEFT afterwards.
    `base_ref` (the run's model) is the base of a checkpoint that holds an adapter only."""
    source = str(checkpoint) if (checkpoint / "config.json").is_file() else base_ref
    tokenizer = load_tokenizer(source, data_dir)
    model = load_causal_lm(source, data_dir, dtype=dtype)
    adapter = adapter_folder(checkpoint)
    if adapter is not None:
        model = load_adapters(model, adapter).merge_and_unload()
    return model.eval(), tokenizer
