"""The ``kubectl gpu`` plugin (console script ``kubectl-gpu``); see docs/usage.md."""

from internal.cli.main import main

__all__ = ["main"]
