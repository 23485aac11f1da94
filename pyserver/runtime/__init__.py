"""The runtime services a server hands down in its ServerContext
(kernel/context.py), below the models and backends that use them.

host_memory    the pinned host memory pool (GPU staging)
device_memory  per-GPU device memory pools
tracing        request tracing into Triton's trace file
settings       the logging and trace settings the APIs read and change
shared_memory  client-registered system and CUDA shared memory regions
custom_metrics the store of models' own metrics (pb_utils.MetricFamily)
"""
