"""The server layer: one protocol-neutral server over the repository.

server          Server: lifecycle, health, metadata, admission, submit and the
                completion path, statistics, repository and settings control
response_stream ResponseStream: the responses of one request, 1 or N
response_cache  the response cache (hashing in csrc) in front of a model
"""

from pyserver.server.server import Server

__all__ = ["Server"]
