"""`python -m studio.cli`: the `studio` command."""

from studio.cli import app

if __name__ == "__main__":
    app()
