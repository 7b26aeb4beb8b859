"""Exports end to end on a tiny trained run: the folder loads and generates, the zip downloads,
the Hub push goes through huggingface_hub to a local Hub on 127.0.0.1 (tests/support/hub_server),
with retries, clear failures and retryable exports that are never half-written; each user's
exports stay within its export quota, and a failed export keeps no file."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import yaml
from fastapi.testclient import TestClient
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from studio.api.app import create_api
from studio.ingest.errors import size_text
from studio.run_config import parse_run_config
from studio.services import auth, corpora, evaluations, exports, model_card, runs
from studio.services.access import Forbidden
from studio.services.errors import Conflict, InvalidInput, NotFound
from studio.services.reproduce import parse_bundle, run_bundle
from studio.services.run_folder import RunFolder
from studio.storage.tables import Role, RunState
from tests.support.actors import admin, user
from tests.support.api_client import admin_headers, bearer
from tests.support.hub_server import TOKEN, LocalHub
from tests.support.processes import run_studio, studio_env
from tests.support.training import trained_studio
from worker import export as export_job
from worker import hub as hub_push


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    return trained_studio(tmp_path_factory.mktemp("exports") / "data")


@pytest.fixture
def local_hub(monkeypatch):
    """The local Hub, with huggingface_hub pointed at it (HF_ENDPOINT, LFS instead of Xet)."""
    import huggingface_hub.constants as hf_constants

    with LocalHub({TOKEN: "alice", "hf_otherUser": "bob"}, orgs={"alice": {"icrl-team"}}) as hub:
        monkeypatch.setattr(hf_constants, "ENDPOINT", hub.url)
        monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)
        monkeypatch.setattr(hub_push, "BACKOFF_S", 0.05)
        yield hub


def export_now(settings, run_id, token=None, **request) -> dict:
    """Create an export and run its job here, as a worker would."""
    created = exports.create_export(settings, admin(settings), run_id, token=token, start=False, **request)
    return export_job.run_export(settings, created["id"])


def folder_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_loads_and_generates(folder: Path, checkpoint: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    reference = AutoModelForCausalLM.from_pretrained(checkpoint)
    ids = tokenizer("<search>capital of France</search>", return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**ids).logits, reference(**ids).logits)
        out = model.generate(**ids, max_new_tokens=5, do_sample=False)
        expected = reference.generate(**ids, max_new_tokens=5, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1] and torch.equal(out, expected)
    # the exported tokenizer reads the ids as the checkpoint's does
    assert tokenizer.decode(out[0]) == AutoTokenizer.from_pretrained(checkpoint).decode(out[0])


def test_a_folder_export_loads_with_transformers_and_generates(studio):
    settings, run_id, _ = studio
    done = export_now(settings, run_id, target="folder")
    assert done["state"] == RunState.succeeded, done["error"]
    assert done["progress"] == 1.0 and done["step"] == 2
    folder = settings.resolved_data_dir / done["location"]
    assert folder == exports.export_folder(settings, done["id"])
    names = set(folder_files(folder))
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "README.md", "reward_curves.png", "run.yaml"} <= names
    assert not any(n.endswith((".pt", ".bin")) or "trainer_state" in n for n in names)
    checkpoint = settings.resolved_data_dir / "runs" / str(run_id) / "checkpoints" / "step-2"
    assert_loads_and_generates(folder, checkpoint)

    stored = runs.get_run(settings, run_id)["config"]
    assert parse_run_config((folder / "run.yaml").read_text()).model_dump(mode="json") == stored
    assert (folder / "reward_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(exports.exports_root(settings).glob(".*partial"))


def assert_card_states_its_evaluations(settings, run_id: int, text: str) -> None:
    """What the card says the model does comes from its own evaluations, base beside it."""
    (trained,) = evaluations.list_evaluations(settings, run_id)
    (base,) = [e for e in evaluations.list_evaluations(settings) if e["run_id"] is None]
    t, b = trained["metrics"], base["metrics"]
    assert (f"Zero-shot on 2 questions of demo, it made a valid search on "
            f"{t['valid_search_rate']:.0%} of them and answered {t['em']:.0%} exactly (base "
            f"model: {b['valid_search_rate']:.0%} and {b['em']:.0%}).") in text
    assert "ends up calling" not in text


def test_the_model_card_has_front_matter_data_curriculum_curves_and_evaluations(studio):
    settings, run_id, model = studio
    card = TestClient(api(settings)).get(f"/api/v1/runs/{run_id}/model-card",
                                         headers=admin_headers(settings)).json()
    text = card["markdown"]
    front = yaml.safe_load(text.split("---")[1])
    assert front["library_name"] == "transformers" and "icrl" in front["tags"]
    assert "base_model" not in front  # a local folder is not a Hub id
    assert str(model) not in text  # nor does a local path go public
    assert card["step"] == 2 and card["has_reward_curves"]
    corpus = corpora.find_corpus(settings, "demo")
    for expected in ("# tiny export", "## Training data",
                     f"demo: {corpus['num_documents']} documents, {corpus['num_passages']} passages",
                     "| 1 | 2 | 1 |", "| 2 | 0 | 1 |", "| grpo.lr | 0.001 |",
                     "![reward curves](reward_curves.png)", "## Intended use and limits",
                     "| demo | base (local model tiny\\-base) | 2 |",
                     "| demo | this model (after 2 steps) | 2 |"):
        assert expected in text, expected
    assert_card_states_its_evaluations(settings, run_id, text)
    bundle = parse_bundle(text).model_dump(mode="json")  # as the trainer wrote it, but the
    written = run_bundle(settings, run_id)  # local model folder named by its name only
    assert bundle == {**written, "config": {**written["config"], "model": model.name}}
    assert bundle["device"]["kind"] == "cpu"
    assert f"(cpu, float32), with seed {bundle['seed']} and torch " in text
    png = TestClient(api(settings)).get(f"/api/v1/runs/{run_id}/model-card/reward-curves.png",
                                        headers=admin_headers(settings))
    assert png.status_code == 200 and png.content[:4] == b"\x89PNG"


def api(settings):
    return create_api(settings)


def test_a_zip_export_downloads_through_the_api_and_loads(studio, tmp_path):
    settings, run_id, _ = studio
    client, headers = TestClient(api(settings)), admin_headers(settings)
    created = client.post(f"/api/v1/runs/{run_id}/exports", json={"target": "zip", "step": 1},
                          headers=headers)
    assert created.status_code == 201, created.text
    export_id = created.json()["id"]
    early = client.get(f"/api/v1/exports/{export_id}/download", headers=headers)
    assert early.status_code == 409 and "queued" in early.json()["detail"]
    export_job.run_export(settings, export_id)  # what the worker does with the queued task

    done = client.get(f"/api/v1/exports/{export_id}", headers=headers).json()
    assert done["state"] == "succeeded" and done["step"] == 1, done
    assert not exports.export_folder(settings, export_id).exists()  # the zip is the export
    response = client.get(f"/api/v1/exports/{export_id}/download", headers=headers)
    assert response.status_code == 200
    assert 'filename="tiny-export-step-1.zip"' in response.headers["content-disposition"]
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        assert archive.testzip() is None
        archive.extractall(tmp_path)
    folder = tmp_path / "tiny-export-step-1"
    assert_loads_and_generates(folder, settings.resolved_data_dir / "runs" / str(run_id)
                               / "checkpoints" / "step-1")
    listed = client.get(f"/api/v1/exports?run_id={run_id}", headers=headers).json()
    assert export_id in [e["id"] for e in listed]


def test_bad_requests_answer_4xx_naming_the_field(studio):
    settings, run_id, _ = studio
    client, headers = TestClient(api(settings)), admin_headers(settings)
    cases = [({"target": "hub", "repo_id": "alice/model"}, 422, "token:"),
             ({"target": "hub", "repo_id": "not a repo", "token": TOKEN}, 422, "repo_id:"),
             ({"target": "folder", "step": 7}, 422, "after steps 1, 2"),
             ({"target": "tarball"}, 422, "target"),
             ({"target": "hub", "repo_id": "alice/m", "token": [TOKEN]}, 422, "token: give")]
    for body, status, words in cases:
        response = client.post(f"/api/v1/runs/{run_id}/exports", json=body, headers=headers)
        assert response.status_code == status and words in response.text, (body, response.text)
        assert TOKEN not in response.text
    assert client.post("/api/v1/runs/999/exports", json={}, headers=headers).status_code == 404
    folder = exports.create_export(settings, admin(settings), run_id, target="folder", start=False)
    response = client.get(f"/api/v1/exports/{folder['id']}/download", headers=headers)
    assert response.status_code == 409 and "target zip" in response.json()["detail"]
    response = client.post(f"/api/v1/exports/{folder['id']}/retry", headers=headers)
    assert response.status_code == 409 and "only a failed export" in response.json()["detail"]


def test_a_push_creates_the_repo_and_uploads_every_file_intact(studio, local_hub):
    settings, run_id, _ = studio
    created = exports.create_export(settings, admin(settings), run_id, target="hub", repo_id="icrl-team/tiny",
                                    private=True, token=TOKEN, start=False)
    token_file = settings.resolved_data_dir / "secrets" / "export-tokens" / str(created["id"])
    assert token_file.stat().st_mode & 0o777 == 0o600
    done = export_job.run_export(settings, created["id"])
    assert done["state"] == RunState.succeeded, done["error"]
    assert done["location"] == f"{local_hub.url}/icrl-team/tiny"
    repo = local_hub.repos["icrl-team/tiny"]
    assert repo.private and len(repo.commits) == 1
    assert repo.files == folder_files(exports.export_folder(settings, created["id"]))
    assert local_hub.tokens_seen == {TOKEN}
    assert not token_file.exists()
    assert TOKEN not in json.dumps(exports.list_exports(settings))


def test_transient_hub_failures_are_retried(studio, local_hub):
    settings, run_id, _ = studio
    local_hub.fail("POST", r"^/api/repos/create$", 500)
    local_hub.fail("POST", r"/commit/", 503)
    done = export_now(settings, run_id, token=TOKEN, target="hub", repo_id="alice/retried")
    assert done["state"] == RunState.succeeded, done["error"]
    statuses = [(m, s) for m, p, s in local_hub.requests if p == "/api/repos/create"]
    assert statuses == [("POST", 500), ("POST", 200), ("POST", 409)]  # the retry re-creates
    assert len(local_hub.repos["alice/retried"].commits) == 1


def assert_holds_no_file(settings, export: dict) -> None:
    """A failed export's folder, zip and partial files are gone, and its view says so."""
    assert not [p for p in exports.exports_root(settings).iterdir()
                if p.name.lstrip(".").split(".")[0] == str(export["id"])]
    assert export["stored_bytes"] == 0 and export["location"] is None


