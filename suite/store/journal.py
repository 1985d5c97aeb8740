"""The run's journal: one JSON line per finished case, flushed and fsynced as it completes.

`kill -9` at any moment loses at most the line being written; reading reports a truncated or
corrupt line (with its line number) instead of dropping it silently, and the case it held is
simply run again on --resume. A write that fails part-way (a full disk) is cut back, so the next
line never lands glued onto a partial one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from suite.store import atomic
from suite.store.row import Row


def append_line(path: Path, data: dict) -> None:
    """`data` as one JSON line at the end of a journal (a run's, `suite ab`'s), fsynced, never through a
    link. A short write is completed; a failed one (a full disk, a signal) is cut back, so the journal
    stays whole lines and the next one never lands glued onto a partial one."""
    line = (json.dumps(data, sort_keys=True, allow_nan=True) + "\n").encode()
    fd = atomic.open_plain(Path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # O_APPEND: after the last line
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(line)
            while view:  # NB: os.write may write fewer bytes than asked (a full disk, a signal)
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(f"no progress appending to {path}")
                view = view[written:]
            os.fsync(fd)  # on disk before we go on
        except BaseException:
            os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


@dataclass
class JournalRead:
    rows: list[Row] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # human-readable, one per bad line
    size: int = 0  # bytes read: what a table built from these rows holds


class Journal:
    def __init__(self, path: Path):
        self.path = Path(path)

    def append(self, row: Row) -> None:
        append_line(self.path, row.to_json())

    def read(self) -> JournalRead:
        raw = self._bytes()
        out = JournalRead(size=len(raw))
        lines, out.problems = self._parse(raw)
        for number, data in lines:
            try:
                out.rows.append(Row.from_json(data))
            except (TypeError, ValueError) as err:
                out.problems.append(
                    f"{self.path.name} line {number} cannot be read by this version: {err}; its case will run again"
                )
        return out

    def lines(self) -> tuple[list[tuple[int, dict]], list[str]]:
        """(line number, object) of every readable line, and a problem per line that is not."""
        return self._parse(self._bytes())

    def _bytes(self) -> bytes:
        return self.path.read_bytes() if self.path.exists() else b""

    def _parse(self, data: bytes) -> tuple[list[tuple[int, dict]], list[str]]:
        found, problems = [], []
        lines = data.split(b"\n") if data else []
        last = len(lines) - 1  # after the final newline comes b"" (or a partial line)
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
                if not isinstance(data, dict) or "case_id" not in data or "status" not in data:
                    raise ValueError("not a result row")
            except (ValueError, RecursionError) as err:  # NB: RecursionError: a line nested past the stack
                kind = "truncated (interrupted while writing)" if number - 1 == last else "corrupt"
                problems.append(f"{self.path.name} line {number} is {kind}: {err}; its case will run again")
                continue
            found.append((number, data))
        return found, problems

    def repair(self) -> None:
        """Cut a partial last line so the next append starts on a line of its own (never through a link)."""
        if not os.path.lexists(self.path):
            return
        with os.fdopen(atomic.open_plain(self.path, os.O_RDWR), "r+b") as fh:
            data = fh.read()
            if data and not data.endswith(b"\n"):
                fh.truncate(data.rfind(b"\n") + 1)
                fh.flush()
                os.fsync(fh.fileno())
