"""Every route of the API (from its OpenAPI document) x every method x {no token, viewer,
member who does not own the row, its owner, admin}: who may do what.

A viewer reads; a member creates, and changes only what it owns; an admin does
everything. Each route is classified below; a route added without a class fails the
test. Each call is made with a valid request on fresh rows where it changes or deletes
something, so that what decides the answer is who asks: allowed is a 2xx, refused is a
403 (401 without a token).
"""

from __future__ import annotations

import io
import itertools
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from frontend.server import create_app
from studio.services import (
    corpora,
    evaluations,
    exemplar_sets,
    exports,
    qa_sets,
    reproduce,
    runs,
)
from studio.services.access import Actor
from studio.services.auth import issue_token
from studio.services.demo import load_demo_pack
from studio.services.run_folder import RunFolder
from studio.services.run_streams import RunStreams, StreamOptions
from studio.storage.db import session_scope
from studio.storage.tables import Export, Role, Run, RunState
from tests.support.actors import user
from tests.support.synthetic_runs import add_rollout, finished_run, long_rollout_segments
from tests.support.tiny_model import build_tiny_model

ROLES = ("anonymous", "viewer", "member", "owner", "admin")
ALLOWED = {
    "public": set(ROLES),
    "read": {"viewer", "member", "owner", "admin"},
    "self": {"viewer", "member", "owner", "admin"},  # each acts on its own (tokens)
    "create": {"member", "owner", "admin"},
    "owner": {"owner", "admin"},
    "admin": {"admin"},
}
EXEMPLAR = {"question": "Where is Fennick Light?",
            "solution": "<think>Search it.</think><search>Fennick Light</search>"
                        "<information>Doc 1(Title: Fennick Light) On Marrow Point."
                        "</information><answer>Marrow Point</answer>",
            "answer": "Marrow Point"}
_unique = itertools.count(1)


@dataclass
class World:
    """A studio whose rows belong to `owner` (a member), with the other users beside it."""

    settings: object
    model: str
    actors: dict[str, Actor]
    run_id: int  # succeeded, with metrics, a rollout, a checkpoint
    rollout_id: int
    corpus_id: int
    qa_set_id: int
    exemplar_set_id: int
    evaluation_id: int
    export_id: int

    @property
    def owner(self) -> Actor:
        return self.actors["owner"]

    def config(self, **extra) -> dict:
        return {"name": f"run-{next(_unique)}", "model": self.model,
                "data": {"corpus": "demo", "train": "demo", "exemplars": "demo"},
                "curriculum": {"stages": [{"exemplars": 0, "steps": 1}]}, **extra}

    # fresh rows of the owner's, for the calls that change or delete one
    def corpus(self) -> int:
        return corpora.create_corpus(self.settings, self.owner, io.BytesIO(b'{"text": "x"}\n'),
                                     "c.jsonl", f"c{next(_unique)}", start_indexing=False)["id"]

    def qa_set(self) -> int:
        return qa_sets.create_qa_set(self.settings, self.owner, io.BytesIO(
            b'{"question": "q?", "golden_answers": ["a"]}\n'), "q.jsonl",
            f"q{next(_unique)}")["id"]

    def exemplar_set(self) -> int:
        return exemplar_sets.create_exemplar_set(self.settings, self.owner, f"e{next(_unique)}",
                                                 [EXEMPLAR, EXEMPLAR])["id"]

    def queued_run(self) -> int:
        return runs.create_run(self.settings, self.owner, self.config(), start=False)["id"]

    def cancelled_run(self) -> int:
        run_id = self.queued_run()
        runs.cancel_run(self.settings, self.owner, run_id)
        return run_id

    def queued_evaluation(self) -> int:
        return evaluations.create_evaluation(self.settings, self.owner, qa_set="demo",
                                             model=self.model, corpus="demo", limit=1,
                                             start=False)["id"]

    def failed_export(self) -> int:
        made = exports.create_export(self.settings, self.owner, self.run_id, target="folder",
                                     start=False)
        exports.update_export(self.settings, made["id"], state=RunState.failed, error="x")
        return made["id"]

    def token(self, role: str) -> int:
        return issue_token(self.settings, self.actors[role], f"t{next(_unique)}")["id"]


