"""Safetensors headers are bounded in their values, not only in bytes: a dimension, a tensor's
elements, its rank, its offsets, the tensors of a file and the header bytes of a model have
limits no real checkpoint reaches, and a header past one is refused naming the file and the
tensor, in Check model and the local backend, for a folder on disk and a Hub repository. A
number too long to be a dimension is refused while the JSON is parsed, never multiplied (a
shape of [10**400] made an OverflowError, a 500; long products took minutes of CPU)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from jobs.backends.local.runner import LocalRunner
from jobs.machine_catalog import MachineReadings, machine_catalog
from models_catalog import hub
from models_catalog import safetensors_header as headers
from models_catalog.check import check_model
from tests.fakes.cpu_runtime import install_fake
from tests.fakes.hub import FakeHub, disk_repo
from tests.helpers import TINY_LLAMA_CONFIG
from tests.jobs.backends.local.test_local_cpu_wiring import manifest

CATALOG = machine_catalog(MachineReadings(cores=2, memory_bytes=8 * 2**30, gpus=()))


def header_bytes(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def tensor(shape: str, offsets: str = "[0, 0]") -> str:
    return f'{{"w": {{"dtype": "F32", "shape": {shape}, "data_offsets": {offsets}}}}}'


# Two tensors each under 2**50 elements, together over it.
TWO_BIG = "{" + ", ".join(f'"t{i}": {{"dtype": "F32", "shape": [{2**40}, 1023]}}' for i in (0, 1))
TWO_BIG += "}"


def counted(text: str) -> headers.Tensors:
    return headers.count([("model.safetensors", headers.parse(text.encode(), "model.safetensors"))])


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        (tensor("[" + "1" + "0" * 400 + "]"), "a number of 401 digits"),
        (tensor("[1" + "0" * 20 + ", 2]"), "a number of 21 digits"),
        (tensor(f"[{2**40 + 1}, 1]"), f"tensor 'w' has a dimension of {2**40 + 1}"),
        (tensor(f"[{2**30}, {2**30}]"), "tensor 'w' has more than 2**50 elements"),
        (tensor("[" + ", ".join(["1"] * 17) + "]"), "tensor 'w' has 17 dimensions"),
        (tensor("[2, 2]", "[16, 0]"), "tensor 'w' has data offsets 16 to 0"),
        (tensor("[2, 2]", f"[0, {2**57}]"), "tensor 'w' has data offsets 0 to"),
        (TWO_BIG, "with tensor 't1' the checkpoint's tensors hold more than 2**50"),
    ],
    ids=["400 digits", "21 digits", "dimension", "elements", "rank", "backwards", "offset", "sum"],
)  # fmt: skip
def test_values_no_checkpoint_has_are_refused_naming_the_file_and_tensor(text, phrase):
    with pytest.raises(headers.HeaderRefused) as refused:
        counted(text)
    said = str(refused.value)
    assert said.startswith("model.safetensors: ") and phrase in said, said
    assert "replace it with the checkpoint's own safetensors file" in said


def test_real_shapes_count_and_damaged_entries_count_nothing():
    found = counted(
        '{"__metadata__": {"format": "pt"}, '
        f'"embed": {{"dtype": "BF16", "shape": [{2**17}, 8192], "data_offsets": [0, {2**31}]}}, '
        '"bias": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}, '
        '"odd": {"dtype": "F32", "shape": ["x", 2]}, "list": [1, 2]}'
    )
    assert found.counts == {"BF16": 2**30, "F32": 1}
    assert found.bytes_by_dtype == {"BF16": 2**31, "F32": 4} and found.tensors == 2
    assert counted("[1, 2]").counts == {}


def test_a_file_of_more_tensors_than_any_is_refused(monkeypatch):
    monkeypatch.setattr(headers, "MAX_TENSORS_PER_FILE", 3)
    entries = ", ".join(f'"t{i}": {{"dtype": "F32", "shape": [1]}}' for i in range(5))
    with pytest.raises(headers.HeaderRefused, match="lists 5 tensors; one file holds at most 3"):
        counted("{" + entries + "}")


def test_the_hubs_own_summary_is_held_to_the_same_bounds():
    assert headers.summary_parameters({"BF16": 10}, "the Hub") == {"BF16": 10}
    for counts in ({"BF16": 2**50, "F32": 1}, {"BF16": -1}, {"BF16": "many"}):
        with pytest.raises(headers.HeaderRefused):
            headers.summary_parameters(counts, "the Hub")


# ---- a folder on disk: Check model and the local backend ----


def tiny_llama(models: Path, weights: bytes) -> Path:
    folder = models / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    (folder / "model.safetensors").write_bytes(weights)
    return folder


@pytest.mark.parametrize(
    ("shape", "phrase"),
    [("[1" + "0" * 400 + "]", "a number of 401 digits"), (f"[{2**41}]", "has a dimension of")],
    ids=["10**400", "2**41"],
)
def test_a_folders_hostile_header_is_refused_by_check_model_and_the_backend(
    cpu_machine, tmp_path, shape, phrase
):
    runtimes, models = cpu_machine
    install_fake(runtimes)
    folder = tiny_llama(models, header_bytes(tensor(shape)))
    result = check_model(f"file://{folder}", catalog=CATALOG)  # was a 500 (OverflowError)
    assert not result.can_serve
    assert f"file://{folder}: model.safetensors: " in result.verdict and phrase in result.verdict
    assert result.next_step
    runner = LocalRunner(tmp_path / "state" / "acme", template=None)
    refusals = [p.message for p in runner.check(manifest("chat", f"file://{folder}"))]
    assert len(refusals) == 1 and phrase in refusals[0], refusals
    assert "model.safetensors" in refusals[0]


def test_a_folders_headers_are_bounded_in_bytes_together(cpu_machine, monkeypatch):
    runtimes, models = cpu_machine
    install_fake(runtimes)
    folder = tiny_llama(models, header_bytes(tensor("[4, 4]")))
    (folder / "extra.safetensors").write_bytes(header_bytes(tensor("[4, 4]") + " " * 100))
    monkeypatch.setattr(headers, "MAX_TOTAL_HEADER_BYTES", 150)
    result = check_model(f"file://{folder}", catalog=CATALOG)
    assert not result.can_serve
    assert "the safetensors headers of this model add up to more than" in result.verdict


# ---- a Hub repository, its headers read with Range requests ----


def test_a_hub_repos_hostile_header_is_refused_by_check_model(tmp_path, monkeypatch):
    repo = "acme/huge-dims"
    folder = tmp_path / "hub" / repo
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    (folder / "model.safetensors").write_bytes(header_bytes(tensor("[1" + "0" * 400 + "]")))
    with FakeHub({repo: disk_repo(repo, folder)}, hub_summaries=False).serve() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        hub.clear_cache()
        try:
            result = check_model(f"hf://{repo}", catalog=CATALOG)
            assert not result.can_serve
            assert result.verdict.startswith(f"Check model could not read {repo}: ")
            assert "model.safetensors: its safetensors header holds a number of 401 digits" in (
                result.verdict
            )
            (folder / "model.safetensors").write_bytes(header_bytes(tensor(f"[{2**41}, 2]")))
            server.repos[repo]._files = None
            hub.clear_cache()
            result = check_model(f"hf://{repo}", catalog=CATALOG)
            assert "model.safetensors: tensor 'w' has a dimension of" in result.verdict
        finally:
            hub.clear_cache()
