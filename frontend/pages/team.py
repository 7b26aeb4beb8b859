"""The Team page: your API tokens; for admins, the users and their roles. Who is signed in,
with what role (`who_markdown`), stands above every page.

Every action calls the same services as the API (`/api/v1/users`, `/api/v1/tokens`) and
the CLI (`studio user ...`), which check the role: a member or a viewer who reaches the
admin section anyway gets the services' refusal, not the admins' powers.
"""

from __future__ import annotations

import gradio as gr

from frontend.components import (
    acting,
    dataframe,
    error_markdown,
    ok_markdown,
    only_choice,
    picker,
    table,
)
from frontend.shared import on_show
from studio.escaping import markdown_text
from studio.ingest.errors import human_bytes, size_text
from studio.services import auth
from studio.services.access import Actor
from studio.services.errors import UserError
from studio.services.records import parse_size
from studio.settings import Settings
from studio.storage.tables import Role

TITLE = "Team"

INTRO = """## Team
Who may do what here: your own API tokens; for admins, the team's users, their roles and
how much disk their exports may hold."""

ROLE_WORDS = {
    Role.admin: "you can do everything, users included",
    Role.member: "you can read everything of the team, create data, runs, evaluations and "
                 "exports, and change, cancel, resume, delete or export what you own",
    Role.viewer: "you can read everything of the team but change nothing; ask an admin for "
                 "the member role",
}
ROLES = [Role.viewer.value, Role.member.value, Role.admin.value]
"""The role pickers' choices, least privileged first: a new user starts as a viewer."""
ROLE_INFO = ("viewer: reads everything of the team, changes nothing · member: also uploads, "
             "launches, evaluates and exports, and changes what it owns · admin: everything, "
             "users included")
USER_COLUMNS = [("id", "#"), ("username", "User"), ("role", "Role"), ("state", "State"),
                ("created", "Since (UTC)"), ("quota", "Export quota")]
TOKEN_COLUMNS = [("id", "#"), ("name", "Name"), ("prefix", "Starts with"),
                 ("created", "Created (UTC)"), ("last", "Last used (UTC)"), ("state", "State")]


def _minute(iso: str | None) -> str:
    return iso[:16].replace("T", " ") if iso else "-"


def who_markdown(actor: Actor) -> str:
    return (f"Signed in as **{markdown_text(actor.username)}** ({actor.role.value}): "
            f"{ROLE_WORDS[actor.role]}. [Sign out](/logout)")


def tokens_view(settings: Settings, actor: Actor):
    rows = [{**t, "created": _minute(t["created_at"]), "last": _minute(t["last_used_at"]),
             "state": "revoked" if t["revoked"] else "active"}
            for t in auth.list_tokens(settings, actor)]
    live = [(f"#{t['id']} {t['name']} ({t['prefix']}…)", t["id"]) for t in rows
            if t["state"] == "active"]
    return table(rows, TOKEN_COLUMNS), gr.Dropdown(choices=live, value=only_choice(live))


def users_view(settings: Settings, actor: Actor):
    """The users table and picker for an admin (the user picked stays picked: users are never
    deleted); the section hidden for everyone else."""
    if not actor.is_admin:
        return gr.Column(visible=False), [], gr.Dropdown(choices=[])
    rows = [{**u, "state": "disabled" if u["disabled"] else "active",
             "created": _minute(u["created_at"]),
             "quota": human_bytes(u["export_quota_bytes"])
             if u["export_quota_bytes"] is not None
             else f"default ({human_bytes(settings.export_quota_bytes)})"}
            for u in auth.list_users(settings, actor)]
    return (gr.Column(visible=True), table(rows, USER_COLUMNS),
            picker([u["username"] for u in rows]))


def page_view(settings: Settings, actor: Actor):
    return *tokens_view(settings, actor), *users_view(settings, actor)


def new_token(settings: Settings, actor: Actor, name: str):
    try:
        made = auth.issue_token(settings, actor, name)
    except UserError as exc:
        return error_markdown(str(exc), "No token made"), gr.skip()
    return ok_markdown(f"Token '{made['name']}' made; copy it now, it is not shown again"), \
        made["token"]


def revoke(settings: Settings, actor: Actor, token_id: int | None) -> str:
    if token_id is None:
        return error_markdown("token: choose one of your active tokens", "Nothing revoked")
    try:
        found = auth.revoke_token(settings, actor, int(token_id))
    except UserError as exc:
        return error_markdown(str(exc), "Nothing revoked")
    return ok_markdown(f"Token '{found['name']}' revoked: it stops working at once")


def add_user(settings: Settings, actor: Actor, username: str, role: str):
    try:
        new = auth.add_user(settings, actor, username, role)
    except UserError as exc:
        return error_markdown(str(exc), "No user added"), ""
    return ok_markdown(f"Added {new.username} ({new.role}); give them the password below, "
                       "it is not shown again"), new.password


