"""Protocol frontends (HTTP/REST, gRPC) that translate wire requests into core objects."""
