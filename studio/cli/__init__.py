"""The `studio` command: start the studio, a worker, manage the database, users and tokens,
launch and follow runs, evaluate. Commands call the services directly, as the API does, and
act as a user of the studio: `--user NAME` (or STUDIO_USER), else the first admin (whoever
runs the CLI where the studio's database is can reach everything anyway; `--user` makes a
script act with a team member's role and ownership).

One module per command group (`studio.cli.runs` for `studio run`, ...; the top-level
commands with their subject: `serve`, `data`, `models`, `evaluations`, `exports`), what
they share in `studio.cli.common`; this module assembles them into `app`, the entry point
(pyproject's `studio` script, and `python -m studio.cli`)."""

from __future__ import annotations

import typer

from studio.cli import (
    data,
    database,
    evaluations,
    exemplars,
    exports,
    models,
    runs,
    serve,
    tokens,
    users,
)
from studio.cli.common import acting_as

app = typer.Typer(help="ICRL Studio: teach an LLM to use a tool with in-context RL.",
                  no_args_is_help=True, add_completion=False)
app.add_typer(database.db_app, name="db")
app.add_typer(tokens.token_app, name="token")
app.add_typer(users.user_app, name="user")
app.add_typer(models.model_app, name="models")
app.add_typer(models.model_app, name="model", hidden=True)  # the name earlier versions documented
app.add_typer(runs.run_app, name="run")
app.add_typer(exemplars.exemplars_app, name="exemplars")
app.add_typer(exports.exports_app, name="exports")

# the top-level commands, in the order `studio --help` lists them
app.command()(serve.up)
app.command()(serve.web)
app.command()(serve.worker)
app.command()(data.demo)
app.command()(models.calibrate)
app.command("doctor")(data.doctor)
app.command("eval")(evaluations.evaluate)
app.command("export")(exports.export)


@app.callback()
def main(user: str = typer.Option(None, "--user", envvar="STUDIO_USER",
                                  help="Act as this user, with its role (default: the first "
                                  "admin).")) -> None:
    """ICRL Studio: teach an LLM to use a tool with in-context RL."""
    acting_as["user"] = user
