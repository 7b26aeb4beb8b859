"""A veRL run from start to end: check the machine, write the inputs, run `main_ppo`, ingest.

The worker's task spawns `python -m worker.engines.verl.main RUN_ID` in a new
process group (worker/training_process.py); this code runs there and starts
`python -m verl.trainer.main_ppo` in a process group of its own (Ray's local
processes share main_ppo's fate). Cancelling the run sends the launcher
SIGTERM, which stops main_ppo's group and revokes the run's token before the
launcher exits; main_ppo also gets SIGKILL if the launcher dies any other way.

Before anything heavy it checks what would otherwise fail late or hang: GPUs
and veRL (`preflight`, in main.py before the heavy imports), the studio's
/retrieve, and veRL's own validation of the generated config.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

import httpx
import yaml

from studio.api_paths import retrieve_path
from studio.jobs.devices import queue_device
from studio.method.tools import corpus_tools
from studio.models.base_models import load_tokenizer, resolve_model
from studio.services.auth import create_process_token, revoke_tokens
from studio.services.reproduce import write_bundle
from studio.services.run_folder import RunFolder
from studio.services.run_plans import load_plan
from studio.services.run_recorder import RunRecorder
from studio.services.run_validation import verl_places_problem
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Run
from worker.child_process import log_tail, stop_process_group
from worker.engines.verl.config import (
    AGENT_LOOP_TARGET,
    AGENT_NAME,
    FILE_LOGGER_ENV,
    RunFiles,
    compose,
    hydra_overrides,
)
from worker.engines.verl.dataset import PromptTooLong, write_datasets
from worker.engines.verl.export import export_latest, latest_verl_step
from worker.engines.verl.ingest import Ingestor
from worker.engines.verl.preflight import LaunchError
from worker.engines.verl.protocol import AgentSpec

POLL_SECONDS = 2.0
STOP_GRACE_SECONDS = 5.0  # within the worker's own grace before its SIGKILL
PR_SET_PDEATHSIG = 1
LOG_TAIL_LINES = 30


def check_retriever(base_url: str) -> None:
    try:
        httpx.get(f"{base_url}/healthz", timeout=10).raise_for_status()
    except httpx.HTTPError as exc:
        raise LaunchError(f"the Ray workers search through the studio's /retrieve at {base_url}, "
                          f"which does not answer ({exc}); start the web app (`studio web`) or "
                          "set verl.studio_url to its address") from None


class VerlLaunch:
    """One attempt of a run (a resumed run continues from veRL's last checkpoint).

    With `attempt` (the worker path) rows are written only while the run is
    running as that attempt; its files go to `attempt-<n>/`.
    """

    def __init__(self, settings: Settings, run_id: int, attempt: int | None = None):
        self.settings, self.run_id, self.attempt = settings, run_id, attempt
        self.plan = load_plan(settings, run_id)
        self.config = self.plan.config
        with session_scope(settings.sqlalchemy_url) as session:
            run = session.get(Run, run_id)
            self.owner_id = run.owner_id
            self.number = attempt or run.attempt
        self.recorder = RunRecorder(settings, run_id, attempt)
        self.files = RunFiles(RunFolder.of(settings, run_id).verl)
        self.token_name = f"verl-run-{run_id}"

    def prepare(self) -> list[str]:
        """Write the data set, the agent loop's files and the token; the overrides to run."""
        cfg, files, data_dir = self.config, self.files, self.settings.resolved_data_dir
        if problem := verl_places_problem(self.settings, cfg.verl):
            raise LaunchError(problem)  # this worker's settings may list fewer places
        base = (cfg.verl.studio_url or self.settings.web_url).rstrip("/")
        searches = bool(corpus_tools(cfg.tools))  # only they ask the studio's /retrieve
        if searches:
            check_retriever(base)
        files.root.mkdir(parents=True, exist_ok=True)
        self.tokenizer = load_tokenizer(cfg.model, data_dir)
        try:
            write_datasets(self.settings, self.plan, files, self.tokenizer)
        except PromptTooLong as exc:
            raise LaunchError(str(exc)) from None
        spec = AgentSpec(run_config=cfg, exemplars=self.plan.exemplars,
                         retrieve_url=f"{base}{retrieve_path(self.plan.corpus.id)}"
                         if searches else None,
                         token_file=str(files.token_file))
        files.agent_spec.write_text(spec.model_dump_json())
        files.agent_loops.write_text(yaml.safe_dump(
            [{"name": AGENT_NAME, "_target_": AGENT_LOOP_TARGET,
              "spec_path": str(files.agent_spec)}]))
        with session_scope(self.settings.sqlalchemy_url) as session:
            revoke_tokens(session, self.token_name)
            token = create_process_token(session, self.token_name, self.owner_id)
        files.token_file.touch(mode=0o600)
        files.token_file.write_text(token)
        overrides = hydra_overrides(cfg, files, model_path=str(resolve_model(cfg.model, data_dir)),
                                    metrics_log=files.metrics_log(self.number))
        try:
            compose(overrides)
        except Exception as exc:
            raise LaunchError(f"veRL rejects the generated config: {type(exc).__name__}: {exc}; "
                              "check verl.overrides and the grpo batch sizes") from None
        files.attempt_dir(self.number).mkdir(parents=True, exist_ok=True)
        (files.attempt_dir(self.number) / "overrides.txt").write_text("\n".join(overrides) + "\n")
        device = queue_device(cfg.queue)
        write_bundle(self.settings, self.run_id, self.plan,
                     device={"kind": device["kind"], "name": device["name"]},
                     determinism={"engine": "verl", "seed_overrides": [
                         o for o in overrides if o.split("=", 1)[0].endswith("seed")]})
        return overrides

    def _resume_point(self) -> None:
        """Steps after veRL's last checkpoint run again: forget what was stored of them."""
        step = latest_verl_step(self.files.checkpoints) or 0
        self.recorder.forget_steps_from(step)
        if step:
            self.recorder.event(step, "info", f"resumed from the checkpoint after step {step}",
                                {"checkpoint": str(self.files.checkpoints /
                                                   f"global_step_{step}")})

    def run(self) -> None:
        """Prepare, train, ingest, merge; `preflight` is the caller's (main.py) first step."""
        previous = signal.signal(signal.SIGTERM, _stop_requested)
        try:
            overrides = self.prepare()
            self._resume_point()
            self._train(overrides)
        finally:
            signal.signal(signal.SIGTERM, previous)
            with session_scope(self.settings.sqlalchemy_url) as session:
                revoke_tokens(session, self.token_name)
            self.files.token_file.unlink(missing_ok=True)
        export_latest(self.recorder, self.files.checkpoints)

    def _train(self, overrides: list[str]) -> None:
        log_path = self.files.process_log(self.number)
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        env.update({"PYTHONUNBUFFERED": "1", "HYDRA_FULL_ERROR": "1",
                    FILE_LOGGER_ENV: str(self.files.metrics_log(self.number))})
        ingestor = Ingestor(self.settings, self.run_id, self.config, self.files, self.tokenizer,
                            self.files.metrics_log(self.number), self.attempt)
        with open(log_path, "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
                                       cwd=self.files.attempt_dir(self.number), stdout=log,
                                       stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                       preexec_fn=_die_with_parent)
        try:
            while process.poll() is None:
                time.sleep(POLL_SECONDS)
                ingestor.poll()
            ingestor.poll(finished=True)
        finally:
            if process.poll() is None:
                stop_process_group(process, STOP_GRACE_SECONDS)
        if process.returncode != 0:
            relative = log_path.relative_to(self.settings.resolved_data_dir)
            raise LaunchError(f"veRL's main_ppo exited with code {process.returncode} (its log: "
                              f"{relative}):\n{log_tail(log_path, LOG_TAIL_LINES)}")


def _die_with_parent() -> None:
    """In main_ppo's child process: a SIGKILL when the launcher dies, however it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _stop_requested(signum, _frame) -> None:
    """The worker stops the launcher with SIGTERM (cancel): unwind, stopping veRL, revoking."""
    raise SystemExit(128 + signum)
