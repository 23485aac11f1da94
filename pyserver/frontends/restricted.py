"""The one grammar of tritonserver's restricted-feature flags,
``--http-restricted-api`` and ``--grpc-restricted-protocol``:
``<group>[,<group>...]:<key>=<value>``, the flag repeatable, a group named at
most once (command_line_parser.cc; the texts are Triton's)."""

from __future__ import annotations


def parse_restricted(values, option: str, noun: str, groups, key_prefix: str = "") -> dict:
    """``values`` (the flag's arguments) -> {group: (header key, header value)}.
    ``option`` names the flag and ``noun`` its groups ("api", "protocol") in
    the errors; ``groups`` are the names it accepts; ``key_prefix`` goes in
    front of each key (gRPC's headers are ``triton-grpc-protocol-<key>``).
    Raises ValueError."""
    result: dict = {}
    for arg in values or ():
        delim_name = arg.find(":")
        delim_setting = arg.find("=", delim_name + 1) if delim_name >= 0 else -1
        error = f"{option} option format is '<config name>:<setting>=<value>'. Got {arg}"
        if delim_name < 0 or delim_setting < 0:
            raise ValueError(error)
        names = arg[:delim_name]
        key = arg[delim_name + 1:delim_setting]
        value = arg[delim_setting + 1:]
        if not names or not key or not value:
            raise ValueError(error)
        for group in names.split(","):
            if group not in groups:
                raise ValueError(f"unknown restricted {noun} '{group}' ")
            if group in result:
                raise ValueError(f"restricted {noun} '{group}' can not be specified in multiple "
                                 "config groups")
            result[group] = (key_prefix + key, value)
    return result
