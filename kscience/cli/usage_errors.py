"""A mistyped command line answered where the mistake is: a flag the subcommand does not take gets that
subcommand's usage (not the top level's) and the nearest flags it does take; an unknown command gets the
nearest command. argparse itself reports a subcommand's unknown flags from the top-level parser, which
names neither the subcommand nor what was meant."""

from __future__ import annotations

import argparse
import difflib

NEAREST_CUTOFF = 0.6  # difflib's similarity a suggestion needs


def nearest(word: str, choices, n: int = 2) -> list[str]:
    return difflib.get_close_matches(word, list(choices), n=n, cutoff=NEAREST_CUTOFF)


def did_you_mean(word: str, choices) -> str:
    """" (did you mean --eval-timeout?)", or "" where nothing is near."""
    close = nearest(word, choices)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


class Parser(argparse.ArgumentParser):
    """The top-level parser: an unknown command's error names the nearest commands."""

    def error(self, message: str):
        commands = next((a.choices for a in self._actions if isinstance(a, argparse._SubParsersAction)), {})
        if message.startswith("argument COMMAND: invalid choice: "):
            word = message.split("'")[1] if "'" in message else ""
            message += did_you_mean(word, commands)
        super().error(message)


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def refuse_unrecognized(parser: argparse.ArgumentParser, command: str, extras: list[str]) -> None:
    """Exit with the subcommand's usage and a line naming what it did not recognise, each flag with the
    nearest ones the subcommand takes (exit code 2, as argparse's own errors)."""
    sub = subcommand(parser, command)
    flags = [flag for action in sub._actions for flag in action.option_strings]
    named = [f"{word}{did_you_mean(word.split('=')[0], flags)}" if word.startswith("-") else word
             for word in extras]
    sub.error(f"unrecognized arguments: {' '.join(named)}")