def test_a_refused_token_fails_at_once_and_the_export_retries_with_a_good_one(studio, local_hub):
    settings, run_id, _ = studio
    done = export_now(settings, run_id, token="hf_revoked", target="hub", repo_id="alice/later")
    assert done["state"] == RunState.failed and done["retryable"]
    assert "refused the token (401" in done["error"], done["error"]
    assert len([p for _, p, _ in local_hub.requests if p == "/api/repos/create"]) == 1
    assert_holds_no_file(settings, done)  # the folder built for the push is freed
    with pytest.raises(InvalidInput, match="token"):
        exports.retry_export(settings, admin(settings), done["id"], start=False)
    retried = TestClient(api(settings)).post(f"/api/v1/exports/{done['id']}/retry",
                                             json={"token": TOKEN}, headers=admin_headers(settings))
    assert retried.status_code == 200 and retried.json()["state"] == "queued"
    assert TOKEN not in retried.text
    again = export_job.run_export(settings, done["id"])  # the worker's part, run here
    assert again["state"] == RunState.succeeded and again["error"] is None
    folder = exports.export_folder(settings, done["id"])  # built again
    assert local_hub.repos["alice/later"].files == folder_files(folder)
    assert again["stored_bytes"] == sum(len(data) for data in folder_files(folder).values())
    with pytest.raises(Conflict):
        exports.retry_export(settings, admin(settings), done["id"], token=TOKEN, start=False)


