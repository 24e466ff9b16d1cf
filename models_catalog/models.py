"""Model masters: per model, the runtime image and the engine defaults a deploy starts from."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from accesspolicies.models import Organization
from accesspolicies.scope import MemberQuerySet


def hf_repo_of(uri) -> str | None:
    """`org/name` of an hf:// URI, without its revision; None for any other URI."""
    if not isinstance(uri, str) or not uri.startswith("hf://"):
        return None
    return uri[len("hf://") :].split(":", 1)[0] or None


class ModelMasterQuerySet(MemberQuerySet):
    """Addressed by a slug: the repository with `--` for `/` (`Qwen--Qwen3-8B`)."""

    what = "model masters"

    def lookup(self, key: str) -> dict:
        return {"model_id": key.replace("--", "/")}

    def not_found(self, membership, shown: str) -> str:
        return f"No model master for {shown.replace('--', '/')} in {membership.organization}."

    def for_uri(self, organization, uri) -> "ModelMaster | None":
        """The organisation's master for the model at `uri`, else ServeDeck's recommended one
        (unsaved), else None."""
        from models_catalog.recommended import BY_MODEL_ID

        repo = hf_repo_of(uri)
        if repo is None:
            return None
        master = self.filter(organization=organization, model_id=repo).first()
        if master is None and repo in BY_MODEL_ID:
            master = ModelMaster(
                organization=organization,
                source=ModelMaster.Source.RECOMMENDED,
                **BY_MODEL_ID[repo],
            )
        return master


class ModelMaster(models.Model):
    class Runtime(models.TextChoices):
        VLLM = "vllm", "vLLM"
        PARAKEET = "parakeet", "Parakeet (speech to text)"

    class Source(models.TextChoices):
        MANUAL = "manual", "Entered by hand"
        RECOMMENDED = "recommended", "ServeDeck's recommended parameters"
        RECIPE = "recipe", "A vLLM recipe"

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="model_masters"
    )
    model_id = models.CharField(
        "Model", max_length=200, help_text="The Hugging Face repository, e.g. org/name."
    )
    runtime = models.CharField(max_length=16, choices=Runtime.choices, default=Runtime.VLLM)
    image = models.CharField(
        "Runtime image",
        max_length=300,
        blank=True,
        help_text="Container image of the runtime; empty uses the profile's runtime image.",
    )
    dtype = models.CharField(
        max_length=16,
        blank=True,
        choices=[
            ("", "auto"),
            ("bfloat16", "bfloat16"),
            ("float16", "float16"),
            ("float32", "float32"),
        ],
    )
    quantization = models.CharField(max_length=32, blank=True)
    tensor_parallel_size = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(64)]
    )
    pipeline_parallel_size = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(64)]
    )
    reasoning_parser = models.CharField(max_length=64, blank=True)
    tool_call_parser = models.CharField(max_length=64, blank=True)
    max_context_tokens = models.PositiveIntegerField(null=True, blank=True)
    gpu_memory_utilization = models.DecimalField(
        max_digits=3,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(0.1), MaxValueValidator(0.99)],
    )
    extra_args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.MANUAL)
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ModelMasterQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "model_id"], name="one_master_per_model"
            )
        ]
        ordering = ["model_id"]

    def __str__(self) -> str:
        return self.model_id

    def get_absolute_url(self) -> str:
        from django.urls import reverse

        return reverse("models_catalog:master-edit", args=[self.slug])

    @property
    def slug(self) -> str:
        """The model id in URLs: org/name is two path segments, so the slash becomes `--`."""
        return self.model_id.replace("/", "--")

    def engine_defaults(self) -> dict:
        """The manifest's engine defaults this master sets (keys the manifest core knows)."""
        values = {
            "dtype": self.dtype or None,
            "quantization": self.quantization or None,
            "reasoningParser": self.reasoning_parser or None,
            "toolCallParser": self.tool_call_parser or None,
            "gpuMemoryUtilization": (
                float(self.gpu_memory_utilization) if self.gpu_memory_utilization else None
            ),
            "extraArgs": list(self.extra_args) or None,
        }
        return {key: value for key, value in values.items() if value is not None}
