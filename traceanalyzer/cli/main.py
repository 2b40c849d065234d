"""Root of the ``traceanalyzer`` command line.

Each command lives in its own module and is registered here. Errors the user can act on
(:class:`TraceAnalyzerError`) become one line on stderr and their exit code; nothing reaches the
user as a traceback unless ``TRACEANALYZER_DEBUG=1`` asks for it.
"""

from __future__ import annotations

import io
import os
import re
import sys
from typing import NoReturn

import click

from traceanalyzer import __version__
from traceanalyzer.errors import EXIT_BAD_INPUT, TraceAnalyzerError
from traceanalyzer.report.textsafe import one_line, visible


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="traceanalyzer")
def cli() -> None:
    """Tell why GPU code is slow, from PyTorch profiler, Nsight Systems and Perfetto traces."""


def _register() -> None:
    from traceanalyzer.cli import analyze, rules, stats

    cli.add_command(analyze.analyze)
    cli.add_command(stats.stats)
    cli.add_command(rules.rules)
    from traceanalyzer.cli import diff

    cli.add_command(diff.diff)
    from traceanalyzer.cli import batch, job

    cli.add_command(batch.batch)
    cli.add_command(job.job)
    from traceanalyzer.cli.workload import workload

    cli.add_command(workload)
    from traceanalyzer.cli.cache import cache

    cli.add_command(cache)


_register()

def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the CLI and map errors to exit codes without tracebacks."""
    try:
        cli.main(args=argv, prog_name="traceanalyzer", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        # Usage errors quote the option values given, which may come from a trace or a script.
        # (Shortened where it is shown: Click 8.5 makes the exception's message final.)
        shown = io.StringIO()
        exc.show(file=shown)
        text = shown.getvalue()
        if len(exc.message) > MAX_ERROR_CHARS:
            text = text.replace(exc.message, _one_line(exc.message))
        click.echo(visible(text, keep_newlines=True), err=True, nl=False)
        sys.exit(EXIT_BAD_INPUT if exc.exit_code == 2 else exc.exit_code)
    except TraceAnalyzerError as exc:
        click.echo(f"error: {_one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except MemoryError:
        _out_of_memory()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - last line of defence: never show a traceback
        if os.environ.get("TRACEANALYZER_DEBUG"):
            raise
        click.echo(f"internal error: {_one_line(repr(exc), INTERNAL_ERROR_CHARS)} "
                   "(set TRACEANALYZER_DEBUG=1 for details)", err=True)
        sys.exit(3)
    except BaseException as exc:  # Polars's PanicException is a BaseException
        if type(exc).__name__ != "PanicException" or os.environ.get("TRACEANALYZER_DEBUG"):
            raise
        if _RESOURCE_PANIC.search(str(exc)):  # no memory or address space for a thread
            _out_of_memory()
        click.echo(f"internal error: Polars panicked: {_one_line(str(exc))}", err=True)
        sys.exit(3)
    sys.exit(0)


#: What a Polars panic says when the process ran out of memory or address space.
_RESOURCE_PANIC = re.compile(r"spawn thread|Resource temporarily unavailable|memory allocation|"
                             r"out of memory|Cannot allocate", re.IGNORECASE)


def _out_of_memory() -> NoReturn:
    # --steps/--time-window/--ranks narrow the analysis; the whole trace is still read.
    click.echo("error: out of memory; narrow the analysis with --steps, --time-window or "
               "--ranks, or use a machine with more memory (reading a trace takes about "
               "twice its size)", err=True)
    sys.exit(EXIT_BAD_INPUT)


#: Characters of an error line at most: a message quotes values from the input (a rule's
#: field, a trace's name), which an attacker makes as long as they like.
MAX_ERROR_CHARS = 1000
#: Characters of an internal error's text at most: its repr may hold a whole report.
INTERNAL_ERROR_CHARS = 400


def _one_line(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Make untrusted text safe for one terminal line: no newlines, no control characters, at
    most ``limit`` characters (the middle cut out, so the file and the end both remain)."""
    text = one_line(text)
    if len(text) > limit:
        head = limit * 2 // 3
        text = f"{text[:head]} [...] {text[len(text) - (limit - head - 7):]}"
    return text
