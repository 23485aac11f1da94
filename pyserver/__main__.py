"""`python -m pyserver`, and the `pyserver` and `tritonserver` commands."""

import sys


def main() -> int:
    # Before the server's modules load (see runtime/allocator.py): the
    # process may re-execute itself here with jemalloc preloaded.
    from pyserver.runtime.allocator import reexec_with_preferred
    try:
        reexec_with_preferred()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from pyserver.cli import main as serve
    return serve()


if __name__ == "__main__":
    sys.exit(main())