def _upload(name: str, filename: str, content: bytes, **form) -> dict:
    return {"files": {"file": (filename, content)}, "data": {"name": name, **form}}


Call = Callable[[World, str], tuple[str, dict]]
R = "/api/v1"
ROUTES: dict[tuple[str, str], tuple[str, Call]] = {
    ("GET", "/healthz"): ("public", lambda w, r: ("/healthz", {})),
    ("GET", f"{R}/me"): ("read", lambda w, r: (f"{R}/me", {})),
    # corpora
    ("GET", f"{R}/corpora"): ("read", lambda w, r: (f"{R}/corpora", {})),
    ("POST", f"{R}/corpora"): ("create", lambda w, r: (f"{R}/corpora", _upload(
        f"up{next(_unique)}", "c.jsonl", b'{"text": "salt"}\n'))),
    ("GET", f"{R}/corpora/{{corpus_id}}"): ("read", lambda w, r: (
        f"{R}/corpora/{w.corpus_id}", {})),
    ("DELETE", f"{R}/corpora/{{corpus_id}}"): ("owner", lambda w, r: (
        f"{R}/corpora/{w.corpus()}", {})),
    ("GET", f"{R}/corpora/{{corpus_id}}/search"): ("read", lambda w, r: (
        f"{R}/corpora/{w.corpus_id}/search", {"params": {"q": "lighthouse"}})),
    ("POST", f"{R}/corpora/{{corpus_id}}/retrieve"): ("read", lambda w, r: (
        f"{R}/corpora/{w.corpus_id}/retrieve", {"json": {"queries": ["lighthouse"]}})),
    ("GET", f"{R}/corpora/{{corpus_id}}/doctor/reachability"): ("read", lambda w, r: (
        f"{R}/corpora/{w.corpus_id}/doctor/reachability", {"params": {"qa_set": w.qa_set_id}})),
    ("GET", f"{R}/corpora/{{corpus_id}}/doctor/exemplars"): ("read", lambda w, r: (
        f"{R}/corpora/{w.corpus_id}/doctor/exemplars",
        {"params": {"exemplar_set": w.exemplar_set_id}})),
    # QA sets
    ("GET", f"{R}/qa-sets"): ("read", lambda w, r: (f"{R}/qa-sets", {})),
    ("POST", f"{R}/qa-sets"): ("create", lambda w, r: (f"{R}/qa-sets", _upload(
        f"up{next(_unique)}", "q.jsonl", b'{"question": "q?", "golden_answers": ["a"]}\n'))),
    ("GET", f"{R}/qa-sets/{{qa_set_id}}"): ("read", lambda w, r: (
        f"{R}/qa-sets/{w.qa_set_id}", {})),
    ("PATCH", f"{R}/qa-sets/{{qa_set_id}}"): ("owner", lambda w, r: (
        f"{R}/qa-sets/{w.qa_set()}", {"json": {"purpose": "eval"}})),
    ("DELETE", f"{R}/qa-sets/{{qa_set_id}}"): ("owner", lambda w, r: (
        f"{R}/qa-sets/{w.qa_set()}", {})),
    ("GET", f"{R}/qa-sets/{{qa_set_id}}/rows"): ("read", lambda w, r: (
        f"{R}/qa-sets/{w.qa_set_id}/rows", {})),
    ("POST", f"{R}/qa-sets/{{qa_set_id}}/split"): ("create", lambda w, r: (
        f"{R}/qa-sets/{w.qa_set_id}/split", {"json": {
            "train_name": f"tr{next(_unique)}", "eval_name": f"ev{next(_unique)}"}})),
    # exemplar sets
    ("GET", f"{R}/exemplar-sets"): ("read", lambda w, r: (f"{R}/exemplar-sets", {})),
    ("POST", f"{R}/exemplar-sets"): ("create", lambda w, r: (f"{R}/exemplar-sets", {
        "json": {"name": f"ex{next(_unique)}", "exemplars": [EXEMPLAR]}})),
    ("POST", f"{R}/exemplar-sets/draft"): ("create", lambda w, r: (
        f"{R}/exemplar-sets/draft", {"json": {"qa_set": "demo", "tool": "calculator"}})),
    ("POST", f"{R}/exemplar-sets/upload"): ("create", lambda w, r: (
        f"{R}/exemplar-sets/upload", _upload(f"up{next(_unique)}", "e.jsonl",
                                             b'{"question": "q?", "solution": '
                                             b'"<answer> a </answer>"}\n'))),
    ("GET", f"{R}/exemplar-sets/{{set_id}}"): ("read", lambda w, r: (
        f"{R}/exemplar-sets/{w.exemplar_set_id}", {})),
    ("DELETE", f"{R}/exemplar-sets/{{set_id}}"): ("owner", lambda w, r: (
        f"{R}/exemplar-sets/{w.exemplar_set()}", {})),
    ("POST", f"{R}/exemplar-sets/{{set_id}}/exemplars"): ("owner", lambda w, r: (
        f"{R}/exemplar-sets/{w.exemplar_set()}/exemplars", {"json": EXEMPLAR})),
    ("PUT", f"{R}/exemplar-sets/{{set_id}}/exemplars/{{number}}"): ("owner", lambda w, r: (
        f"{R}/exemplar-sets/{w.exemplar_set()}/exemplars/1", {"json": {"answer": "x"}})),
    ("DELETE", f"{R}/exemplar-sets/{{set_id}}/exemplars/{{number}}"): ("owner", lambda w, r: (
        f"{R}/exemplar-sets/{w.exemplar_set()}/exemplars/1", {})),
    ("POST", f"{R}/exemplar-sets/{{set_id}}/preview"): ("read", lambda w, r: (
        f"{R}/exemplar-sets/{w.exemplar_set_id}/preview", {
            "json": {"question": "Where?", "ks": [0], "model": w.model}})),
    ("POST", f"{R}/exemplar-sets/{{set_id}}/try"): ("create", lambda w, r: (
        f"{R}/exemplar-sets/{w.exemplar_set_id}/try", {
            "json": {"qa_set": "demo", "corpus": "demo", "model": w.model, "questions": 1}})),
    ("POST", f"{R}/demo"): ("create", lambda w, r: (f"{R}/demo", {})),
    ("POST", f"{R}/demo/math"): ("create", lambda w, r: (f"{R}/demo/math", {})),
    ("POST", f"{R}/demo/calc"): ("create", lambda w, r: (f"{R}/demo/calc", {})),
    # ready-made runs
    ("GET", f"{R}/run-presets"): ("read", lambda w, r: (f"{R}/run-presets", {})),
    # curricula
    ("GET", f"{R}/curricula/presets"): ("read", lambda w, r: (f"{R}/curricula/presets", {})),
    ("GET", f"{R}/curricula/presets/{{name}}"): ("read", lambda w, r: (
        f"{R}/curricula/presets/3-2-0", {})),
    ("POST", f"{R}/curricula/check"): ("read", lambda w, r: (f"{R}/curricula/check", {
        "json": {"design": {"stages": [{"exemplars": 0, "steps": 5}]}}})),
    # what runs wrote
    ("GET", f"{R}/runs/compare"): ("read", lambda w, r: (
        f"{R}/runs/compare", {"params": {"ids": str(w.run_id)}})),
    ("GET", f"{R}/runs/{{run_id}}/metrics"): ("read", lambda w, r: (
        f"{R}/runs/{w.run_id}/metrics", {})),
    ("GET", f"{R}/runs/{{run_id}}/rollouts"): ("read", lambda w, r: (
        f"{R}/runs/{w.run_id}/rollouts", {})),
    ("GET", f"{R}/runs/{{run_id}}/rollouts/{{rollout_id}}"): ("read", lambda w, r: (
        f"{R}/runs/{w.run_id}/rollouts/{w.rollout_id}", {})),
    ("POST", f"{R}/runs/{{run_id}}/rollouts/{{rollout_id}}/keep"): ("create", lambda w, r: (
        f"{R}/runs/{w.run_id}/rollouts/{w.rollout_id}/keep",
        {"json": {"exemplar_set": f"kept{next(_unique)}"}})),
    ("GET", f"{R}/runs/{{run_id}}/rollouts/{{rollout_id}}/tokens"): ("read", lambda w, r: (
        f"{R}/runs/{w.run_id}/rollouts/{w.rollout_id}/tokens", {})),
    ("GET", f"{R}/runs/{{run_id}}/config.yaml"): ("read", lambda w, r: (
        f"{R}/runs/{w.run_id}/config.yaml", {})),
    ("GET", f"{R}/runs/{{run_id}}/events"): ("read", lambda w, r: (
        f"{R}/runs/{w.run_id}/events", {})),
    ("GET", f"{R}/runs/{{run_id}}/events/history"): ("read", lambda w, r: (
        f"{R}/runs/{w.run_id}/events/history", {})),
    # runs
    ("GET", f"{R}/runs"): ("read", lambda w, r: (f"{R}/runs", {})),
    ("POST", f"{R}/runs"): ("create", lambda w, r: (f"{R}/runs", {"json": w.config()})),
    ("POST", f"{R}/runs/from-card"): ("create", lambda w, r: (f"{R}/runs/from-card", {
        "json": {"card": json.dumps(reproduce.run_bundle(w.settings, w.run_id))}})),
    ("GET", f"{R}/runs/{{run_id}}/reproduce.json"): ("read", lambda w, r: (
        f"{R}/runs/{w.run_id}/reproduce.json", {})),
    ("POST", f"{R}/runs/validate"): ("read", lambda w, r: (
        f"{R}/runs/validate", {"json": w.config()})),
    ("GET", f"{R}/runs/{{run_id}}"): ("read", lambda w, r: (f"{R}/runs/{w.run_id}", {})),
    ("DELETE", f"{R}/runs/{{run_id}}"): ("owner", lambda w, r: (
        f"{R}/runs/{w.cancelled_run()}", {})),
    ("POST", f"{R}/runs/{{run_id}}/cancel"): ("owner", lambda w, r: (
        f"{R}/runs/{w.queued_run()}/cancel", {})),
    ("POST", f"{R}/runs/{{run_id}}/resume"): ("owner", lambda w, r: (
        f"{R}/runs/{w.cancelled_run()}/resume", {})),
    # evaluations
    ("POST", f"{R}/evaluations"): ("create", lambda w, r: (f"{R}/evaluations", {"json": {
        "qa_set": "demo", "run_id": w.run_id, "limit": 1}})),
    ("GET", f"{R}/evaluations"): ("read", lambda w, r: (f"{R}/evaluations", {})),
    ("GET", f"{R}/evaluations/{{evaluation_id}}"): ("read", lambda w, r: (
        f"{R}/evaluations/{w.evaluation_id}", {})),
    ("GET", f"{R}/evaluations/{{evaluation_id}}/labels"): ("read", lambda w, r: (
        f"{R}/evaluations/{w.evaluation_id}/labels", {})),
    ("GET", f"{R}/evaluations/{{evaluation_id}}/labels/{{label}}"): ("read", lambda w, r: (
        f"{R}/evaluations/{w.evaluation_id}/labels/no_search", {})),
    ("POST", f"{R}/evaluations/{{evaluation_id}}/cancel"): ("owner", lambda w, r: (
        f"{R}/evaluations/{w.queued_evaluation()}/cancel", {})),
    ("POST", f"{R}/runs/{{run_id}}/base-vs-trained"): ("create", lambda w, r: (
        f"{R}/runs/{w.run_id}/base-vs-trained", {"json": {"qa_sets": ["demo"], "limit": 1}})),
    ("GET", f"{R}/runs/{{run_id}}/base-vs-trained"): ("read", lambda w, r: (
        f"{R}/runs/{w.run_id}/base-vs-trained", {})),
    ("POST", f"{R}/runs/{{run_id}}/base-vs-trained/cancel"): ("owner", lambda w, r: (
        f"{R}/runs/{_run_with_active_pair(w)}/base-vs-trained/cancel", {})),
    # exports
    ("POST", f"{R}/runs/{{run_id}}/exports"): ("owner", lambda w, r: (
        f"{R}/runs/{w.run_id}/exports", {"json": {"target": "folder"}})),
    ("GET", f"{R}/runs/{{run_id}}/model-card"): ("read", lambda w, r: (
        f"{R}/runs/{w.run_id}/model-card", {})),
    ("GET", f"{R}/runs/{{run_id}}/model-card/reward-curves.png"): ("read", lambda w, r: (
        f"{R}/runs/{w.run_id}/model-card/reward-curves.png", {})),
    ("GET", f"{R}/exports"): ("read", lambda w, r: (f"{R}/exports", {})),
    ("GET", f"{R}/exports/{{export_id}}"): ("read", lambda w, r: (
        f"{R}/exports/{w.export_id}", {})),
    ("POST", f"{R}/exports/{{export_id}}/retry"): ("owner", lambda w, r: (
        f"{R}/exports/{w.failed_export()}/retry", {})),
    ("GET", f"{R}/exports/{{export_id}}/download"): ("read", lambda w, r: (
        f"{R}/exports/{w.export_id}/download", {})),
    ("DELETE", f"{R}/exports/{{export_id}}"): ("owner", lambda w, r: (
        f"{R}/exports/{w.failed_export()}", {})),
    # calibrations
    ("GET", f"{R}/calibrations"): ("read", lambda w, r: (f"{R}/calibrations", {})),
    ("POST", f"{R}/calibrations"): ("create", lambda w, r: (
        f"{R}/calibrations", {"json": {"model": w.model}})),
    ("GET", f"{R}/calibrations/{{calibration_id}}"): ("read", lambda w, r: (
        f"{R}/calibrations/{_calibration(w)}", {})),
    # users and tokens
    ("GET", f"{R}/users"): ("admin", lambda w, r: (f"{R}/users", {})),
    ("POST", f"{R}/users"): ("admin", lambda w, r: (
        f"{R}/users", {"json": {"username": f"new{next(_unique)}", "role": "viewer"}})),
    ("POST", f"{R}/users/{{username}}/disable"): ("admin", lambda w, r: (
        f"{R}/users/{_spare_user(w)}/disable", {})),
    ("POST", f"{R}/users/{{username}}/enable"): ("admin", lambda w, r: (
        f"{R}/users/{_spare_user(w)}/enable", {})),
    ("PUT", f"{R}/users/{{username}}/role"): ("admin", lambda w, r: (
        f"{R}/users/{_spare_user(w)}/role", {"json": {"role": "member"}})),
    ("POST", f"{R}/users/{{username}}/reset-password"): ("admin", lambda w, r: (
        f"{R}/users/{_spare_user(w)}/reset-password", {})),
    ("PUT", f"{R}/users/{{username}}/export-quota"): ("admin", lambda w, r: (
        f"{R}/users/{_spare_user(w)}/export-quota", {"json": {"export_quota_bytes": 10**10}})),
    ("GET", f"{R}/tokens"): ("self", lambda w, r: (f"{R}/tokens", {})),
    ("POST", f"{R}/tokens"): ("self", lambda w, r: (f"{R}/tokens", {"json": {"name": "ci"}})),
    ("DELETE", f"{R}/tokens/{{token_id}}"): ("self", lambda w, r: (
        f"{R}/tokens/{w.token(r if r != 'anonymous' else 'owner')}", {})),
}


