"""A run's reproducibility bundle: written by the training process, carried by the model card,
served and launched again on the same data (`launch_from_bundle`, the API); and two runs of
one config and seed on a CPU give the same metrics."""

from __future__ import annotations

import json
from importlib import metadata

import pytest
import yaml
from fastapi.testclient import TestClient

from studio.api.app import create_api
from studio.services import qa_sets, runs
from studio.services.demo import load_demo_pack
from studio.services.errors import Conflict, InvalidInput
from studio.services.model_card import build_model_card
from studio.services.reproduce import launch_from_bundle, parse_bundle, run_bundle
from studio.services.run_folder import RunFolder
from studio.services.run_plans import stored_plan
from tests.support.actors import admin
from tests.support.api_client import admin_headers
from tests.support.tiny_model import build_tiny_model
from tests.support.training import tiny_config
from worker.engines.native.trainer import Trainer


def _repeatable(metrics: list[dict]) -> list[dict]:
    """A run's metric rows less their row ids and timings."""
    return [{k: v for k, v in m.items() if k != "id" and not k.startswith("time")}
            for m in metrics]


def test_two_runs_of_one_config_and_seed_on_a_cpu_give_the_same_metrics(settings, tmp_path):
    load_demo_pack(settings, admin(settings), index_now=True)
    model = build_tiny_model(tmp_path / "tiny")
    metrics = []
    for _ in range(2):
        run = runs.create_run(settings, admin(settings), tiny_config(model, steps=2),
                              start=False)
        Trainer(settings, run["id"]).run()
        metrics.append(_repeatable(runs.run_metrics(settings, run["id"])))
    assert [m["step"] for m in metrics[0]] == [0, 1]
    assert metrics[0] == metrics[1]

    # the second run's bundle, as its training process wrote it when it started
    bundle = json.loads(RunFolder.of(settings, run["id"]).bundle.read_text())
    plan = stored_plan(settings, run["id"])
    assert bundle["seed"] == 3 and bundle["config"] == plan.config.model_dump(mode="json")
    assert bundle["data"] == {
        "corpus": {"name": "demo", "content_hash": plan.corpus.content_hash},
        "train": {"name": "demo", "content_hash": plan.train.content_hash},
        "eval": [], "exemplars": {"name": "demo",
                                  "content_hash": plan.exemplar_set.content_hash}}
    assert bundle["packages"]["torch"] == metadata.version("torch")
    assert bundle["packages"]["icrl-studio"] == metadata.version("icrl-studio")
    assert set(bundle["packages"]) == {"torch", "transformers", "icrl-studio", "verl"}
    assert (bundle["device"]["kind"], bundle["device"]["dtype"]) == ("cpu", "float32")
    assert bundle["determinism"]["torch_threads"] == 1
    assert bundle["determinism"]["deterministic_algorithms"] is False
    assert run_bundle(settings, run["id"]) == bundle

    # the API serves it and launches it again
    client, headers = TestClient(create_api(settings)), admin_headers(settings)
    served = client.get(f"/api/v1/runs/{run['id']}/reproduce.json", headers=headers)
    assert served.status_code == 200 and served.json() == bundle
    relaunched = client.post("/api/v1/runs/from-card", json={"card": served.text},
                             headers=headers)
    assert relaunched.status_code == 201, relaunched.text
    assert relaunched.json()["config"] == bundle["config"]
    refused = client.post("/api/v1/runs/from-card", headers=headers,
                          json={"card": "# a card without its bundle"})
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith("holds no reproducibility bundle")


def test_the_guidance_block_goes_from_the_api_and_a_yaml_file_into_the_bundle(studio):
    """POST /runs takes the run config as it is, `studio run launch FILE` hands `create_run`
    the file's text: each keeps the guidance block and the call bonus, and the run's
    reproducibility bundle carries them."""
    settings, model = studio
    guidance = {"mode": "mixed", "share": 0.25, "shaping": "luffy", "gamma": 0.2,
                "when": "all-failed"}
    config = {**tiny_config(model), "guidance": guidance, "reward": {"call_bonus": 0.1}}
    client, headers = TestClient(create_api(settings)), admin_headers(settings)
    launched = client.post("/api/v1/runs", json=config, headers=headers)
    assert launched.status_code == 201, launched.text
    bundle = client.get(f"/api/v1/runs/{launched.json()['id']}/reproduce.json",
                        headers=headers).json()
    assert bundle["config"]["guidance"] == guidance
    assert bundle["config"]["reward"]["call_bonus"] == 0.1
    from_file = runs.create_run(settings, admin(settings), yaml.safe_dump(config), start=False)
    assert from_file["config"]["guidance"] == guidance
    assert from_file["config"]["reward"]["call_bonus"] == 0.1


