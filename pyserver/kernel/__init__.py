"""The kernel: what every layer may use and that imports nothing of pyserver
but the generated protobuf classes.

errors   Triton's error codes, ServerError, and their HTTP and gRPC statuses
dtypes   the one datatype table (wire, config, TRITONSERVER and numpy names)
flags    parsing of boolean flag and setting values
"""
