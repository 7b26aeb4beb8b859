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

from studio.services import runs
from worker.engines.verl.export import LATEST_FILE, export_latest, latest_verl_step


def write_verl_checkpoint(checkpoints, step, model_dir):
    actor = checkpoints / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():  # a "trained" model: the weights differ from the base
        model.model.embed_tokens.weight.mul_(1.5)
    torch.save(model.state_dict(), actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    model.config.save_pretrained(actor / "huggingface")
    model.generation_config.save_pretrained(actor / "huggingface")
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(actor / "huggingface")
    (checkpoints / LATEST_FILE).write_text(str(step))
    return model


def test_the_latest_checkpoint_becomes_the_runs_hugging_face_folder(verl, verl_run):
    settings, run, files, model_dir = verl_run()
    assert export_latest(settings, run["id"], files.checkpoints) is None  # nothing saved yet
    trained = write_verl_checkpoint(files.checkpoints, 4, model_dir)
    assert latest_verl_step(files.checkpoints) == 4

    folder = export_latest(settings, run["id"], files.checkpoints)
    assert folder == settings.resolved_data_dir / "runs" / str(run["id"]) / "checkpoints" / "step-4"
    assert runs.get_run(settings, run["id"])["checkpoint_dir"] == f"runs/{run['id']}/checkpoints/step-4"
    merged = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    for name, tensor in trained.state_dict().items():  # veRL's merger writes bfloat16
        assert torch.equal(merged[name], tensor.to(merged[name].dtype)), name
    assert AutoTokenizer.from_pretrained(folder).eos_token == "<|im_end|>"
    assert not list(folder.parent.glob(".*partial"))
