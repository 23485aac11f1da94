"""Request headers forwarded as inference request parameters, as Triton's
``--http-header-forward-pattern`` and ``--grpc-header-forward-pattern`` do:
every header whose name the pattern finds (a search, not a whole-name
match; case-insensitive unless the pattern starts with ``(?-i)``) becomes a
string parameter named as the client spelled the header. A header named as
one of Triton's reserved parameters, or starting with ``triton_``, fails the
request with INVALID_ARG.
"""

from __future__ import annotations

import re

from pyserver.kernel.errors import Code, ServerError

__all__ = ["HeaderForwarder"]

# The parameter names Triton keeps for itself (its frontends' common.h).
_RESERVED = frozenset(("sequence_id", "sequence_start", "sequence_end", "priority", "timeout",
                       "headers", "binary_data_output"))
_CASE_SENSITIVE = "(?-i)"


class HeaderForwarder:
    """``forward(headers, parameters)`` copies the matching ``(name, value)``
    pairs (bytes or str) into the request's ``parameters`` dict."""

    def __init__(self, pattern: str, flag: str = "--http-header-forward-pattern"):
        flags = re.IGNORECASE
        # RE2 (Triton's regex engine) takes a leading (?-i) as "case-sensitive
        # from here"; Python's re only has the scoped form, so it is read here.
        if pattern.startswith(_CASE_SENSITIVE):
            pattern, flags = pattern[len(_CASE_SENSITIVE):], 0
        try:
            self._search = re.compile(pattern, flags).search
        except re.error as err:
            raise ValueError(f"{flag} '{pattern}' is not a valid regular expression: "
                             f"{err}") from None
        self.pattern = pattern

    def forward(self, headers, parameters: dict) -> None:
        search = self._search
        for name, value in headers:
            if type(name) is bytes:
                name = name.decode("latin-1")
            if search(name) is None:
                continue
            if name in _RESERVED or name.startswith("triton_"):
                raise ServerError(Code.INVALID_ARG, f"Header '{name}' is reserved for Triton "
                                                    "usage and cannot be forwarded.")
            parameters[name] = value.decode("latin-1") if type(value) is bytes else value