@pytest.mark.parametrize(("repo_id", "words"), [
    ("bob-corp/model", "may not write to 'bob-corp/model' (403"),
])
def test_missing_rights_fail_with_what_to_do(studio, local_hub, repo_id, words):
    settings, run_id, _ = studio
    done = export_now(settings, run_id, token=TOKEN, target="hub", repo_id=repo_id)
    assert done["state"] == RunState.failed and words in done["error"], done["error"]


def test_a_hub_that_keeps_failing_gives_up_after_bounded_attempts(studio, local_hub):
    settings, run_id, _ = studio
    local_hub.fail("POST", r"^/api/repos/create$", 502, times=100)
    done = export_now(settings, run_id, token=TOKEN, target="hub", repo_id="alice/down")
    assert done["state"] == RunState.failed and done["retryable"]
    assert f"gave up after {hub_push.ATTEMPTS} attempts" in done["error"], done["error"]
    assert len([p for _, p, _ in local_hub.requests if p == "/api/repos/create"]) \
        == hub_push.ATTEMPTS
    assert_holds_no_file(settings, done)


def test_a_failure_mid_way_leaves_no_half_written_export(studio, monkeypatch):
    settings, run_id, _ = studio
    real_zip = export_job.zip_folder

    def disk_full(folder, target, arcroot, on_progress):
        target.write_bytes(b"PK half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export_job, "zip_folder", disk_full)
    done = export_now(settings, run_id, target="zip")
    assert done["state"] == RunState.failed and "No space left" in done["error"]
    root = exports.exports_root(settings)
    assert not list(root.glob(f".{done['id']}*")) and not exports.export_zip(
        settings, done["id"]).exists()
    monkeypatch.setattr(export_job, "zip_folder", real_zip)
    exports.retry_export(settings, admin(settings), done["id"], start=False)
    again = export_job.run_export(settings, done["id"])
    assert again["state"] == RunState.succeeded
    with zipfile.ZipFile(exports.export_zip(settings, done["id"])) as archive:
        assert archive.testzip() is None


def test_the_cli_refuses_a_push_without_a_token_and_a_bad_target(studio):
    settings, run_id, _ = studio
    env = studio_env(settings.resolved_data_dir)
    env.pop("HF_TOKEN", None)
    no_token = run_studio(["export", str(run_id), "--to", "hub", "--repo-id", "alice/x",
                           "--token-env", "NO_SUCH_VARIABLE"], env)
    assert no_token.returncode == 2
    assert "--token-env: set NO_SUCH_VARIABLE" in no_token.stderr
    bad = run_studio(["export", str(run_id), "--to", "tarball"], env)
    assert bad.returncode == 2 and "target: 'tarball' is not one of" in bad.stderr


def members_run(settings, run_id: int, name: str):
    """The member `name` and its own run: a copy of run `run_id` with its checkpoint after 2
    steps, so that the member's exports start from none."""
    member = user(settings, name)
    config = {**runs.get_run(settings, run_id)["config"], "name": f"{name}'s run"}
    copy_id = runs.create_run(settings, member, config, start=False)["id"]
    with RunFolder.of(settings, copy_id).writing_checkpoint(2) as partial:
        shutil.copytree(exports.checkpoint_folder(settings, run_id, 2)[1], partial,
                        dirs_exist_ok=True)
    return member, copy_id


def stored(settings) -> list[str]:
    """Every path under the exports folder, and every export's id."""
    root = exports.exports_root(settings)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) + \
        [str(e["id"]) for e in exports.list_exports(settings)]


