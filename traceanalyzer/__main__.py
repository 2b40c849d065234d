"""``python -m traceanalyzer`` runs the command line."""

from traceanalyzer.cli.main import main

main()