def _spare_user(world: World) -> str:
    return user(world.settings, f"spare{next(_unique)}", Role.viewer).username


def _calibration(world: World) -> int:
    from studio.services.calibrations import request_calibration

    return request_calibration(world.settings, world.owner, model=world.model,
                               start=False)["id"]


def _run_with_active_pair(world: World) -> int:
    """A run of the owner's whose base-vs-trained pair the owner queued (still queued)."""
    run_id = finished_run(world.settings, world.config(), steps=2, owner=world.owner)
    _checkpoint(world, run_id)
    evaluations.evaluate_base_and_trained(world.settings, world.owner, run_id, ["demo"],
                                          limit=1, start=False)
    return run_id


def _checkpoint(world: World, run_id: int) -> None:
    """A complete checkpoint after the run's steps: the tiny model, as the trainer saves it."""
    folder = RunFolder.of(world.settings, run_id)
    with folder.writing_checkpoint(2) as partial:
        build_tiny_model(partial)
    with session_scope(world.settings.sqlalchemy_url) as session:
        run = session.get(Run, run_id)
        run.checkpoint_dir = str(folder.checkpoint(2).relative_to(
            world.settings.resolved_data_dir))
        session.add(run)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    from studio.settings import Settings
    from studio.storage import db
    from tests.support.actors import admin

    root = tmp_path_factory.mktemp("matrix")
    settings = Settings(data_dir=root / "data")
    settings.resolved_data_dir.mkdir(parents=True)
    db.upgrade(settings.sqlalchemy_url)
    actors = {"admin": admin(settings), "owner": user(settings, "olga"),
              "member": user(settings, "mike"), "viewer": user(settings, "vera", Role.viewer)}
    owner = actors["owner"]
    load_demo_pack(settings, owner, index_now=True)
    model = str(build_tiny_model(root / "tiny"))
    world = World(settings, model, actors, 0, 0, 0, 0, 0, 0, 0)
    world.run_id = finished_run(settings, world.config(), steps=2, owner=owner)
    world.rollout_id = add_rollout(settings, world.run_id, 1, long_rollout_segments(50))
    _checkpoint(world, world.run_id)
    world.corpus_id = corpora.find_corpus(settings, "demo")["id"]
    world.qa_set_id = qa_sets.find_qa_set(settings, "demo")["id"]
    world.exemplar_set_id = exemplar_sets.find_exemplar_set(settings, "demo")["id"]
    world.evaluation_id = world.queued_evaluation()
    made = exports.create_export(settings, owner, world.run_id, target="zip", start=False)
    exports.export_zip(settings, made["id"]).parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(exports.export_zip(settings, made["id"]), "w") as archive:
        archive.writestr("config.json", "{}")
    with session_scope(settings.sqlalchemy_url) as session:
        row = session.get(Export, made["id"])
        row.state = RunState.succeeded
        session.add(row)
    world.export_id = made["id"]
    return world