def test_an_export_past_its_owners_quota_is_refused_saying_what_to_do(studio):
    settings, trained_id, _ = studio
    quinn, run_id = members_run(settings, trained_id, "quinn")
    first = export_job.run_export(settings, exports.create_export(
        settings, quinn, run_id, target="folder", start=False)["id"])
    folder = exports.export_folder(settings, first["id"])
    held = sum(len(data) for data in folder_files(folder).values())
    assert first["stored_bytes"] == held
    needed = exports.estimated_bytes(settings, run_id, 2)
    checkpoint = exports.checkpoint_folder(settings, run_id, 2)[1]
    weights = (checkpoint / "model.safetensors").stat().st_size
    assert weights < needed < sum(p.stat().st_size for p in checkpoint.iterdir())  # no trainer state

    auth.set_export_quota(settings, admin(settings), "quinn", held + needed - 1)
    before = stored(settings)
    with pytest.raises(Conflict) as refused:
        exports.create_export(settings, quinn, run_id, target="zip", start=False)
    for words in (f"quinn's exports hold {size_text(held)}", f"needs about {size_text(needed)}",
                  f"past the quota of {size_text(held + needed - 1)}",
                  "Delete exports no longer needed (`studio exports delete ID`",
                  "`studio user set-export-quota quinn BYTES`"):
        assert words in str(refused.value), str(refused.value)
    api_answer = TestClient(api(settings)).post(f"/api/v1/runs/{run_id}/exports",
                                                json={"target": "zip"},
                                                headers=bearer(settings, quinn))
    assert api_answer.status_code == 409, api_answer.text
    assert api_answer.json()["detail"] == str(refused.value)
    assert stored(settings) == before  # nothing stored: no row, no file

    auth.set_export_quota(settings, admin(settings), "quinn", held + needed)
    made = exports.create_export(settings, quinn, run_id, target="zip", start=False)
    assert made["state"] == RunState.queued  # while queued, it counts at its estimate
    with pytest.raises(Conflict) as full:
        exports.create_export(settings, quinn, run_id, target="folder", start=False)
    assert f"hold {size_text(held + needed)} and" in str(full.value)
    assert export_job.run_export(settings, made["id"])["state"] == RunState.succeeded


