"""The project's own exceptions. The CLI turns each into a one-line message and an exit code."""

from __future__ import annotations

#: Exit codes of the command line.
EXIT_OK = 0
EXIT_FINDINGS = 1  # findings at or above --fail-on
EXIT_BAD_INPUT = 2  # bad usage or bad input


class TraceAnalyzerError(Exception):
    """Base class: a problem the user can act on, reported without a traceback."""

    exit_code = EXIT_BAD_INPUT


class InputError(TraceAnalyzerError):
    """An input file that cannot be read as a trace. The message names the file and the problem."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class RuleError(TraceAnalyzerError):
    """A rule file or a rule parameter that is not valid."""


class UsageError(TraceAnalyzerError):
    """Options that do not make sense together."""
