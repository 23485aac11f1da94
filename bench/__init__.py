"""pyserver's benchmarks. `python -m bench` runs the side-by-side suite
(pyserver, real Triton, MLServer); the scripts beside it measure one part
each (engine_overhead, protocol, grpc_protocol, python_backend)."""
