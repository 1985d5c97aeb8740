"""Bad input: the one error type (the command line turns it into exit code 2, before any work), and
the rule for names that become paths (run ids, grid names, fingerprints)."""

from __future__ import annotations

import itertools
import re
import reprlib

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
NAME_RULE = "1-128 letters, digits, '.', '_', '-', not starting with '.' or '-'"


class _Shown(reprlib.Repr):
    """reprlib's cut-short repr, with a table's keys in the order they were written (reprlib sorts them)."""

    def repr_dict(self, x: dict, level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        first = itertools.islice(x.items(), self.maxdict)
        items = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}" for k, v in first]
        return "{" + ", ".join(items + (["..."] if len(x) > self.maxdict else [])) + "}"


_SHOWN = _Shown()  # a value as an error shows it: its first items, a few levels deep, never the whole
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict = 2, 6, 6, 6
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong = 120, 120, 60


def shown(value: object) -> str:
    """repr(value), cut short: a YAML grid's aliases can nest a list of 10⁹ items in a few lines, whose
    whole repr ran a reading out of memory."""
    return _SHOWN.repr(value)


class UsageError(ValueError):
    """Input that cannot be used; the message names the field, the value and what is allowed."""


def check_name(field: str, value: object) -> str:
    """`value` as one path component, or UsageError naming the field, the value and the rule:
    no separator and no '..', so nothing is written outside the folder it is meant for."""
    if not isinstance(value, str) or not NAME.fullmatch(value) or value in (".", ".."):
        raise UsageError(f"{field} {shown(value)} (allowed: {NAME_RULE})")
    return value
