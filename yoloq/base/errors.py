"""User-facing errors: one line naming the field and the fix, exit code 2."""

from __future__ import annotations


class UserError(Exception):
    """An error in what the user gave us. Rendered as one line, never a traceback."""

    exit_code = 2

    def __init__(self, field: str, problem: str, fix: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(self.line())

    def line(self) -> str:
        text = f"{self.field}: {self.problem}"
        return one_line(f"{text} (fix: {self.fix})" if self.fix else text)


def one_line(text: str) -> str:
    """Control characters (a newline inside a user's value) written as escapes: the line stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class AlreadyDone(UserError):
    """Nothing to do: what the command asks for is already so (cancelling a job that has ended).
    One line like any error, but exit code 1, as `kill` of a process that has already exited."""

    exit_code = 1


class SpecError(UserError):
    """The job spec itself is invalid."""


class DatasetError(UserError):
    """The dataset the spec points at is invalid."""


class ModelError(UserError):
    """The model YAML name or checkpoint is not usable."""


class StoreUnavailable(RuntimeError):
    """A configured checkpoint store or tracking location cannot be loaded (transient or not:
    the caller retries; it never switches to another location)."""


class ResumeMismatch(RuntimeError):
    """The checkpoint to resume from is not the one the caller's plan says (nothing trained)."""
