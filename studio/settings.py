"""Every setting of the studio, read once from `STUDIO_*` environment variables.

The defaults make an embedded studio (SQLite database, SQLite-backed Celery
broker, files) that lives in one data directory; the URLs switch it to
PostgreSQL and Redis for production.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STUDIO_", extra="ignore")

    data_dir: Path = Field(
        default=Path("studio-data"),
        description="Folder for the SQLite files, uploads, indexes, models and checkpoints.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; default: SQLite in the data directory. "
        "PostgreSQL: postgresql+psycopg://user:password@host:5432/db",
    )
    broker_url: str | None = Field(
        default=None,
        description="Celery broker; default: an embedded SQLite broker in the data directory. "
        "Redis: redis://host:6379/0",
    )
    result_backend: str | None = Field(
        default=None,
        description="Celery result backend; default: the Redis broker's server, "
        "else SQLite in the data directory.",
    )
    host: str = Field(default="127.0.0.1", description="Address the web app listens on.")
    port: int = Field(default=7860, description="Port the web app listens on.")
    trusted_proxies: str | None = Field(
        default=None,
        description="Comma-separated addresses of reverse proxies whose X-Forwarded-For the web "
        "app believes (uvicorn's forwarded_allow_ips); default: none, a client's address is "
        "its connection's, so a forged header cannot dodge the login limits.",
    )
    worker_queues: str = Field(
        default="cpu", description="Comma-separated queues the worker of `studio up` serves."
    )
    worker_concurrency: int = Field(
        default=1, ge=1, description="Jobs one worker runs at once (one per GPU on GPU nodes)."
    )
    heartbeat_seconds: float = Field(
        default=10.0, gt=0, description="How often a worker records that it is alive; a "
        "running run without a heartbeat for three periods is marked interrupted."
    )
    page_refresh_seconds: float | None = Field(
        default=None, gt=0, description="How often a shown page asks the server again while "
        "something on it moves (a run training, an evaluation, an export, an index build, "
        "exemplars being tried); default: each page's own period (Data 1 s; Exemplars, Live "
        "run and Export 2 s; Runs and Evaluate 3 s). Longer lightens a busy server, shorter "
        "follows sooner."
    )
    max_upload_bytes: int = Field(
        default=2_000_000_000, gt=0, description="Largest file an upload may be, in bytes."
    )
    max_upload_rows: int = Field(
        default=5_000_000, gt=0, description="Most rows (documents, questions) one upload may hold."
    )
    max_archive_members: int = Field(
        default=10_000, gt=0, description="Most files one uploaded .zip may hold."
    )
    max_unpacked_bytes: int = Field(
        default=2_000_000_000, gt=0, description="Most bytes one uploaded .zip may unpack to. "
        "As much as a plain upload (max_upload_bytes): storing a corpus streams, and building "
        "its index holds about 3 bytes of memory per byte of text (docs/uploads.md), so 2 GB "
        "of text takes about 7 GB, under a third of a 24 GB machine, and a small zip cannot "
        "ask for the rest."
    )
    max_record_bytes: int = Field(
        default=64 << 20, gt=0, description="Most bytes one record of an upload may hold: a "
        "JSONL line, a JSON array item, a CSV/TSV row, a Parquet cell, a paragraph read with "
        "split_on_blank_lines, an exemplar. A reader holds one record at a time, and several "
        "times its size while parsing it, so this bounds its memory (a .txt/.md file read as "
        "one document is not a record: it streams); 64 MiB is a long book in one cell."
    )
    max_exemplars_per_set: int = Field(
        default=1000, gt=0, description="Most exemplars one exemplar set may hold; a prompt "
        "shows a few, and every save validates them all."
    )
    max_exemplar_chars: int = Field(
        default=20_000, gt=0, description="Most characters one exemplar may hold (question, "
        "solution and answer together): about 5,000 tokens, a whole default prompt."
    )
    max_question_chars: int = Field(
        default=8000, gt=0, description="Most characters one question of a QA set may hold "
        "(an upload with a longer one is refused naming its line); also bounds a prompt "
        "preview's question."
    )
    max_answer_chars: int = Field(
        default=2000, gt=0, description="Most characters one gold answer of a QA set may hold "
        "(an upload with a longer one is refused naming its line)."
    )
    export_quota_bytes: int = Field(
        default=20_000_000_000, gt=0, description="Most bytes one user's exports (folders and "
        "zips) may hold on disk; an admin gives a user another with `studio user "
        "set-export-quota`."
    )
    passage_words: int = Field(
        default=100, gt=0, description="Words per passage when documents are split (wiki-18: 100)."
    )
    public_url: str | None = Field(
        default=None,
        description="The web app's address as other machines reach it (veRL runs search "
        "through its /retrieve); default http://127.0.0.1:STUDIO_PORT.",
    )
    verl_studio_urls: str | None = Field(
        default=None,
        description="Comma-separated addresses besides STUDIO_PUBLIC_URL that a run's "
        "verl.studio_url may name (the Ray workers send the run owner's token there); an "
        "admin sets it for a studio reached by several names.",
    )
    verl_ray_addresses: str | None = Field(
        default=None,
        description="Comma-separated Ray clusters (head host:port, as a run config's "
        "verl.ray_address names them) that veRL runs may be sent to, with the run owner's "
        "token; none: a run trains on its worker's own Ray only.",
    )
    model_folders: str | None = Field(
        default=None,
        description="Comma-separated folders besides the data dir's models/ and the Hugging "
        "Face cache from which a run, evaluation or calibration may read a model folder.",
    )
    default_model: str = Field(
        default="smollm2-135m-instruct",
        description="Model a new run starts from: the bundled SmolLM2, an HF id or a folder.",
    )

    @property
    def resolved_data_dir(self) -> Path:
        return self.data_dir.expanduser().resolve()

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{self.resolved_data_dir / 'studio.db'}"

    @property
    def celery_broker_url(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{self.resolved_data_dir / 'broker.db'}"

    @property
    def celery_result_backend(self) -> str:
        if self.result_backend:
            return self.result_backend
        if self.celery_broker_url.startswith(("redis://", "rediss://")):
            return self.celery_broker_url
        return f"db+sqlite:///{self.resolved_data_dir / 'celery-results.db'}"

    @property
    def web_url(self) -> str:
        return (self.public_url or f"http://127.0.0.1:{self.port}").rstrip("/")

    @property
    def studio_urls(self) -> list[str]:
        """Where a veRL run may call the studio: its own address and the admin's list."""
        return [self.web_url] + [u.rstrip("/") for u in comma_separated(self.verl_studio_urls)]

    @property
    def ray_addresses(self) -> list[str]:
        """The Ray clusters an admin lets veRL runs go to."""
        return comma_separated(self.verl_ray_addresses)

    @property
    def model_roots(self) -> list[Path]:
        """The folders a model folder may lie in: the data dir's models/, the Hugging Face
        cache and the admin's list (resolved)."""
        from huggingface_hub import constants

        from studio.models.base_models import models_dir

        listed = [Path(folder).expanduser() for folder in comma_separated(self.model_folders)]
        return [path.resolve() for path in (models_dir(self.resolved_data_dir),
                                            Path(constants.HF_HUB_CACHE), *listed)]

    @property
    def queues(self) -> list[str]:
        return comma_separated(self.worker_queues)