def test_the_studio_quota_applies_to_users_without_their_own(studio):
    settings, trained_id, _ = studio
    rita, run_id = members_run(settings, trained_id, "rita")
    needed = exports.estimated_bytes(settings, run_id, 2)
    tight = settings.model_copy(update={"export_quota_bytes": needed - 1})
    with pytest.raises(Conflict) as refused:
        exports.create_export(tight, rita, run_id, start=False)
    assert "rita's exports hold 0 bytes and" in str(refused.value)
    assert f"the quota of {size_text(needed - 1)}." in str(refused.value)
    assert auth.set_export_quota(settings, admin(settings), "rita", needed)[
        "export_quota_bytes"] == needed  # an admin's own quota for rita wins
    exports.create_export(tight, rita, run_id, start=False)
    with pytest.raises(Forbidden, match="only admins"):
        auth.set_export_quota(settings, rita, "rita", 10**12)
    with pytest.raises(InvalidInput, match="export_quota_bytes: give a number of bytes"):
        auth.set_export_quota(settings, admin(settings), "rita", -1)
    assert auth.set_export_quota(settings, admin(settings), "rita", None)[
        "export_quota_bytes"] is None


def test_deleting_exports_frees_the_quota_for_their_owner_and_admins_only(studio):
    settings, trained_id, _ = studio
    sam, run_id = members_run(settings, trained_id, "sam")
    made = [export_job.run_export(settings, exports.create_export(
        settings, sam, run_id, target=target, start=False)["id"]) for target in ("folder", "zip")]
    assert all(e["state"] == RunState.succeeded and e["stored_bytes"] > 0 for e in made)
    needed = exports.estimated_bytes(settings, run_id, 2)
    auth.set_export_quota(settings, admin(settings), "sam",
                          sum(e["stored_bytes"] for e in made) + needed - 1)
    with pytest.raises(Conflict, match="export quota"):
        exports.create_export(settings, sam, run_id, start=False)

    folder_export, zip_export = (e["id"] for e in made)
    for name, role in (("tom", Role.member), ("vic", Role.viewer)):
        with pytest.raises(Forbidden):
            exports.delete_export(settings, user(settings, name, role), folder_export)
    assert exports.export_folder(settings, folder_export).is_dir()
    exports.delete_export(settings, sam, folder_export)
    assert not exports.export_folder(settings, folder_export).exists()
    with pytest.raises(NotFound):
        exports.get_export(settings, folder_export)
    queued = exports.create_export(settings, sam, run_id, start=False)  # room again
    with pytest.raises(Conflict, match="is queued; wait until it ends"):
        exports.delete_export(settings, sam, queued["id"])

    client = TestClient(api(settings))
    answer = client.delete(f"/api/v1/exports/{zip_export}", headers=admin_headers(settings))
    assert answer.status_code == 204  # an admin deletes anyone's
    assert not exports.export_zip(settings, zip_export).exists()
    assert client.delete(f"/api/v1/exports/{zip_export}",
                         headers=admin_headers(settings)).status_code == 404


