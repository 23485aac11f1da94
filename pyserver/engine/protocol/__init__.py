"""The wire protocol, compiled: only the adapters (pyserver.frontends) use it.

http1        HTTP/1.1 request parsing (llhttp, callbacks in C)
http2        HTTP/2 and gRPC framing over nghttp2
http_infer   the HTTP infer JSON codec's common case (csrc's reader and writer)
grpc_codec   ModelInfer / ModelStreamInfer messages (csrc's protobuf codec)

Built from engine/protocol/ over csrc/protocol/ (libpyserver_protocol.so).
PYSERVER_ENGINE_DIR, when set, is searched first here too (see
pyserver/engine/__init__.py).
"""

import os as _os

if _os.environ.get("PYSERVER_ENGINE_DIR"):
    __path__.insert(0, _os.path.join(_os.environ["PYSERVER_ENGINE_DIR"], "protocol"))
