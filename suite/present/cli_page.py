"""The command-line reference, from the argument parser itself: every command, argument and option."""

from __future__ import annotations

import argparse

from suite.present import markdown as md


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:  # NB: argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            return [(name, helps.get(name) or "", sub) for name, sub in action.choices.items()]
    return []


def _default(action: argparse.Action) -> str:
    value = action.default
    if value is None or value is False or value == [] or value is argparse.SUPPRESS or action.nargs == 0:
        return ""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    takes = "" if action.nargs == 0 else " " + (action.metavar or action.dest.upper())
    return ", ".join(action.option_strings) + takes


def _rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        choices = ", ".join(map(str, action.choices)) if action.choices else ""
        rows.append(
            [
                md.code(_name(action)),
                action.help or "",
                choices,
                _default(action),
                "yes" if action.required or not action.option_strings and action.nargs not in ("?", "*") else "",
            ]
        )
    return rows


def options(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(command, option string or positional name) for everything the parser takes: what the page must show."""
    found = [
        ("", s)
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        for s in a.option_strings
    ]
    for name, _, sub in _subcommands(parser):
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):  # `history add`: the action and its options
                found += [(name, f"{name} {inner}") for inner in action.choices]
                found += [
                    (name, s)
                    for _, _, inner in _subcommands(sub)
                    for a in inner._actions
                    for s in a.option_strings
                    if not isinstance(a, argparse._HelpAction)
                ]
                continue
            found += [(name, s) for s in action.option_strings] or [(name, action.metavar or action.dest)]
    return found


def page(parser: argparse.ArgumentParser) -> str:
    headers = ["argument", "what it does", "choices", "default", "required"]
    blocks = [
        "# Command line",
        md.GENERATED.format(command="docs"),
        f"`{parser.prog} COMMAND …`: {parser.description} Bad input (an unknown name, a value out of range, "
        "a malformed grid) exits with code 2 and a message naming the field, the value and what is allowed, "
        "before any work.",
        md.table(headers, _rows(parser)),
    ]
    blocks.append(
        md.table(
            ["command", "what it does"], [[f"[`{name}`](#{name})", text] for name, text, _ in _subcommands(parser)]
        )
    )
    for name, text, sub in _subcommands(parser):
        blocks += [f"## `{name}`", f"`{parser.prog} {name}`: {text}", md.table(headers, _rows(sub))]
        for inner, inner_text, inner_sub in _subcommands(sub):  # `history add`, `history check`, …
            blocks += [
                f"### `{name} {inner}`",
                f"`{parser.prog} {name} {inner}`: {inner_text}",
                md.table(headers, _rows(inner_sub)),
            ]
    return md.page(*blocks)
