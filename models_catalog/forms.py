"""Forms for model masters and for making one from a vLLM recipe."""

import shlex

import yaml
from django import forms

from console.form_fields import OrganizationScopedForm, load_yaml_field
from models_catalog.master_checks import ENV_LIMITS, MAX_ARGS_TEXT, args_problems, env_problems
from models_catalog.models import ModelMaster
from models_catalog.recipes import MAX_RECIPE_BYTES, RecipeError, parse_recipe


class ModelMasterForm(OrganizationScopedForm):
    extra_args_text = forms.CharField(
        label="Extra engine arguments",
        required=False,
        max_length=MAX_ARGS_TEXT,
        help_text="Passed to the engine as they are, e.g. --enable-prefix-caching.",
    )
    env_yaml = forms.CharField(
        label="Environment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "class": "code"}),
        help_text='Variables for the runtime, as YAML: `VLLM_USE_V1: "1"`.',
    )

    class Meta:
        model = ModelMaster
        fields = [
            "model_id",
            "runtime",
            "image",
            "dtype",
            "quantization",
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "reasoning_parser",
            "tool_call_parser",
            "max_context_tokens",
            "gpu_memory_utilization",
            "notes",
        ]
        widgets = {"notes": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            self.initial["extra_args_text"] = shlex.join(self.instance.extra_args or [])
            self.initial["env_yaml"] = (
                yaml.safe_dump(self.instance.env) if self.instance.env else ""
            )

    def clean_model_id(self):
        model_id = self.cleaned_data["model_id"].strip()
        if model_id.count("/") != 1 or " " in model_id:
            raise forms.ValidationError(
                f"{model_id!r} is not a Hugging Face repository; write it as org/name."
            )
        clash = ModelMaster.objects.filter(organization=self.organization, model_id=model_id)
        if clash.exclude(pk=self.instance.pk).exists():
            raise forms.ValidationError(f"{model_id} has a model master already; edit that one.")
        return model_id

    def clean_extra_args_text(self):
        try:
            args = shlex.split(self.cleaned_data["extra_args_text"])
        except ValueError as error:
            raise forms.ValidationError(f"Extra engine arguments: {error}.") from None
        # The rule the dry run applies to the manifest's engine.extraArgs, read the same way.
        problems = args_problems(args, "Extra engine arguments")
        if problems:
            raise forms.ValidationError(problems)
        return args

    def clean_env_yaml(self):
        env = load_yaml_field(self.cleaned_data["env_yaml"], "Environment", dict, ENV_LIMITS)
        problems = env_problems(env, "Environment")
        if problems:
            raise forms.ValidationError(problems)
        return {str(k): str(v) for k, v in env.items()}

    def save(self, commit=True):
        self.instance.extra_args = self.cleaned_data["extra_args_text"]
        self.instance.env = self.cleaned_data["env_yaml"]
        return super().save(commit)


class RecipeForm(forms.Form):
    recipe_file = forms.FileField(label="Recipe file", required=False)
    recipe_text = forms.CharField(
        label="…or paste the recipe",
        required=False,
        widget=forms.Textarea(attrs={"rows": 14, "class": "code", "spellcheck": "false"}),
    )
    variant = forms.CharField(required=False, help_text="Empty: the recipe's first variant.")
    gpu_kind = forms.ChoiceField(label="GPU kind", help_text="From the profile's machine catalog.")

    def __init__(self, *args, catalog, **kwargs):
        super().__init__(*args, **kwargs)
        self.catalog = {kind["name"]: kind for kind in catalog}
        self.fields["gpu_kind"].choices = [(name, name) for name in self.catalog]

    def clean(self):
        data = super().clean()
        upload = data.get("recipe_file")
        if upload is not None and upload.size > MAX_RECIPE_BYTES:
            # Refused before reading it: a vLLM recipe is a short YAML file.
            raise forms.ValidationError(
                f"Recipe file: is {upload.size} bytes; accepts at most {MAX_RECIPE_BYTES} bytes. "
                "A vLLM recipe is a short YAML file: check that this is one."
            )
        text = upload.read().decode("utf-8", "replace") if upload else data.get("recipe_text", "")
        if not text.strip():
            raise forms.ValidationError("Upload a recipe file or paste its YAML.")
        data["recipe_text"] = text
        try:
            data["recipe"] = parse_recipe(text)
        except RecipeError as error:
            raise forms.ValidationError(error.problems) from None
        if not data.get("variant"):
            data["variant"] = next(iter(data["recipe"].variants))
        return data