def comma_separated(text: str | None) -> list[str]:
    """The items of a comma-separated setting or option, without blanks."""
    return [item.strip() for item in (text or "").split(",") if item.strip()]


SECRET_QUERY_NAMES = ("pass", "pwd", "secret", "token", "key", "auth", "credential")
"""A query parameter whose name holds one of these carries a credential (password=,
sslpassword=, access_token=, api_key=...): its value is hidden."""


def redact_url(url: str) -> str:
    """The URL with every credential hidden, for logs, error messages and /healthz: the
    password of its userinfo and the value of each query parameter named like a secret."""
    try:
        netloc = urlsplit(url).netloc
    except ValueError:  # not a URL we can take apart: keep its scheme only
        return f"{url.partition('://')[0]}://***"
    base, mark, rest = url.partition("?")
    query, hash_mark, fragment = rest.partition("#")
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, has_password, _ = userinfo.partition(":")
        base = base.replace(netloc, f"{user}{':***' if has_password else ''}@{host}", 1)
    query = "&".join(_redact_parameter(pair) for pair in query.split("&"))
    return f"{base}{mark}{query}{hash_mark}{fragment}"


def _redact_parameter(pair: str) -> str:
    name, has_value, _ = pair.partition("=")
    secret = any(word in name.lower() for word in SECRET_QUERY_NAMES)
    return f"{name}=***" if secret and has_value else pair


@lru_cache
def get_settings() -> Settings:
    return Settings()