def change_user(settings: Settings, actor: Actor, username: str | None, action: str,
                role: str):
    """One admin action on the chosen user: its message, and a new password when reset."""
    if not username:
        return error_markdown("user: choose a user first", "Nothing changed"), ""
    try:
        if action == "role":
            found = auth.set_role(settings, actor, username, role)
            return ok_markdown(f"{username} is now a {found['role']}"), ""
        if action == "reset":
            new = auth.reset_password(settings, actor, username)
            return ok_markdown(f"New password for {username} below (shown once); their "
                               "browser sessions ended"), new.password
        auth.set_disabled(settings, actor, username, action == "disable")
    except UserError as exc:
        return error_markdown(str(exc), "Nothing changed"), ""
    done = "disabled: their tokens and sessions stopped" if action == "disable" \
        else "enabled again"
    return ok_markdown(f"{username} is {done}"), ""


def set_export_quota(settings: Settings, actor: Actor, username: str | None,
                     quota: str) -> str:
    """The admin's quota for the chosen user's exports: a size ('500 MB', '2 GB', bytes),
    or empty for the default."""
    if not username:
        return error_markdown("user: choose a user first", "Nothing changed")
    try:
        quota_bytes = parse_size(quota, "export quota", "leave it empty for the default") \
            if quota.strip() else None
        found = auth.set_export_quota(settings, actor, username, quota_bytes)
    except UserError as exc:
        return error_markdown(str(exc), "Nothing changed")
    limit = found["export_quota_bytes"]
    return ok_markdown(f"{username}'s exports may hold {size_text(limit)}" if limit is not None
                       else f"{username}'s exports may hold the default, "
                            f"{size_text(settings.export_quota_bytes)}")


def build(settings: Settings) -> None:
    gr.Markdown(INTRO, elem_id="team-title")
    gr.Markdown("### Your API tokens\nFor scripts and CI: `Authorization: Bearer <token>` on "
                "`/api/v1`. A token acts as you, with your role as it is at each request.")
    tokens = dataframe(TOKEN_COLUMNS, elem_id="team-tokens")
    with gr.Row():
        token_name = gr.Textbox(label="New token's name", placeholder="e.g. ci",
                                elem_id="team-token-name")
        make_token = gr.Button("Make a token", elem_id="team-make-token")
        token_pick = gr.Dropdown(label="Token", choices=[], elem_id="team-token-pick")
        revoke_token = gr.Button("Revoke it", variant="stop", elem_id="team-revoke")
    token_shown = gr.Textbox(label="The new token (shown once)", interactive=False,
                             elem_id="team-new-token")
    token_message = gr.Markdown(elem_id="team-token-message")

    with gr.Column(visible=False, elem_id="team-admin") as admin_section:
        gr.Markdown("### Users\nA new user is a **viewer** unless you pick another role "
                    "(what each may do is under the picker). A disabled user's tokens and "
                    "sessions stop at once; its data and runs stay.")
        users = dataframe(USER_COLUMNS, elem_id="team-users")
        with gr.Row():
            new_name = gr.Textbox(label="New user", elem_id="team-new-user")
            new_role = gr.Dropdown(ROLES, value=Role.viewer.value, label="Role",
                                   info=ROLE_INFO, elem_id="team-new-role")
            add = gr.Button("Add user", variant="primary", elem_id="team-add-user")
        with gr.Row():
            user_pick = gr.Dropdown(label="User", choices=[], elem_id="team-user-pick")
            role_pick = gr.Dropdown(ROLES, value=Role.viewer.value, label="Role",
                                    info=ROLE_INFO, elem_id="team-role-pick")
            set_role = gr.Button("Set role", elem_id="team-set-role")
        with gr.Row():
            disable = gr.Button("Disable", variant="stop", elem_id="team-disable")
            enable = gr.Button("Enable", elem_id="team-enable")
            reset = gr.Button("Reset password", elem_id="team-reset")
        with gr.Row():
            quota = gr.Textbox(label="Export quota (empty: the default, "
                               f"{human_bytes(settings.export_quota_bytes)})",
                               placeholder="e.g. 500 MB or 2 GB", elem_id="team-quota")
            set_quota = gr.Button("Set export quota", elem_id="team-set-quota")
        password = gr.Textbox(label="Password to hand over (shown once)", interactive=False,
                              elem_id="team-password")
        user_message = gr.Markdown(elem_id="team-user-message")

    outputs = [tokens, token_pick, admin_section, users, user_pick]
    refresh = acting(settings, page_view)
    on_show(refresh, outputs=outputs)

    def then_refresh(event):
        event.then(refresh, outputs=outputs, show_progress="hidden")

    then_refresh(make_token.click(acting(settings, new_token), token_name,
                                  [token_message, token_shown]))
    then_refresh(revoke_token.click(acting(settings, revoke), token_pick, token_message))
    then_refresh(add.click(acting(settings, add_user), [new_name, new_role],
                           [user_message, password]))
    for button, action in ((set_role, "role"), (disable, "disable"), (enable, "enable"),
                           (reset, "reset")):
        then_refresh(button.click(
            acting(settings, lambda s, actor, name, role, action=action: change_user(
                s, actor, name, action, role)),
            [user_pick, role_pick], [user_message, password]))
    then_refresh(set_quota.click(acting(settings, set_export_quota), [user_pick, quota],
                                 user_message))
