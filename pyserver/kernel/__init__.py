"""The kernel: what every layer may use.

errors   Triton's error codes, ServerError, and their HTTP and gRPC statuses
dtypes   the one datatype table (wire, config, TRITONSERVER and numpy names)
flags    parsing of boolean flag and setting values
context  ServerContext: what the server hands down to models and backends
types    the request and response types (compiled in engine/types.pyx)

errors, dtypes, flags and context import nothing of pyserver but the
generated protobuf classes, so the engine may use them; types re-exports
the engine's and sits above it (docs/ARCHITECTURE.md).
"""
