"""Regenerate models_catalog/data/vllm_architectures.json from an installed vLLM (or from the
registry facts file), so the console answers Check model without vLLM or torch installed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from django.core.management.base import CommandError

from accesspolicies.cli import ServeDeckCommand
from models_catalog.architectures import (
    DATA_FILE,
    build_version_entry,
    entry_from_registry_facts,
    version_key,
)

ABOUT = (
    "Architectures each vLLM version serves (task, input modalities besides text, whether through "
    "the Transformers backend), plus the registry's previously-supported and out-of-tree maps. "
    "Regenerate with `manage.py vllm_architectures` in an environment with vLLM installed."
)
# gpu_memory_utilization defaults the reference README states; the facts file lacks them.
FACTS_DEFAULTS = {"0.13.0": 0.9, "0.33.0": 0.92}


class Command(ServeDeckCommand):
    requires_system_checks: list[str] = []  # reads and writes one data file, nothing else
    help = (
        "Add the installed vLLM's supported architectures to the data file Check model reads. "
        "vLLM must be importable; --from-registry-json builds from a facts file instead."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--from-registry-json",
            type=Path,
            help="build every version found in this registry facts file instead of importing vLLM",
        )
        parser.add_argument(
            "--output", type=Path, default=DATA_FILE, help=f"data file to update ({DATA_FILE})"
        )

    def handle(self, *args, from_registry_json: Path | None, output: Path, **options) -> None:
        if from_registry_json is not None:
            entries = self._from_facts(from_registry_json)
        else:
            entries = dict([self._from_installed_vllm()])
        data = _read(output)
        for version, entry in entries.items():
            previous = data["versions"].get(version, {})
            if "defaults" not in entry and "defaults" in previous:
                entry["defaults"] = previous["defaults"]
        data["versions"].update(entries)
        data["versions"] = dict(sorted(data["versions"].items(), key=lambda kv: version_key(kv[0])))
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(_dump(data), encoding="utf-8")
        for version, entry in entries.items():
            self.stdout.write(
                f"vLLM {version}: {len(entry['architectures'])} architectures, "
                f"{len(entry['previously_supported'])} previously supported, "
                f"{len(entry['out_of_tree'])} out of tree -> {output}"
            )

    def _from_facts(self, path: Path) -> dict[str, dict]:
        try:
            facts = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CommandError(f"--from-registry-json {path}: cannot read it ({exc})") from exc
        entries = {version: entry_from_registry_facts(facts[version]) for version in facts}
        for version, entry in entries.items():
            if version in FACTS_DEFAULTS:
                entry["defaults"] = {"gpu_memory_utilization": FACTS_DEFAULTS[version]}
        return entries

    def _from_installed_vllm(self) -> tuple[str, dict]:
        try:
            import vllm
            from vllm import ModelRegistry
            from vllm.model_executor.models import registry
        except ImportError as exc:
            raise CommandError(
                f"vLLM is not installed here ({exc}). Run this command where the vLLM version "
                "the profiles use is installed (pip install vllm==<version>), or build from "
                "a facts file with --from-registry-json."
            ) from exc
        groups = {
            name: list(value)
            for name, value in vars(registry).items()
            if name.startswith("_") and name.endswith("_MODELS") and isinstance(value, dict)
        }
        grouped = {
            arch for name, archs in groups.items() if name != "_VLLM_MODELS" for arch in archs
        }
        registered = set(ModelRegistry.get_supported_archs()) - grouped
        entry = build_version_entry(
            groups,
            previously_supported=getattr(registry, "_PREVIOUSLY_SUPPORTED_MODELS", {}),
            out_of_tree=getattr(registry, "_OOT_SUPPORTED_MODELS", {}),
            registered=registered,
            gpu_memory_utilization=_default_gpu_memory_utilization(),
        )
        return vllm.__version__, entry


def _default_gpu_memory_utilization() -> float | None:
    try:
        from vllm.config import CacheConfig

        for field in dataclasses.fields(CacheConfig):
            if field.name == "gpu_memory_utilization":
                return float(field.default)
    except (ImportError, TypeError, ValueError):
        pass
    return None


def _read(path: Path) -> dict:
    if not path.exists():
        return {"about": ABOUT, "versions": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CommandError(f"{path} is not valid JSON ({exc}); restore it from git") from exc
    data.setdefault("versions", {})
    data["about"] = ABOUT
    return data


def _dump(data: dict) -> str:
    """Indented JSON with one architecture per line, so a regeneration diffs line by line."""
    lines = ["{", f' "about": {json.dumps(data["about"])},', ' "versions": {']
    versions = list(data["versions"].items())
    for v_index, (version, entry) in enumerate(versions):
        lines.append(f"  {json.dumps(version)}: {{")
        keys = list(entry)
        for k_index, key in enumerate(keys):
            value = entry[key]
            comma = "," if k_index < len(keys) - 1 else ""
            if key != "architectures":
                lines.append(f"   {json.dumps(key)}: {json.dumps(value)}{comma}")
                continue
            lines.append('   "architectures": {')
            items = list(value.items())
            for a_index, (arch, info) in enumerate(items):
                a_comma = "," if a_index < len(items) - 1 else ""
                lines.append(f"    {json.dumps(arch)}: {json.dumps(info)}{a_comma}")
            lines.append(f"   }}{comma}")
        lines.append("  }" + ("," if v_index < len(versions) - 1 else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"
