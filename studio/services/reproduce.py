"""A run's reproducibility bundle: what it takes to start the same run again, and the launch.

The training process writes it when an attempt starts (`runs/<id>/reproduce.json`): the
full resolved config (its seed included), the content hashes of the corpus, QA sets and
exemplar set the run's plan pinned, the versions of the packages that decide its numbers,
the device and the determinism settings it applied. The model card carries the same JSON in
a fenced block, so a card alone is enough to relaunch: `launch_from_bundle` reads a card or
a reproduce.json, refuses when the data stored here is not the data the run trained on, warns
when the packages differ, and launches the config as a new run.
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, with_config
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.run_config import RunConfigError, parse_run_config
from studio.services.access import Actor
from studio.services.errors import Conflict, InvalidInput
from studio.services.json_input import decode_json_input
from studio.services.run_folder import RunFolder
from studio.services.run_plans import DataRef, RunPlan, stored_plan
from studio.services.run_validation import resolve_plan
from studio.services.runs import create_run
from studio.settings import Settings

BUNDLE_FORMAT = "icrl-studio/reproduce/1"
# The packages whose versions a run's numbers depend on (None: not installed).
PACKAGES = ("torch", "transformers", "icrl-studio", "verl")
_FENCED_JSON = re.compile(r"^```json[^\n]*\n(.*?)\n```\s*$", re.MULTILINE | re.DOTALL)


class Pin(BaseModel):
    """A data set as the run's plan pinned it."""

    name: str
    content_hash: str


class PinnedData(BaseModel):
    corpus: Pin | None  # None: the run does not search
    train: Pin
    eval: list[Pin] = []
    exemplars: Pin | None = None


class Bundle(BaseModel):
    """What `runs/<id>/reproduce.json` holds (docs/export.md)."""

    format: Literal[BUNDLE_FORMAT]
    seed: int
    config: dict  # the full resolved run config
    data: PinnedData
    packages: dict[str, str | None]
    device: dict | None  # {kind, name, dtype}; None before an attempt started
    determinism: dict | None  # what the engine set; None before an attempt started


@with_config(ConfigDict(extra="allow"))  # a bundle file is served as written
class BundleView(TypedDict):
    """`Bundle` as `runs/<id>/reproduce.json` holds it, served as JSON."""

    format: str
    seed: int
    config: dict
    data: dict  # {corpus, train, eval, exemplars}: each {name, content_hash} (corpus: None
    # when the run does not search)
    packages: dict[str, str | None]
    device: dict | None
    determinism: dict | None


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _pin(ref: DataRef | None) -> Pin | None:
    return Pin(name=ref.name, content_hash=ref.content_hash) if ref else None


def make_bundle(plan: RunPlan, *, device: dict | None, determinism: dict | None
                ) -> BundleView:
    """The bundle of a run with this plan, trained on `device` with `determinism` (what the
    engine set); None for both when no attempt has started."""
    return Bundle(
        format=BUNDLE_FORMAT, seed=plan.config.seed, config=plan.config.model_dump(mode="json"),
        data=PinnedData(corpus=_pin(plan.corpus), train=_pin(plan.train),
                        eval=[_pin(ref) for ref in plan.eval],
                        exemplars=_pin(plan.exemplar_set)),
        packages=package_versions(), device=device, determinism=determinism,
    ).model_dump(mode="json")


def write_bundle(settings: Settings, run_id: int, plan: RunPlan, *, device: dict,
                 determinism: dict) -> BundleView:
    """Write the bundle of the attempt that starts now (a resumed attempt's replaces it)."""
    bundle = make_bundle(plan, device=device, determinism=determinism)
    path = RunFolder.of(settings, run_id).bundle
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(bundle, indent=2) + "\n")
    return bundle


def run_bundle(settings: Settings, run_id: int) -> BundleView:
    """The run's bundle as its latest attempt wrote it; before any, the plan's alone."""
    path = RunFolder.of(settings, run_id).bundle
    if path.is_file():
        return json.loads(path.read_text())
    return make_bundle(stored_plan(settings, run_id), device=None, determinism=None)


def card_block(bundle: dict) -> str:
    """The bundle as the model card's fenced JSON block. Backticks in names are written as
    JSON escapes, so that no name can end the fence."""
    text = json.dumps(bundle, indent=2, ensure_ascii=False).replace("`", "\\u0060")
    return f"```json\n{text}\n```"


