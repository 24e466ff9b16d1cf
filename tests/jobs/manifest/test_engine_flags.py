"""Engine arguments read as vLLM's parser reads them: underscores, `=`, unambiguous prefixes;
an allowlist with value types; the same rule for a model master's arguments."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobs.manifest import parse
from jobs.manifest.engine_flags import check_engine_args, parse_extra_flags
from tests.jobs.manifest.manifest_support import COMMIT, context, m

PINNED = f"hf://BAAI/bge-m3:{COMMIT}"
ARGS = "spec.source.model.engine.extraArgs"


def refusals(args, **changes):
    result = parse(m({"uri": PINNED, "engine.extraArgs": args, **changes}), context())
    return [(p.path, p.message) for p in result.refusals]


@pytest.mark.parametrize(
    "args",
    [
        ["--enforce-eager"],
        ["--enforce_eager"],
        ["--seed=7", "--max-num-batched-tokens", "8192"],
        ["--enable-prefix", "--seed", "-1"],  # a unique prefix, a negative number as a value
        ["--no-enable-prefix-caching", "--kv-cache-dtype=fp8"],
        ['--override-generation-config={"temperature": 0.2}'],
        ["--tokenizer-mode", "mistral", "--config-format", "mistral", "--load-format=mistral"],
    ],
    ids=repr,
)
def test_supported_flags_pass(args):
    assert refusals(args) == []


@pytest.mark.parametrize(
    ("args", "index", "phrase"),
    [
        (["--trust-remote-code"], 0, "is read as --trust-remote-code, which makes the server"),
        (["--trust_remote_code"], 0, "is read as --trust-remote-code"),
        (["--trust-remote-code=true"], 0, "is read as --trust-remote-code"),
        (["--trust-remote"], 0, "is read as --trust-remote-code"),
        (["--hos", "0.0.0.0"], 0, "is read as --host, which decides how the server listens"),
        (["--port=1"], 0, "is read as --port"),
        (["--download-dir", "/tmp"], 0, "names a file or folder on the machine"),
        (["--chat-template=/etc/passwd"], 0, "is read as --chat-template"),
        (["--load-format=runai_streamer"], 0, "'runai_streamer', the value of --load-format, is"),
        (["--tokenizer", "evil/repo"], 0, "is read as --tokenizer,"),
        (["--tool-parser-plugin=/x.py"], 0, "download or run code"),
        (["--config=/etc/x.yaml"], 0, "is read as --config,"),
        (["--dtype_=half"], 0, "is not an engine flag the platform supports"),
        (["--max-model-len=4096"], 0, "repeats --max-model-len, which serving.maxContextTokens"),
        (["-tp", "2"], 0, "repeats -tp, which engine.tensorParallelSize sets"),
        (["--served-model-name=x"], 0, "which spec.name sets"),
        (["--enable"], 0, "is ambiguous: it could be --enable-auto-tool-choice"),
        (["--no-such-flag"], 0, "is not an engine flag the platform supports"),
        (["="], 0, "is not a flag and follows no flag"),
        ([""], 0, "is empty"),
        (["--"], 0, "is not a flag name"),
        (["--=x"], 0, "is not a flag name"),
        (["-"], 0, "is a short flag"),
        (["--seed"], 0, "--seed takes a value (a whole number); add it"),
        (["--seed", "--enforce-eager"], 0, "--seed takes a value"),
        (["--seed=two"], 0, "'two', the value of --seed, is not accepted"),
        (["--block-size", "7"], 1, "accepts one of 1, 8, 16"),
        (["--enforce-eager=false"], 0, "--enforce-eager takes no value"),
        (["--enforce-eager", "yes"], 1, "is not a flag and follows no flag"),
        (["--rope-scaling=[1]"], 0, "accepts a JSON object"),
        (["--response-role=a\nb"], 0, "holds a control character"),
        (["--max-num-batched-tokens 8192"], 0, "holds a space"),
        ([" --trust-remote-code"], 0, "has spaces around it"),
    ],
    ids=repr,
)
def test_refused_arguments_name_the_item_and_the_flag(args, index, phrase):
    found = refusals(args)
    assert found, args
    path, message = found[0]
    assert path == f"{ARGS}[{index}]"
    assert phrase in message


def test_too_many_arguments_are_refused():
    assert "accepts at most 64" in refusals(["--enforce-eager"] * 65)[0][1]


def test_a_runtime_of_ones_own_still_gets_no_remote_code_nor_host_paths():
    args = ["--port=9000", "--trust-remote", "x", "--download_dir=/etc", "--h", "-tp", "2"]
    found = refusals(args, **{"runtime.engine": "my-vllm"})
    assert [path for path, _ in found] == [f"{ARGS}[1]", f"{ARGS}[3]", f"{ARGS}[4]"]
    assert "could be read as" in found[2][1]


def test_the_model_masters_arguments_are_checked_where_they_are_used():
    ctx = replace(
        context(),
        engine_defaults={"extraArgs": ["--enforce-eager", "--trust-remote-code"]},
        master_name="BAAI/bge-m3",
    )
    result = parse(m({"uri": PINNED}), ctx)
    assert [p.path for p in result.refusals] == [ARGS]
    message = result.refusals[0].message
    assert message.startswith("model master BAAI/bge-m3, field extra_args[1]: ")
    assert "--trust-remote-code" in message and "Correct the model master" in message


def test_the_manifests_own_arguments_replace_the_masters():
    ctx = replace(context(), engine_defaults={"extraArgs": ["--host=0.0.0.0"]}, master_name="x")
    assert parse(m({"uri": PINNED, "engine.extraArgs": ["--seed=1"]}), ctx).ok


def test_operator_flags_are_allowed_but_never_a_refused_one():
    extra = parse_extra_flags("--crash-after=float --host=text --fail-on-start=bool")
    assert extra == {"--crash-after": "float", "--fail-on-start": "bool"}
    assert check_engine_args(["--crash-after", "0.3", "--fail-on-start"], extra_flags=extra) == []
    assert check_engine_args(["--host", "0.0.0.0"], extra_flags=extra)[0][0] == 0
    with pytest.raises(ValueError, match="--x=str"):
        parse_extra_flags("--x=str")
