"""Which path a call took, where an implementation changes how it runs with its inputs' shape (fixed's
blocks as one oneDNN tile from l = 128, a linearized map's passes through oneDNN from n = 4m): the code
names its path where it branches (`took`), and the sweep records what its timed calls took in the row's
notes ("path"), so that the cost model fits the leading term's rate on each path
(suite.analyse.cost, docs/CLAIMS.md, "Verdicts"). A name costs a dict assignment a call.

A step called many times a call, each call in one of several forms (a feature map compiled for its
large chunks, eager for a short last one), names its forms by the elements each took (`share`): the
call's path names the form that took the most, so a short remainder does not read as a change of path."""

from __future__ import annotations

_TAKEN: dict[str, dict[str, int] | None] = {}  # names since `clear`, in the order first taken; a step's forms


def took(name: str) -> None:
    _TAKEN[name] = None


def share(step: str, form: str, elements: int) -> None:
    """`step` ran in `form` on `elements` elements (one call of it)."""
    forms = _TAKEN.setdefault(step, {}) or {}
    forms[form] = forms.get(form, 0) + elements
    _TAKEN[step] = forms


def clear() -> None:
    _TAKEN.clear()


def taken() -> str | None:
    """The paths named since `clear`, joined in the order first taken (a step by the form that took most of
    its elements); None where none was."""
    names = [name if forms is None else f"{name} {max(forms, key=forms.get)}" for name, forms in _TAKEN.items()]
    return " + ".join(names) if names else None
