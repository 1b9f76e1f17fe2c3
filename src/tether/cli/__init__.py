"""The `tether` command line."""

from __future__ import annotations


def main() -> None:
    from .main import cli

    cli()
