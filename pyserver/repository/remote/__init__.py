"""Model repositories in object storage (s3://, gs://, as://), as Triton
serves them: uri (the paths, parsed as Triton parses them), credentials
(TRITON_CLOUD_CREDENTIAL_PATH and each cloud's environment), store (what a
cloud's client offers) with s3, gcs and azure (one module per cloud, its SDK
imported only when used), and mirror (the local copy, kept in sync). The
model manager turns each remote repository into its mirror's folder; the
loader never sees a URI."""

from pyserver.repository.remote.mirror import RemoteRepository
from pyserver.repository.remote.uri import Location, is_remote, parse

__all__ = ["Location", "RemoteRepository", "is_remote", "parse"]
