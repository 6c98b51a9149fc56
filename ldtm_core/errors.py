"""Exceptions that carry a message meant for the person running the command."""


class LDTMError(Exception):
    """Base for every error the CLI reports as a clean one-line message with a non-zero exit."""


class InputError(LDTMError):
    """Bad input: a file, ticker, date or option that cannot be accepted. Nothing was written."""


class CheckpointError(LDTMError):
    """A checkpoint file is missing, truncated, corrupted, foreign or does not match the registry."""


class NotFoundError(LDTMError):
    """A ticker, model or date the command needs is not in the database."""


class ConfigError(LDTMError):
    """A setting (an environment variable, a database URL, a path) cannot be used as given."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message ("" when it has none): what a one-line reason shows."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def summary(exc: BaseException) -> str:
    """`Type: first line of the message`, or the type alone when the message is empty."""
    first = first_line(exc)
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
