"""The one error the access verbs raise for bad input: it names the field, says what is
accepted and what to do; every surface (pages, API, command line) shows it as is."""

SHOWN = 60  # characters of a bad value quoted back, never more


def show(value: object) -> str:
    """A bad value, quoted and bounded, for an error message."""
    text = str(value)
    if len(text) > SHOWN:
        text = text[:SHOWN] + "…"
    return repr(text)


def searchable(text: object, longest: int = 300) -> bool:
    """Whether `text` may go into a query: PostgreSQL refuses NUL characters, and nothing
    longer than any stored name can match."""
    return isinstance(text, str) and "\x00" not in text and len(text) <= longest


class Invalid(Exception):
    """Bad input to a verb: `field` is the form field or API field it comes from."""

    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status

    def as_dict(self) -> dict:
        return {"path": self.field, "message": self.message, "level": "error"}
