"""What the manifest rules learn from Check model's answer. Check model itself takes plain
inputs (catalog, token, vLLM version); jobs.dry_run builds them from a profile."""

from jobs.manifest import GpuFit, ModelFacts, Problem
from models_catalog.check_types import CheckResult
from models_catalog.sizing import human_bytes, preference

GENERATIVE_TASKS = {"generate", "embed", "score", "transcribe"}
GPU = "spec.source.model.resources.accelerator.gpu"


def model_facts(result: CheckResult) -> ModelFacts | None:
    """What the manifest rules may check against, once the model's config has been read."""
    if result.inconclusive or result.architecture is None:
        return None
    generative = None if result.task is None else result.task in GENERATIVE_TASKS
    fits = sorted((o for o in result.options if o.accelerator == "gpu"), key=preference)
    return ModelFacts(
        generative=generative,
        modalities=frozenset(result.modalities),
        max_context_tokens=result.max_context_tokens,
        weight_bytes=result.weights_on_cpu,
        commit=result.revision,
        gpu_fits=tuple(
            GpuFit(o.gpu_kind, o.gpus_per_replica, o.nodes_per_replica) for o in fits if o.gpu_kind
        ),
    )


def layout_refusal(
    check: CheckResult | None, kind: str | None, gpus: object, nodes: object
) -> Problem | None:
    """Whether `gpus` x `kind` on `nodes` nodes holds the model, by Check model's sizing at
    the draft's context. The manifest rules cannot know this: only Check model read the model.
    """
    sized = check is not None and check.task != "predict" and bool(check.options or check.unfit)
    if not sized or not kind or not isinstance(gpus, int) or gpus < 1:
        return None
    nodes = nodes if isinstance(nodes, int) and nodes >= 1 else 1
    unfit = dict(check.unfit)
    if kind in unfit:
        return Problem(
            f"{GPU}.model",
            f"{kind!r} cannot hold this model: {unfit[kind]}. Pick a GPU kind that is not greyed "
            "out, or lower the context window.",
        )
    option = next((o for o in check.options if o.gpu_kind == kind), None)
    if option is None or gpus * nodes >= option.total_gpus:
        return None
    spread = f"{gpus} {kind} GPU{'s' if gpus > 1 else ''}"
    if nodes > 1:
        spread += f" on each of {nodes} nodes"
    return Problem(
        f"{GPU}.countPerReplica",
        f"{gpus} is too few: {spread} cannot hold the model at "
        f"{check.context_tokens} tokens of context; the smallest that can is "
        f"{option.describe()} ({human_bytes(option.needed_per_gpu_bytes)} per GPU, each "
        f"{kind} has {human_bytes(option.gpu_memory_bytes)}). Set GPUs per replica to "
        f"{option.gpus_per_replica}"
        + (f" and nodes to {option.nodes_per_replica}" if option.nodes_per_replica > 1 else "")
        + ", pick a larger GPU kind, or lower the context window.",
    )
