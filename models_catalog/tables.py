"""The model masters table."""

import django_tables2 as tables

from models_catalog.models import ModelMaster


class ModelMasterTable(tables.Table):
    model_id = tables.Column(
        verbose_name="Model",
        linkify=lambda record: record.get_absolute_url(),
    )
    runtime = tables.Column()
    image = tables.Column(verbose_name="Image", default="profile's image")
    dtype = tables.Column(default="auto")
    tensor_parallel_size = tables.Column(verbose_name="TP", default="—")
    parsers = tables.Column(empty_values=(), orderable=False, verbose_name="Parsers")
    source = tables.Column()

    class Meta:
        model = ModelMaster
        fields = (
            "model_id",
            "runtime",
            "image",
            "dtype",
            "tensor_parallel_size",
            "parsers",
            "source",
        )
        default_columns = fields
        empty_text = (
            "No model masters yet: add one, start from the recommended set, or import a recipe."
        )
        attrs = {"class": "table"}

    def render_parsers(self, record):
        parsers = [p for p in (record.reasoning_parser, record.tool_call_parser) if p]
        return ", ".join(parsers) or "—"