def test_the_cli_sets_a_quota_lists_exports_and_deletes_one(studio):
    settings, trained_id, _ = studio
    una, run_id = members_run(settings, trained_id, "una")
    done = export_job.run_export(settings, exports.create_export(
        settings, una, run_id, target="zip", start=False)["id"])
    env = studio_env(settings.resolved_data_dir)
    quota = run_studio(["user", "set-export-quota", "una", "5000000"], env)
    assert quota.returncode == 0 and "una': exports may hold 5000000 bytes" in quota.stdout
    listed = run_studio(["user", "list"], env)
    assert any(line.split()[1] == "una" and line.split()[-1] == "5000000"
               for line in listed.stdout.splitlines()), listed.stdout
    bad = run_studio(["user", "set-export-quota", "una", "lots"], env)
    assert bad.returncode == 2 and "QUOTA: 'lots' is not a number of bytes" in bad.stderr
    rows = run_studio(["exports", "list", "--run", str(run_id)], env).stdout.splitlines()
    assert rows[1].split()[:7] == [str(done["id"]), "una", str(run_id), "zip", "2",
                                   "succeeded", str(done["stored_bytes"])], rows
    user(settings, "wyn", Role.viewer)
    refused = run_studio(["--user", "wyn", "exports", "delete", str(done["id"])], env)
    assert refused.returncode == 2 and "wyn is a viewer" in refused.stderr
    deleted = run_studio(["--user", "una", "exports", "delete", str(done["id"])], env)
    assert deleted.returncode == 0 and f"export {done['id']} deleted" in deleted.stdout
    assert not exports.export_zip(settings, done["id"]).exists()


LORA = {"rank": 4, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "down_proj"]}

# Loads an export with plain Transformers while PEFT cannot be imported, and saves its logits.
WITHOUT_PEFT = """
import sys
sys.modules["peft"] = None
import torch
from transformers import AutoModelForCausalLM
folder, ids, out = sys.argv[1:]
model = AutoModelForCausalLM.from_pretrained(folder)
with torch.no_grad():
    torch.save(model(input_ids=torch.load(ids)).logits, out)
"""


@pytest.fixture(scope="module")
def lora_studio(tmp_path_factory):
    """A LoRA run whose adapters moved (an entropy bonus gives them a gradient)."""
    return trained_studio(tmp_path_factory.mktemp("lora-exports") / "data", lora=LORA,
                          grpo={"steps": 2, "batch_size": 2, "group_size": 2, "lr": 1e-2,
                                "entropy_coef": 0.1, "max_turns": 1, "max_turn_tokens": 8,
                                "max_response_tokens": 24, "max_obs_tokens": 16,
                                "micro_batch_size": 2})


