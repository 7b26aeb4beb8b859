"""The model shelf: the base models this studio can train, where each comes from, and what is
known of each (size, licence, chat template, eos, speed here, how well it reads).

Three kinds of model are on it:
- packaged models (`studio.models.base_models.PACKAGED_MODELS`): a GGUF in an installed package,
  converted and checked once; their figures come from the conversion's check;
- folders under the data dir's `models/` that someone put there (any Hugging Face folder);
- models in the local Hugging Face cache, which need no network to load.
A run config names any of them (`model:`), or another Hub id where the network allows.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from sqlmodel import select

from studio.jobs.lifecycle import RunState
from studio.models.base_models import PACKAGED_MODELS, conversion_record, models_dir
from studio.services.estimates import calibration_summary
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import DeviceCalibration


def install_command(pip_name: str) -> str:
    """The command that installs a model package into the studio's own Python, to copy."""
    return shlex.join([sys.executable, "-m", "pip", "install", pip_name])


def _speed(settings: Settings, model: str) -> str | None:
    """The latest calibration of `model` on this studio's workers, in words."""
    with session_scope(settings.sqlalchemy_url) as session:
        row = session.exec(select(DeviceCalibration).where(
            DeviceCalibration.model == model, DeviceCalibration.state == RunState.succeeded)
            .order_by(DeviceCalibration.id.desc())).first()
        if row is None:
            return None
        return (f"{row.device['name']} ({row.threads} thread(s), {row.dtype}): "
                f"{calibration_summary(row.figures)}")


def _packaged_rows(settings: Settings) -> list[dict]:
    rows = []
    for entry in PACKAGED_MODELS.values():
        record = conversion_record(models_dir(settings.resolved_data_dir) / entry.name) or {}
        check = record.get("check") or {}
        installed = entry.installed()
        rows.append({
            "name": entry.name, "title": entry.title, "source": f"package {entry.pip_name}",
            "state": "converted" if record else ("installed" if installed else "not installed"),
            "install": None if installed else install_command(entry.pip_name),
            "parameters": check.get("parameters"), "licence": entry.licence,
            "upstream": entry.upstream, "chat_template": check.get("chat_template"),
            "eos": check.get("eos"), "probe_perplexity": check.get("probe_perplexity"),
            "reader_ceiling": entry.reader_ceiling or None, "notes": list(entry.notes)})
    return rows


def _folder_row(name: str, folder: Path, source: str) -> dict:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    tokenizer = folder / "tokenizer_config.json"
    tok = json.loads(tokenizer.read_text(encoding="utf-8")) if tokenizer.is_file() else {}
    template = bool(tok.get("chat_template")) or (folder / "chat_template.jinja").is_file()
    eos = tok.get("eos_token")
    return {"name": name, "title": (config.get("architectures") or ["?"])[0], "source": source,
            "state": "ready", "install": None, "parameters": None, "licence": None,
            "upstream": None, "chat_template": template,
            "eos": eos if isinstance(eos, str) else None, "probe_perplexity": None,
            "reader_ceiling": None, "notes": []}


def _local_rows(settings: Settings) -> list[dict]:
    root = models_dir(settings.resolved_data_dir)
    if not root.is_dir():
        return []
    return [_folder_row(str(folder), folder, "folder in the data dir")
            for folder in sorted(root.iterdir())
            if folder.name not in PACKAGED_MODELS and not folder.name.startswith(".")
            and (folder / "config.json").is_file()]


def _hub_cache_rows() -> list[dict]:
    try:
        from huggingface_hub import scan_cache_dir

        repos = scan_cache_dir().repos
    except Exception:  # noqa: BLE001 - no cache (or an unreadable one) lists nothing
        return []
    rows = []
    for repo in sorted(repos, key=lambda r: r.repo_id):
        revisions = sorted(repo.revisions, key=lambda r: r.last_modified)
        if repo.repo_type == "model" and revisions and \
                (revisions[-1].snapshot_path / "config.json").is_file():
            rows.append(_folder_row(repo.repo_id, revisions[-1].snapshot_path,
                                    "Hugging Face cache"))
    return rows


def model_shelf(settings: Settings) -> list[dict]:
    """Every model on the shelf, the default first, with its speed on this studio's workers
    (its latest calibration)."""
    rows = _packaged_rows(settings) + _local_rows(settings) + _hub_cache_rows()
    for row in rows:
        row["default"] = row["name"] == settings.default_model
        row["speed"] = _speed(settings, row["name"])
    return sorted(rows, key=lambda row: not row["default"])


def shelf_words(row: dict) -> dict[str, str]:
    """A shelf row's facts in words, as `studio models list` and the Launch page show them."""
    template = {True: "chat template", False: "no chat template (layout: inline)",
                None: "chat template known after its first use"}[row["chat_template"]]
    return {
        "size": f"{row['parameters'] / 1e6:.0f}M parameters" if row["parameters"]
        else "size known after its first use",
        "licence": f"licence {row['licence'] or 'see the model card'}",
        "template": template,
        "eos": f"eos {row['eos']}" if row["eos"] else "",
        "check": f"perplexity {row['probe_perplexity']} on the check's English"
        if row["probe_perplexity"] else "",
        "speed": row["speed"] or "not measured yet (studio calibrate)",
        "reads": row["reader_ceiling"] or "not measured (bench/reader_ceiling.py)",
    }