def parse_bundle(text: str) -> Bundle:
    """The bundle in a reproduce.json or in a model card's fenced JSON block; InvalidInput
    when there is none, or it lacks a field."""
    for candidate in [text] + _FENCED_JSON.findall(text):
        try:
            found = decode_json_input(candidate, "card")
        except InvalidInput:  # not JSON, or JSON no bundle holds (a 5,000-digit number)
            continue
        if isinstance(found, dict) and found.get("format") == BUNDLE_FORMAT:
            try:
                return Bundle.model_validate(found)
            except ValidationError as exc:
                error = exc.errors()[0]
                field = ".".join(str(part) for part in error["loc"])
                raise InvalidInput(f"the bundle's {field}: {error['msg']}") from None
    raise InvalidInput(
        "holds no reproducibility bundle: give a model card exported by the studio (its "
        f"README.md has a fenced JSON block with \"format\": \"{BUNDLE_FORMAT}\") or a run's "
        "runs/<id>/reproduce.json")


def _checked_plan(settings: Settings, bundle: Bundle) -> RunPlan:
    """The plan the bundle's config resolves to here; Conflict naming each data set whose
    stored content is not the one the run trained on."""
    try:
        config = parse_run_config(bundle.config)
    except RunConfigError as exc:
        raise InvalidInput(f"the bundle's config: {exc}") from None
    try:
        plan = resolve_plan(settings, config)
    except InvalidInput as exc:
        raise Conflict(f"the data the run trained on is not all stored here: {exc} (with the "
                       "content whose hashes the bundle's \"data\" gives)") from None
    pinned = bundle.data
    pairs = [("data.corpus", "corpus", pinned.corpus, plan.corpus),
             ("data.train", "QA set", pinned.train, plan.train),
             ("data.exemplars", "exemplar set", pinned.exemplars, plan.exemplar_set)]
    pairs += [(f"data.eval[{i}]", "QA set", pin, ref)
              for i, (pin, ref) in enumerate(zip(pinned.eval, plan.eval, strict=False))]
    changed = [f"{field}: the {kind} '{ref.name}' stored here has other content (sha256 "
               f"{ref.content_hash[:12]}) than the run trained on ({pin.content_hash[:12]})"
               for field, kind, pin, ref in pairs
               if pin and ref and pin.content_hash != ref.content_hash]
    if changed:
        raise Conflict("; ".join(changed) + ". Upload the original content under a name of "
                       "its own and point the config at it, or launch the config (run.yaml) "
                       "as a new run on the data stored now")
    return plan


def package_warnings(bundle: Bundle) -> list[str]:
    """One warning per package whose version here is not the bundle's."""
    here = package_versions()
    return [f"packages: the run was trained with {name} {then or 'not installed'}; this studio "
            f"has {here[name] or 'not installed'}: its metrics may differ"
            for name, then in bundle.packages.items() if name in here and here[name] != then]


_PLACES_OF_THE_RELAUNCHER = ("studio_url", "ray_address")
"""`verl` keys a relaunched card may not choose: where the run's token is sent and used."""


def launch_from_bundle(settings: Settings, actor: Actor, text: str, *,
                       model: str | None = None, start: bool = True) -> dict:
    """Launch the run a model card or reproduce.json describes, on the same data (checked by
    content hash); `model` replaces its base model (a card names a local folder by its name
    only). The report's warnings name the packages whose versions differ.

    The card's `verl.studio_url` and `verl.ray_address` are dropped: the relauncher's token
    goes to the Ray workers and back to the studio, so the places are this studio's own."""
    bundle = parse_bundle(text)
    config = _checked_plan(settings, bundle).config.model_dump(mode="json")
    dropped = [f"verl.{key}: the card's {config['verl'][key]!r} is not used; the run uses "
               "this studio's own" for key in _PLACES_OF_THE_RELAUNCHER if config["verl"][key]]
    verl = {**config["verl"], **dict.fromkeys(_PLACES_OF_THE_RELAUNCHER)}
    run = create_run(settings, actor, {**config, "verl": verl, "model": model or config["model"]},
                     start=start)
    return {**run, "warnings": run["warnings"] + dropped + package_warnings(bundle)}