def test_a_lora_export_is_the_merged_model_for_plain_transformers_and_the_adapter(
        lora_studio, tmp_path):
    settings, run_id, model = lora_studio
    done = export_now(settings, run_id, target="folder")
    assert done["state"] == RunState.succeeded, done["error"]
    folder = settings.resolved_data_dir / done["location"]
    names = set(folder_files(folder))
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "run.yaml",
            "adapter/adapter_model.safetensors", "adapter/adapter_config.json"} <= names
    assert "adapter_config.json" not in names, "the top level is a plain model folder"
    adapter_config = json.loads((folder / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["r"] == 4 and adapter_config["lora_alpha"] == 16
    assert adapter_config["base_model_name_or_path"] is None  # a local base is not named
    assert not list(exports.exports_root(settings).glob(".*"))  # no staging folder left

    ids = torch.tensor([list(range(3, 40))])
    torch.save(ids, tmp_path / "ids.pt")
    loaded = subprocess.run([sys.executable, "-c", WITHOUT_PEFT, str(folder),
                             str(tmp_path / "ids.pt"), str(tmp_path / "logits.pt")],
                            capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    checkpoint = settings.resolved_data_dir / "runs" / str(run_id) / "checkpoints" / "step-2"
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model), checkpoint)
    with torch.no_grad():
        expected = adapted(input_ids=ids).logits
        with adapted.disable_adapter():
            base = adapted(input_ids=ids).logits
    merged = torch.load(tmp_path / "logits.pt")
    assert (expected - base).abs().max() > 1e-3, "the adapter changed the model"
    assert torch.allclose(merged, expected, atol=1e-5, rtol=0)
    for path in (folder / "adapter", checkpoint):  # the exported adapter is the checkpoint's
        assert (path / "adapter_model.safetensors").read_bytes() == \
            (checkpoint / "adapter_model.safetensors").read_bytes()


def test_a_lora_runs_model_card_names_the_adapter(lora_studio):
    settings, run_id, _ = lora_studio
    text = model_card.build_model_card(settings, run_id).markdown
    for expected in ("trained with LoRA (rank 4, alpha 16, dropout 0, on q\\_proj, k\\_proj, "
                     "v\\_proj, down\\_proj)", "the adapter alone is in `adapter/`", "| lora.rank | 4 |",
                     "| demo | this model (after 2 steps) | 2 |"):
        assert expected in text, expected
    assert_card_states_its_evaluations(settings, run_id, text)


def test_a_lora_export_is_counted_at_the_merged_model_it_writes(lora_studio):
    """A LoRA checkpoint holds the adapter, but its export holds the merged model: the quota
    is checked against that before anything is written, and counted from the zip written."""
    settings, trained_id, model = lora_studio
    xena, run_id = members_run(settings, trained_id, "xena")
    checkpoint = exports.checkpoint_folder(settings, run_id, 2)[1]
    adapter = sum(p.stat().st_size for p in exports.model_files(checkpoint))
    base_weights = (model / "model.safetensors").stat().st_size
    between = adapter + base_weights // 2  # past the adapter, short of the merged model
    auth.set_export_quota(settings, admin(settings), "xena", between)
    before = stored(settings)
    refused = TestClient(api(settings)).post(f"/api/v1/runs/{run_id}/exports",
                                             json={"target": "zip"}, headers=bearer(settings, xena))
    assert refused.status_code == 409, refused.text
    needed = exports.estimated_bytes(settings, run_id, 2)
    assert needed >= adapter + base_weights
    for words in ("xena's exports hold 0 bytes", f"needs about {size_text(needed)} more",
                  f"past the quota of {size_text(between)}"):
        assert words in refused.json()["detail"], refused.json()["detail"]
    assert stored(settings) == before  # nothing written: no row, no file

    auth.set_export_quota(settings, admin(settings), "xena", needed)
    done = export_job.run_export(settings, exports.create_export(
        settings, xena, run_id, target="zip", start=False)["id"])
    assert done["state"] == RunState.succeeded, done["error"]
    written = exports.export_zip(settings, done["id"]).stat().st_size
    assert done["stored_bytes"] == written > between  # the merged model, as refused above
    with pytest.raises(Conflict) as full:
        exports.create_export(settings, xena, run_id, target="zip", start=False)
    assert f"xena's exports hold {size_text(written)} and" in str(full.value)


def test_two_zip_exports_of_one_lora_run_at_once_both_load(lora_studio, tmp_path):
    """The short jobs' worker runs two jobs at once in threads of one process (`--pool
    threads`); each export merges the adapter into its own copy of the base. (A worker's
    first two loads were seen not to clash, so the two at once follow an earlier export, as
    in a worker that has served one.)"""
    settings, run_id, model = lora_studio
    earlier, *made = [exports.create_export(settings, admin(settings), run_id, target="zip",
                                            start=False)["id"] for _ in range(3)]
    assert export_job.run_export(settings, earlier)["state"] == RunState.succeeded
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda export_id: export_job.run_export(settings, export_id), made))
    assert [d["state"] for d in done] == [RunState.succeeded] * 2, [d["error"] for d in done]
    ids = torch.tensor([list(range(3, 40))])
    checkpoint = exports.checkpoint_folder(settings, run_id, 2)[1]
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model), checkpoint)
    for export_id in made:
        with zipfile.ZipFile(exports.export_zip(settings, export_id)) as archive:
            archive.extractall(tmp_path / str(export_id))
        (folder,) = (tmp_path / str(export_id)).iterdir()
        with torch.no_grad():
            assert torch.allclose(AutoModelForCausalLM.from_pretrained(folder)(input_ids=ids).logits,
                                  adapted(input_ids=ids).logits, atol=1e-5, rtol=0)
