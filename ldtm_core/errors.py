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
