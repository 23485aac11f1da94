"""Boolean values as tritonserver reads them: one reader, with the words each
kind of value accepts, so each caller only says what it accepts and how it
reports a bad value."""

from __future__ import annotations

import argparse

# Command-line flags (tritonserver's ParseOption<bool>, plus yes/no).
FLAG_WORDS = {"1": True, "true": True, "yes": True, "on": True,
              "0": False, "false": False, "no": False, "off": False}
# Backend config parameters (Triton's ParseBoolValue).
PARAMETER_WORDS = {"1": True, "true": True, "on": True, "0": False, "false": False, "off": False}
# --metrics-config settings.
SETTING_WORDS = {"true": True, "false": False}


def bool_word(value: str, words: dict = FLAG_WORDS) -> bool | None:
    """``value`` read as one of ``words`` (any case, surrounding blanks
    ignored); None when it is none of them."""
    return words.get(value.strip().lower())


def parse_bool(value: str) -> bool:
    """A boolean flag value (argparse's type: a bad value is an
    ArgumentTypeError, which argparse reports as is)."""
    word = bool_word(value)
    if word is None:
        raise argparse.ArgumentTypeError(f"expected a boolean, got '{value}'")
    return word
