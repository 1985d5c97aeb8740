"""Which path a call took, where an implementation changes how it runs with its inputs' shape (fixed's
blocks as one oneDNN tile from l = 128, a linearized map's passes through oneDNN from n = 4m): the code
names its path where it branches (`took`), and the sweep records what its timed calls took in the row's
notes ("path"), so that the cost model fits the leading term's rate on each path
(suite.analyse.cost, docs/CLAIMS.md, "Verdicts"). A name costs a dict assignment a call."""

from __future__ import annotations

_TAKEN: dict[str, None] = {}  # the names since `clear`, in the order first taken


def took(name: str) -> None:
    _TAKEN[name] = None


def clear() -> None:
    _TAKEN.clear()


def taken() -> str | None:
    """The paths named since `clear`, joined in the order first taken; None where none was."""
    return " + ".join(_TAKEN) if _TAKEN else None
