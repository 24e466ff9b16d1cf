"""The Application manifest: parse, fill defaults, validate (pure; no Django here).

`parse(doc, ctx)` is the one entry point; see MANIFEST.md for every field and rule.
"""

from .bounded import MANIFEST_LIMITS, Limits, load_bounded
from .context import (
    ADDONS,
    MODALITIES,
    ExistingApplication,
    ManifestContext,
    ModelFacts,
    ProfileFacts,
)
from .defaults import ENGINE_BUILTIN_DEFAULTS, MEMORY_DEFAULTS, MODEL_MASTER_KEYS, engine_default
from .describe import ENGINE_TITLES, is_generative, runtime_of, scaling_of
from .model_rules import context_over_limit
from .parse import DocumentError, ParseResult, load_document, model_problems, parse
from .problems import Problem
from .quantity import format_bytes, format_cpu, parse_bytes, parse_cpu, parse_quantity
from .schema import (
    API_FORMATS,
    API_PROTOCOLS,
    API_VERSION,
    CAPACITY_TYPES,
    DTYPES,
    ENGINE_FORMATS,
    ENGINE_PROTOCOLS,
    ENGINES,
    EXPOSURES,
    FORMAT_ENGINE,
    FORMATS,
    GENERATIVE_FORMATS,
    GPU_VENDORS,
    INSTALLED_RUNTIMES,
    ISOLATIONS,
    KIND,
    PARAKEET_REPO,
    SOURCE_TYPES,
    SYNC_TYPES,
    api_formats,
)
from .uri import SCHEMES, UriInfo, parse_uri, redact

__all__ = [
    "ADDONS",
    "API_FORMATS",
    "API_PROTOCOLS",
    "API_VERSION",
    "CAPACITY_TYPES",
    "DTYPES",
    "ENGINES",
    "ENGINE_BUILTIN_DEFAULTS",
    "ENGINE_FORMATS",
    "ENGINE_PROTOCOLS",
    "ENGINE_TITLES",
    "EXPOSURES",
    "FORMATS",
    "FORMAT_ENGINE",
    "GENERATIVE_FORMATS",
    "GPU_VENDORS",
    "INSTALLED_RUNTIMES",
    "ISOLATIONS",
    "KIND",
    "MANIFEST_LIMITS",
    "MEMORY_DEFAULTS",
    "MODALITIES",
    "MODEL_MASTER_KEYS",
    "PARAKEET_REPO",
    "SCHEMES",
    "SOURCE_TYPES",
    "SYNC_TYPES",
    "DocumentError",
    "ExistingApplication",
    "Limits",
    "ManifestContext",
    "ModelFacts",
    "ParseResult",
    "Problem",
    "ProfileFacts",
    "UriInfo",
    "api_formats",
    "context_over_limit",
    "engine_default",
    "format_bytes",
    "format_cpu",
    "is_generative",
    "load_bounded",
    "load_document",
    "model_problems",
    "parse",
    "parse_bytes",
    "parse_cpu",
    "parse_quantity",
    "parse_uri",
    "redact",
    "runtime_of",
    "scaling_of",
]
