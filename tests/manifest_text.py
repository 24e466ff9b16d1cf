"""Manifest texts that tests and benches share; no Django import, so a bench that runs the console
in another process can use them too."""


def local_manifest(name: str, uri: str, max_concurrent: int | None = None) -> str:
    """The shortest manifest for a model at `uri` (file:// or hf://) on the `local` profile,
    with serving.maxConcurrentRequests when given: every other field is the defaults'."""
    serving = f"\n      serving:\n        maxConcurrentRequests: {max_concurrent}"
    return f"""\
apiVersion: servedeck.io/v1
kind: Application
spec:
  name: {name}
  profileName: local
  source:
    type: Model
    model:
      uri: {uri}{serving if max_concurrent else ""}
"""
