""" "Call it from code": snippets for the `openai` Python client, curl and JavaScript that call one
application through ServeDeck's gateway, with its base URL and model id filled in, for what the
application does (chat, embeddings, rerank, speech to text). Pure functions of data.

The API key is never a real one: the snippets read it from $SERVEDECK_API_KEY."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from jobs.manifest.describe import is_generative
from jobs.manifest.view import dig

CHAT, EMBEDDING, RERANK, SPEECH = "chat", "embedding", "rerank", "speech"
TASK_TITLES = {
    CHAT: "chat completions",
    EMBEDDING: "embeddings",
    RERANK: "rerank",
    SPEECH: "speech to text",
}
KEY_VARIABLE = "SERVEDECK_API_KEY"

# vLLM's engine arguments that say what a model is served for, and the task each value means.
TASK_FLAGS = ("--task", "--runner", "--convert")
TASK_OF_FLAG_VALUE = {
    "embed": EMBEDDING,
    "embedding": EMBEDDING,
    "pooling": EMBEDDING,
    "score": RERANK,
    "classify": RERANK,
    "reward": RERANK,
    "transcription": SPEECH,
}
# Words in a model's repository name that say the same when no argument does.
NAME_HINTS = (
    ("rerank", RERANK),
    ("whisper", SPEECH),
    ("parakeet", SPEECH),
    ("embed", EMBEDDING),
    ("bge-", EMBEDDING),
    ("e5-", EMBEDDING),
    ("gte-", EMBEDDING),
)


@dataclass(frozen=True)
class Snippet:
    language: str  # an id for the page: python, curl, javascript
    title: str
    code: str


def _flag_task(args: Any) -> str | None:
    if not isinstance(args, list):
        return None
    words = [w for arg in args if isinstance(arg, str) for w in arg.replace("=", " ").split()]
    for flag, value in zip(words, words[1:], strict=False):
        if flag.replace("_", "-") in TASK_FLAGS and value.lower() in TASK_OF_FLAG_VALUE:
            return TASK_OF_FLAG_VALUE[value.lower()]
    return None


def application_task(manifest: Any) -> str | None:
    """What the gateway calls this application for, from its manifest; None when it does not
    speak the OpenAI API (a predictive model on KServe's V1/V2 protocol)."""
    if not is_generative(manifest):
        return None
    model = dig(manifest, "spec", "source", "model") or {}
    api = dig(model, "serving", "apiFormat")
    if api not in (None, "OpenAI"):
        return None
    if dig(model, "runtime", "engine") == "parakeet":
        return SPEECH
    flagged = _flag_task(dig(model, "engine", "extraArgs"))
    if flagged:
        return flagged
    uri = model.get("uri") if isinstance(model, dict) else None
    repo = uri.rsplit("/", 1)[-1].lower() if isinstance(uri, str) else ""
    for word, task in NAME_HINTS:
        if word in repo:
            return task
    return CHAT


def base_url(manifest: Any, console_origin: str) -> str:
    """Where clients point: the verified domain's host for Domain exposure, else the console's
    own gateway (`<origin>/v1`)."""
    access = dig(manifest, "spec", "access") or {}
    domain, name = access.get("domain"), dig(manifest, "spec", "name")
    if access.get("exposure") == "Domain" and domain and name:
        return f"https://{name}.{domain}/v1"
    return console_origin.rstrip("/") + "/v1"


def call_snippets(task: str, url: str, model: str) -> list[Snippet]:
    """Python (`openai`), curl and JavaScript (`openai` on npm, or fetch) for `task`."""
    if task not in TASK_TITLES:
        raise ValueError(f"task {task!r} has no snippets; accepts {', '.join(TASK_TITLES)}")
    return [
        Snippet("python", "Python (openai)", _python(task, url, model)),
        Snippet("curl", "curl", _curl(task, url, model)),
        Snippet("javascript", "JavaScript (openai)", _javascript(task, url, model)),
    ]


def _s(text: str) -> str:
    """A string literal that Python and JavaScript both read back as `text`."""
    return json.dumps(text)


QUESTION = "Say hello in one sentence."
DOCUMENT = "ServeDeck serves open models behind one OpenAI-compatible endpoint."
RERANK_QUERY = "What serves open models?"
RERANK_DOCUMENTS = [DOCUMENT, "Bananas are rich in potassium."]
AUDIO_FILE = "audio.wav"


def _python(task: str, url: str, model: str) -> str:
    head = (
        "import os\n\nfrom openai import OpenAI\n\n"
        f'client = OpenAI(base_url={_s(url)}, api_key=os.environ["{KEY_VARIABLE}"])\n'
    )
    if task == CHAT:
        body = (
            "response = client.chat.completions.create(\n"
            f"    model={_s(model)},\n"
            f'    messages=[{{"role": "user", "content": {_s(QUESTION)}}}],\n'
            ")\n"
            "print(response.choices[0].message.content)\n"
        )
    elif task == EMBEDDING:
        body = (
            f"response = client.embeddings.create(model={_s(model)}, input={_s(DOCUMENT)})\n"
            "print(len(response.data[0].embedding), response.usage.prompt_tokens)\n"
        )
    elif task == RERANK:
        documents = ", ".join(_s(d) for d in RERANK_DOCUMENTS)
        body = (
            "# The openai client has no rerank method: post to the route directly.\n"
            "ranked = client.post(\n"
            '    "/rerank",\n'
            f'    body={{"model": {_s(model)}, "query": {_s(RERANK_QUERY)}, '
            f'"documents": [{documents}]}},\n'
            "    cast_to=object,\n"
            ")\n"
            'for result in ranked["results"]:\n'
            '    print(result["index"], result["relevance_score"])\n'
        )
    else:
        body = (
            f'with open({_s(AUDIO_FILE)}, "rb") as audio:\n'
            f"    transcript = client.audio.transcriptions.create(model={_s(model)}, file=audio)\n"
            "print(transcript.text)\n"
        )
    return head + body


def _curl(task: str, url: str, model: str) -> str:
    auth = f'  -H "Authorization: Bearer ${KEY_VARIABLE}"'
    if task == SPEECH:
        lines = [
            f"curl {shlex.quote(url + '/audio/transcriptions')}",
            auth,
            f"  -F {shlex.quote('model=' + model)}",
            f"  -F {shlex.quote('file=@' + AUDIO_FILE)}",
        ]
        return " \\\n".join(lines) + "\n"
    route, payload = {
        CHAT: (
            "/chat/completions",
            {"model": model, "messages": [{"role": "user", "content": QUESTION}]},
        ),
        EMBEDDING: ("/embeddings", {"model": model, "input": DOCUMENT}),
        RERANK: (
            "/rerank",
            {"model": model, "query": RERANK_QUERY, "documents": RERANK_DOCUMENTS},
        ),
    }[task]
    lines = [
        f"curl {shlex.quote(url + route)}",
        auth,
        '  -H "Content-Type: application/json"',
        f"  -d {shlex.quote(json.dumps(payload))}",
    ]
    return " \\\n".join(lines) + "\n"


def _javascript(task: str, url: str, model: str) -> str:
    if task == RERANK:
        documents = ", ".join(_s(d) for d in RERANK_DOCUMENTS)
        return (
            "// The openai package has no rerank method: post to the route with fetch.\n"
            f"const response = await fetch({_s(url + '/rerank')}, {{\n"
            '  method: "POST",\n'
            "  headers: {\n"
            f"    Authorization: `Bearer ${{process.env.{KEY_VARIABLE}}}`,\n"
            '    "Content-Type": "application/json",\n'
            "  },\n"
            "  body: JSON.stringify({\n"
            f"    model: {_s(model)},\n"
            f"    query: {_s(RERANK_QUERY)},\n"
            f"    documents: [{documents}],\n"
            "  }),\n"
            "});\n"
            "const ranked = await response.json();\n"
            "for (const result of ranked.results) {\n"
            "  console.log(result.index, result.relevance_score);\n"
            "}\n"
        )
    imports = 'import OpenAI from "openai";\n'
    if task == SPEECH:
        imports = 'import fs from "node:fs";\n' + imports
    options = f"baseURL: {_s(url)}, apiKey: process.env.{KEY_VARIABLE}"
    head = f"{imports}\nconst client = new OpenAI({{ {options} }});\n"
    if task == CHAT:
        body = (
            "const response = await client.chat.completions.create({\n"
            f"  model: {_s(model)},\n"
            f'  messages: [{{ role: "user", content: {_s(QUESTION)} }}],\n'
            "});\n"
            "console.log(response.choices[0].message.content);\n"
        )
    elif task == EMBEDDING:
        body = (
            "const response = await client.embeddings.create({\n"
            f"  model: {_s(model)},\n"
            f"  input: {_s(DOCUMENT)},\n"
            "});\n"
            "console.log(response.data[0].embedding.length);\n"
        )
    else:
        body = (
            "const transcript = await client.audio.transcriptions.create({\n"
            f"  model: {_s(model)},\n"
            f"  file: fs.createReadStream({_s(AUDIO_FILE)}),\n"
            "});\n"
            "console.log(transcript.text);\n"
        )
    return head + body
