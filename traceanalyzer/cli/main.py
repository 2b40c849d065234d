"""Root of the ``traceanalyzer`` command line.

Each command lives in its own module and is registered here. Errors the user can act on
(:class:`TraceAnalyzerError`) become one line on stderr and their exit code; nothing reaches the
user as a traceback unless ``TRACEANALYZER_DEBUG=1`` asks for it.
"""

from __future__ import annotations

import io
import os
import sys

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
        shown = io.StringIO()
        exc.show(file=shown)
        click.echo(visible(shown.getvalue(), keep_newlines=True), err=True, nl=False)
        sys.exit(EXIT_BAD_INPUT if exc.exit_code == 2 else exc.exit_code)
    except TraceAnalyzerError as exc:
        click.echo(f"error: {_one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except MemoryError:
        # --steps/--time-window/--ranks narrow the analysis; the whole trace is still read.
        click.echo("error: out of memory; narrow the analysis with --steps, --time-window or "
                   "--ranks, or use a machine with more memory (reading a trace takes about "
                   "twice its size)", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - last line of defence: never show a traceback
        if os.environ.get("TRACEANALYZER_DEBUG"):
            raise
        click.echo(f"internal error: {_one_line(repr(exc))} (set TRACEANALYZER_DEBUG=1 for details)",
                   err=True)
        sys.exit(3)
    sys.exit(0)


def _one_line(text: str) -> str:
    """Make untrusted text safe for one terminal line: newlines as spaces, control characters,
    bidi controls and lone surrogates as visible escapes (:func:`.textsafe.one_line`)."""
    return one_line(text)