@pytest.fixture(scope="module")
def client(world):
    app = create_app(world.settings)
    # a finished run's stream ends after the settle time: keep it short here
    app.state.run_streams = RunStreams(world.settings.sqlalchemy_url,
                                       StreamOptions(poll_seconds=0.05, settle_seconds=0.2))
    with TestClient(app) as test_client:
        yield test_client


def test_every_route_is_classified(client):
    documented = {(method.upper(), path) for path, methods in
                  client.get(f"{R}/openapi.json").json()["paths"].items() for method in methods}
    assert documented == set(ROUTES), (
        f"routes without a class: {sorted(documented - set(ROUTES))}; "
        f"classes without a route: {sorted(set(ROUTES) - documented)}")


@pytest.mark.parametrize("role", ROLES)
def test_who_may_call_each_route(world, client, role):
    headers = {} if role == "anonymous" else {
        "Authorization": f"Bearer {issue_token(world.settings, world.actors[role], 'matrix')['token']}"}
    wrong = []
    for (method, route), (kind, call) in ROUTES.items():
        path, kwargs = call(world, role)
        answer = client.request(method, path, headers=headers, **kwargs)
        expected = "allowed" if role in ALLOWED[kind] else (
            "401" if role == "anonymous" else "403")
        got = ("allowed" if answer.status_code < 300 else str(answer.status_code))
        if got != expected:
            wrong.append(f"{method} {route} ({kind}) as {role}: expected {expected}, got "
                         f"{answer.status_code} {answer.text[:200]}")
        if got == "403":
            assert answer.json()["detail"].startswith(world.actors[role].username), answer.text
    assert not wrong, "\n".join(wrong)


def test_a_member_cannot_reach_another_users_token(world, client):
    """Tokens are each user's own: another's token is not found, not merely forbidden."""
    theirs = world.token("owner")
    mine = issue_token(world.settings, world.actors["member"], "mine")["token"]
    answer = client.delete(f"{R}/tokens/{theirs}", headers={"Authorization": f"Bearer {mine}"})
    assert answer.status_code == 404


def test_reads_show_who_owns_what(world, client):
    token = issue_token(world.settings, world.actors["viewer"], "owners")["token"]
    headers = {"Authorization": f"Bearer {token}"}
    for path in ("/corpora", "/qa-sets", "/exemplar-sets", "/runs", "/evaluations", "/exports"):
        owners = {row["owner"] for row in client.get(f"{R}{path}", headers=headers).json()}
        assert "olga" in owners, path
