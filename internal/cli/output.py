"""Printing: rich tables on a terminal, plain aligned columns otherwise (pipes,
files, tests), and ``-o json|yaml`` documents for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import IO, Any

import yaml

FORMATS = ("table", "json", "yaml")


class Printer:
    def __init__(self, fmt: str = "table", stream: IO[str] | None = None,
                 rich: bool | None = None) -> None:
        self.fmt = fmt
        self.stream = stream if stream is not None else sys.stdout
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.rich = isatty if rich is None else rich
        self._console: Any = None

    @property
    def structured(self) -> bool:
        return self.fmt in ("json", "yaml")

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False, soft_wrap=False)
        return self._console

    # ------------------------------------------------------------------ documents
    def data(self, obj: Any) -> None:
        if self.fmt == "json":
            self.stream.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
        else:
            self.stream.write(yaml.safe_dump(obj, sort_keys=False, default_flow_style=False))
        self.stream.flush()

    # ------------------------------------------------------------------ human output
    def line(self, text: str = "", style: str | None = None) -> None:
        if self.rich:
            self.console.print(text, style=style, markup=False)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def heading(self, text: str) -> None:
        if self.rich:
            self.console.print(text, style="bold", markup=False)
        else:
            self.stream.write(text + "\n")

    def fields(self, pairs: Sequence[tuple[str, Any]]) -> None:
        """``Key:  value`` lines, aligned (kubectl describe style)."""
        width = max((len(k) for k, _ in pairs), default=0) + 1
        for k, v in pairs:
            text = "-" if v is None or v == "" else str(v)
            lines = text.splitlines() or [""]
            self.line(f"{k + ':':<{width}}  {lines[0]}")
            for rest in lines[1:]:
                self.line(f"{'':<{width}}  {rest}")

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]],
              title: str | None = None, styles: Sequence[str | None] | None = None) -> None:
        cells = [["-" if c is None or c == "" else str(c) for c in r] for r in rows]
        if self.rich:
            from rich.table import Table

            t = Table(title=title, title_justify="left", header_style="bold",
                      show_edge=False, pad_edge=False, box=None)
            for c in columns:
                t.add_column(c, overflow="fold")
            for i, r in enumerate(cells):
                t.add_row(*r, style=(styles[i] if styles else None))
            self.console.print(t)
            return
        if title:
            self.stream.write(title + "\n")
        widths = [len(c) for c in columns]
        for r in cells:
            for i, c in enumerate(r):
                first = c.splitlines()[0] if c else ""
                widths[i] = max(widths[i], len(first))
        fmt_row = lambda r: "   ".join(  # noqa: E731
            f"{c:<{widths[i]}}" for i, c in enumerate(r)).rstrip()
        self.stream.write(fmt_row([c.upper() for c in columns]) + "\n")
        for r in cells:
            self.stream.write(fmt_row([c.splitlines()[0] if c else "" for c in r]) + "\n")
        self.stream.flush()


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """kubectl's short age: 45s, 12m, 3h, 5d."""
    if not timestamp:
        return "-"
    try:
        t = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    secs = int(((now or datetime.now(UTC)) - t).total_seconds())
    if secs < 0:
        secs = 0
    if secs < 120:
        return f"{secs}s"
    if secs < 7200:
        return f"{secs // 60}m"
    if secs < 172800:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"
