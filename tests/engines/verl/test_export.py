"""veRL's own merger turns a veRL FSDP checkpoint into the run's Hugging Face folder.

The checkpoint is laid out as veRL's FSDP checkpoint manager writes it for one
rank (`fsdp_config.json`, `model_world_size_1_rank_0.pt`, `huggingface/`),
from a tiny model's weights; a checkpoint of a real multi-GPU run (DTensor
shards) has not been merged here (docs/verl.md).
"""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from studio.run_config import LoraSpec
from studio.services import exports, runs
from studio.services.run_recorder import RunRecorder
from tests.support.actors import admin
from worker.engines.verl.export import LATEST_FILE, export_latest, latest_verl_step
from worker.export import run_export
from worker.lora import add_adapters, load_checkpoint


def write_verl_checkpoint(checkpoints, step, model_dir, model=None):
    """`model` (default: the base, "trained": its embeddings scaled) as veRL's FSDP checkpoint;
    a PeftModel as veRL saves a LoRA run's actor, with its lora_train_meta.json."""
    actor = checkpoints / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        with torch.no_grad():
            model.model.embed_tokens.weight.mul_(1.5)
    torch.save(model.state_dict(), actor / "model_world_size_1_rank_0.pt")
    if hasattr(model, "peft_config"):
        lora = model.peft_config["default"]
        (actor / "lora_train_meta.json").write_text(json.dumps(
            {"r": lora.r, "lora_alpha": lora.lora_alpha, "task_type": "CAUSAL_LM"}))
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    model.config.save_pretrained(actor / "huggingface")
    model.generation_config.save_pretrained(actor / "huggingface")
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(actor / "huggingface")
    (checkpoints / LATEST_FILE).write_text(str(step))
    return model


def test_the_latest_checkpoint_becomes_the_runs_hugging_face_folder(verl, verl_run):
    settings, run, files, model_dir = verl_run()
    assert export_latest(RunRecorder(settings, run["id"]), files.checkpoints) is None  # nothing saved yet
    trained = write_verl_checkpoint(files.checkpoints, 4, model_dir)
    assert latest_verl_step(files.checkpoints) == 4

    folder = export_latest(RunRecorder(settings, run["id"]), files.checkpoints)
    assert folder == settings.resolved_data_dir / "runs" / str(run["id"]) / "checkpoints" / "step-4"
    assert runs.get_run(settings, run["id"])["checkpoint_dir"] == f"runs/{run['id']}/checkpoints/step-4"
    merged = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    for name, tensor in trained.state_dict().items():  # veRL's merger writes bfloat16
        assert torch.equal(merged[name], tensor.to(merged[name].dtype)), name
    assert AutoTokenizer.from_pretrained(folder).eos_token == "<|im_end|>"
    assert not list(folder.parent.glob(".*partial"))


def test_a_lora_runs_checkpoint_is_evaluated_and_exported_with_its_adapter_merged(verl, verl_run):
    settings, run, files, model_dir = verl_run(lora={"rank": 4, "alpha": 8})
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    adapted = add_adapters(AutoModelForCausalLM.from_pretrained(model_dir),
                           LoraSpec(rank=4, alpha=8), seed=0)
    with torch.no_grad():  # a "trained" adapter: B is no longer 0
        for name, param in adapted.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    write_verl_checkpoint(files.checkpoints, 2, model_dir, adapted)

    folder = export_latest(RunRecorder(settings, run["id"]), files.checkpoints)
    assert (folder / "lora_adapter" / "adapter_model.safetensors").is_file()  # veRL's layout
    merged, _ = load_checkpoint(folder, run["config"]["model"], settings.resolved_data_dir)
    export = exports.create_export(settings, admin(settings), run["id"], target="folder", start=False)
    done = run_export(settings, export["id"])
    assert done["state"] == "succeeded", done["error"]
    exported = AutoModelForCausalLM.from_pretrained(settings.resolved_data_dir / done["location"])
    assert (settings.resolved_data_dir / done["location"] / "adapter" / "adapter_config.json"
            ).is_file()

    ids = torch.tensor([list(range(3, 40))])
    with torch.no_grad():
        expected, unchanged = adapted(input_ids=ids).logits, base(input_ids=ids).logits
        for model in (merged, exported):  # veRL's merger writes the base in bfloat16
            logits = model(input_ids=ids).logits.float()
            assert (logits - expected).abs().max() < (expected - unchanged).abs().max() / 10
