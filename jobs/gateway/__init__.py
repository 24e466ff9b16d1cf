"""The OpenAI-compatible gateway (`/v1`): a plain ASGI application that authenticates API keys,
applies access policies and limits, routes by `model` (or host name) to the application's
endpoint, streams the answer, and meters every request. No database query per request."""
