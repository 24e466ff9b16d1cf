"""What the gateway counts of a stream as it passes events on, on vLLM's own bytes (compact
JSON, usage last): running usage per choice, events of generated text where there is none,
the usage the client did not ask for taken out and the rest of the event left as it was."""

import json

from jobs.gateway.proxy import EventFilter


def event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def chunk(index: int, delta: dict, usage: tuple[int, int] | None = None) -> dict:
    out = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}],
    }
    if usage is not None:
        prompt, completion = usage
        out["usage"] = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        }
    return out


def test_running_usage_per_choice_taken_out_for_a_client_that_did_not_ask():
    counts = EventFilter(keep_usage=False, running=True, keep_running=False, per_prompt=2)
    sent = b""
    for index in (0, 1):
        sent += counts.feed(event(chunk(index, {"role": "assistant", "content": ""}, (7, 0))))
        for made in (1, 2, 3):
            sent += counts.feed(event(chunk(index, {"content": f"w{made}"}, (7, made))))
    assert b'"usage"' not in sent
    for line in sent.split(b"\n\n"):
        if line:
            assert set(json.loads(line[6:])) == {"id", "object", "created", "model", "choices"}
    assert counts.counted() == (7, 6)  # one prompt, two choices of three tokens
    final = {
        "id": "chatcmpl-1",
        "choices": [],
        "usage": {"prompt_tokens": 7, "completion_tokens": 9},
    }
    assert counts.feed(event(final)) == b""  # the usage chunk it did not ask for
    assert counts.counted() == (7, 9)  # the runtime's own totals win


def test_without_running_usage_events_of_generated_text_are_counted():
    counts = EventFilter(keep_usage=True)
    deltas = [
        {"role": "assistant", "content": ""},
        {"content": "Hel"},
        {"reasoning_content": "thinking"},
        {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
        {"content": 'a "content": "b"'},
        {},
    ]
    for delta in deltas:
        counts.feed(event(chunk(0, delta)))
    counts.feed(event({"choices": [{"index": 1, "text": " x", "finish_reason": None}]}))
    assert counts.counted() == (None, 5)  # the prompt: no usage said it
    usage_first = {"usage": {"prompt_tokens": 4, "completion_tokens": 2}, "choices": []}
    assert counts.feed(event(usage_first)) == event(usage_first)  # asked for: kept
    assert counts.counted() == (4, 2)


def test_responses_api_events():
    counts = EventFilter()
    counts.feed(
        b'event: response.created\ndata: {"type":"response.created","response":'
        b'{"status":"in_progress","usage":null}}\n\n'
    )
    for word in ("a", "b"):
        payload = {"type": "response.output_text.delta", "delta": word}
        counts.feed(b"event: response.output_text.delta\n" + event(payload))
    assert counts.counted() == (None, 2)
    done = {
        "type": "response.completed",
        "response": {"usage": {"input_tokens": 3, "output_tokens": 2}},
    }
    counts.feed(event(done))
    assert counts.counted() == (3, 2)
