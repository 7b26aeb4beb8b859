"""`studio user`: users and their roles (admins only)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from studio.cli.common import DataDir, acting_user, call, fail, print_table, studio_ready

user_app = typer.Typer(help="Users and their roles (admins only).", no_args_is_help=True)


def _print_new_user(new) -> None:
    typer.echo(f"user '{new.username}' ({new.role}); its password, shown once: {new.password}")


def _password(env: str | None) -> str | None:
    if env and not os.environ.get(env):
        raise fail(ValueError(f"--password-env: {env} is not set"))
    return os.environ.get(env) if env else None


PasswordEnv = typer.Option(None, "--password-env", help="Environment variable holding the "
                           "password (default: one is made up and printed once).")


@user_app.command("add")
def user_add(name: str = typer.Argument(..., help="Username: letters, digits, . _ @ -"),
             role: str = typer.Option("member", help="admin, member or viewer."),
             password_env: str = PasswordEnv, data_dir: Path = DataDir) -> None:
    """Add a user: a viewer reads, a member also creates and changes its own, an admin all."""
    from studio.services.auth import add_user

    settings = studio_ready(data_dir)
    _print_new_user(call(add_user, settings, acting_user(settings), name, role,
                         _password(password_env)))


@user_app.command("list")
def user_list(data_dir: Path = DataDir) -> None:
    """Every user with its role, whether it is disabled, and its export quota."""
    from studio.services.auth import list_users

    settings = studio_ready(data_dir)
    print_table(["ID", "USERNAME", "ROLE", "STATE", "CREATED (UTC)", "EXPORT QUOTA (BYTES)"],
                [[u["id"], u["username"], u["role"], "disabled" if u["disabled"] else "active",
                  u["created_at"][:19].replace("T", " "),
                  u["export_quota_bytes"] if u["export_quota_bytes"] is not None else
                  f"default ({settings.export_quota_bytes})"]
                 for u in call(list_users, settings, acting_user(settings))])


@user_app.command("disable")
def user_disable(name: str = typer.Argument(...), data_dir: Path = DataDir) -> None:
    """Disable a user: its tokens and browser sessions stop at once; its data stays."""
    from studio.services.auth import set_disabled

    settings = studio_ready(data_dir)
    call(set_disabled, settings, acting_user(settings), name, True)
    typer.echo(f"user '{name}' disabled")


@user_app.command("enable")
def user_enable(name: str = typer.Argument(...), data_dir: Path = DataDir) -> None:
    """Enable a disabled user again (it signs in again; its old tokens work again)."""
    from studio.services.auth import set_disabled

    settings = studio_ready(data_dir)
    call(set_disabled, settings, acting_user(settings), name, False)
    typer.echo(f"user '{name}' enabled")


@user_app.command("set-role")
def user_set_role(name: str = typer.Argument(...),
                  role: str = typer.Argument(..., help="admin, member or viewer."),
                  data_dir: Path = DataDir) -> None:
    """Change a user's role (at once, for its tokens and sessions too)."""
    from studio.services.auth import set_role

    settings = studio_ready(data_dir)
    found = call(set_role, settings, acting_user(settings), name, role)
    typer.echo(f"user '{name}' is now {found['role']}")


@user_app.command("set-export-quota")
def user_set_export_quota(name: str = typer.Argument(...),
                          quota: str = typer.Argument(..., help="Bytes, or 'default' for "
                                                      "STUDIO_EXPORT_QUOTA_BYTES."),
                          data_dir: Path = DataDir) -> None:
    """How many bytes a user's exports may hold on disk; a new export past it is refused."""
    from studio.services.auth import set_export_quota
    from studio.services.records import parse_sql_int

    settings = studio_ready(data_dir)
    quota_bytes = None if quota.strip() == "default" else call(
        parse_sql_int, quota, "QUOTA", "a number of bytes or 'default'")
    found = call(set_export_quota, settings, acting_user(settings), name, quota_bytes)
    limit = found["export_quota_bytes"]
    typer.echo(f"user '{name}': exports may hold {limit} bytes" if limit is not None else
               f"user '{name}': exports may hold the default, {settings.export_quota_bytes} "
               "bytes (STUDIO_EXPORT_QUOTA_BYTES)")


@user_app.command("reset-password")
def user_reset_password(name: str = typer.Argument(...), password_env: str = PasswordEnv,
                        data_dir: Path = DataDir) -> None:
    """Give a user a new password (its browser sessions end)."""
    from studio.services.auth import reset_password

    settings = studio_ready(data_dir)
    _print_new_user(call(reset_password, settings, acting_user(settings), name,
                         _password(password_env)))
