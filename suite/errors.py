"""Bad input: the one error type (the command line turns it into exit code 2, before any work), and
the rule for names that become paths (run ids, grid names, fingerprints)."""

from __future__ import annotations

import re

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
NAME_RULE = "1-128 letters, digits, '.', '_', '-', not starting with '.' or '-'"


class UsageError(ValueError):
    """Input that cannot be used; the message names the field, the value and what is allowed."""


def check_name(field: str, value: object) -> str:
    """`value` as one path component, or UsageError naming the field, the value and the rule:
    no separator and no '..', so nothing is written outside the folder it is meant for."""
    if not isinstance(value, str) or not NAME.fullmatch(value) or value in (".", ".."):
        raise UsageError(f"{field} {value!r} (allowed: {NAME_RULE})")
    return value
