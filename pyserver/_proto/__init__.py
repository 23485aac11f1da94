"""Message classes for protos/ (model_config, grpc_service, health).

They live in a private descriptor pool built from the descriptor set the build
writes here, so they can never clash with tritonclient's own copies of the
same .proto files in one process.
"""

from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_pool = descriptor_pool.DescriptorPool()
_files = descriptor_pb2.FileDescriptorSet.FromString(
    (Path(__file__).parent / "pyserver_protos.desc").read_bytes())
for _file in _files.file:
    _pool.Add(_file)


def message_class(full_name: str):
    """The generated class for a message, e.g. 'inference.ModelConfig'."""
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(full_name))


def enum_descriptor(full_name: str):
    return _pool.FindEnumTypeByName(full_name)


pool = _pool
ModelConfig = message_class("inference.ModelConfig")
