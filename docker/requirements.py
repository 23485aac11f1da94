"""Prints the requirements of pyserver's image, one a line, from pyproject.toml.

The image installs these in a layer of their own before pyserver's sources
are copied in, so a change to the code does not reinstall the dependencies.

    python3 requirements.py pyproject.toml [--extras openai,s3] \
        [--replace onnxruntime=onnxruntime-gpu] [--add cupy-cuda12x]

--extras adds [project.optional-dependencies] groups; --replace swaps one
requirement (by its distribution name, specifiers and all) for another;
--add appends requirements. Standard library only (the build stage's bare
interpreter runs it).
"""

from __future__ import annotations

import argparse
import re
import sys

import tomllib

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _name(requirement: str) -> str:
    match = _NAME.match(requirement)
    if not match:
        raise SystemExit(f"requirements.py: cannot read a name from {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def requirements(project: dict, extras: list[str], replace: dict[str, str], add: list[str]) -> list[str]:
    optional = project.get("optional-dependencies", {})
    wanted = list(project.get("dependencies", []))
    for extra in extras:
        if extra not in optional:
            known = ", ".join(sorted(optional)) or "none"
            raise SystemExit(f"requirements.py: no extra {extra!r} in pyproject.toml (known: {known})")
        wanted += optional[extra]
    out: list[str] = []
    for requirement in wanted + add:
        requirement = replace.get(_name(requirement), requirement)
        if requirement and requirement not in out:
            out.append(requirement)
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pyproject")
    p.add_argument("--extras", default="", help="comma-separated optional-dependency groups")
    p.add_argument("--replace", action="append", default=[], metavar="NAME=REQUIREMENT")
    p.add_argument("--add", action="append", default=[], metavar="REQUIREMENT")
    args = p.parse_args(argv)
    with open(args.pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    replace = {}
    for item in args.replace:
        name, sep, requirement = item.partition("=")
        if not sep:
            raise SystemExit(f"requirements.py: --replace wants NAME=REQUIREMENT, not {item!r}")
        replace[_name(name)] = requirement.strip()
    extras = [e.strip() for e in args.extras.split(",") if e.strip()]
    add = [a for item in args.add for a in item.split() if a]
    print("\n".join(requirements(project, extras, replace, add)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