def test_a_model_card_carries_the_bundle_and_launches_the_same_run(studio):
    """Card -> bundle -> the same config on the same data; a text without a bundle, data
    stored with other content or no longer stored are refused, naming what to do."""
    settings, model = studio
    actor = admin(settings)
    config = {**tiny_config(model), "name": "tiny ```json {} ``` run"}  # cannot end the fence
    run = runs.create_run(settings, actor, config, start=False)
    card = build_model_card(settings, run["id"]).markdown
    assert "## Reproduce" in card and "studio run launch --from-card README.md" in card
    assert str(model) not in card and "add `--model PATH` with its path" in card
    bundle = parse_bundle(card).model_dump(mode="json")
    # no attempt yet: the plan's alone; the local model folder by its name
    assert bundle == {**run_bundle(settings, run["id"]),
                      "config": {**run["config"], "model": model.name}}
    assert bundle["device"] is None and bundle["config"]["name"] == config["name"]

    again = launch_from_bundle(settings, actor, card, model=str(model), start=False)
    assert again["id"] != run["id"] and again["config"] == run["config"]
    assert stored_plan(settings, again["id"]) == stored_plan(settings, run["id"])
    assert not any(w.startswith("packages:") for w in again["warnings"])
    older = {**bundle, "packages": {**bundle["packages"], "torch": "1.0.0"}}
    warned = launch_from_bundle(settings, actor, json.dumps(older), model=str(model),
                                start=False)
    assert (f"packages: the run was trained with torch 1.0.0; this studio has "
            f"{metadata.version('torch')}: its metrics may differ") in warned["warnings"]
    launched = len(runs.list_runs(settings))

    with pytest.raises(InvalidInput, match="holds no reproducibility bundle: give a model card"):
        launch_from_bundle(settings, actor, "# a card\n\n```json\n{\"seed\": 3}\n```\n")
    torn = {**bundle, "data": {"corpus": bundle["data"]["corpus"]}}
    with pytest.raises(InvalidInput, match="^the bundle's data.train: Field required$"):
        launch_from_bundle(settings, actor, json.dumps(torn))
    changed = {**bundle, "data": {**bundle["data"], "train": {"name": "demo",
                                                              "content_hash": "0" * 64}}}
    with pytest.raises(Conflict) as refused:
        launch_from_bundle(settings, actor, json.dumps(changed))
    plan = stored_plan(settings, run["id"])
    assert str(refused.value).startswith(
        f"data.train: the QA set 'demo' stored here has other content (sha256 "
        f"{plan.train.content_hash[:12]}) than the run trained on (000000000000). Upload the "
        "original content under a name of its own")
    qa_sets.delete_qa_set(settings, actor, plan.train.id)
    with pytest.raises(Conflict) as refused:
        launch_from_bundle(settings, actor, card, model=str(model))
    assert refused.value.status_code == 409 and str(refused.value).startswith(
        "the data the run trained on is not all stored here: data.train: 'demo' does not "
        "exist; upload it first")
    assert len(runs.list_runs(settings)) == launched


def test_a_relaunched_card_sends_the_token_only_to_this_studio(studio):
    """A card names the places a veRL run calls (`studio_url`, `ray_address`); relaunched by
    another user, it would send that user's token there (S1). Those two are dropped, said in
    the warnings; a config that names another address is refused at launch."""
    settings, model = studio
    actor = admin(settings)
    cluster = settings.model_copy(update={"verl_ray_addresses": "10.0.0.5:6379"})
    run = runs.create_run(cluster, actor, {**tiny_config(model), "verl": {
        "studio_url": settings.web_url + "/", "ray_address": "10.0.0.5:6379"}}, start=False)
    bundle = parse_bundle(build_model_card(settings, run["id"]).markdown).model_dump(mode="json")
    bundle["config"]["verl"]["studio_url"] = "http://169.254.169.254/"
    again = launch_from_bundle(settings, actor, json.dumps(bundle), model=str(model),
                               start=False)
    assert (again["config"]["verl"]["studio_url"], again["config"]["verl"]["ray_address"]) \
        == (None, None)
    assert [w.split(":")[0] for w in again["warnings"] if w.startswith("verl.")] \
        == ["verl.studio_url", "verl.ray_address"]

    elsewhere = {**tiny_config(model), "verl": {"studio_url": "http://169.254.169.254/"}}
    with pytest.raises(InvalidInput, match=r"^verl.studio_url: 'http://169.254.169.254/' is "
                       r"not this studio's address; .* must be one of http://127.0.0.1:\d+ "):
        runs.create_run(settings, actor, elsewhere, start=False)
    listed = settings.model_copy(update={"verl_studio_urls": "https://studio.internal, "
                                         "http://169.254.169.254:80"})
    assert runs.create_run(listed, actor, elsewhere, start=False)["config"]["verl"][
        "studio_url"] == "http://169.254.169.254/"
