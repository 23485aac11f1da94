"""What one infer call holds of client shared memory, in either protocol:
the leases the runtime's SharedMemoryManager gave it, and the outputs to
write, released once when the call is answered."""

from __future__ import annotations

from pyserver.engine.types import InferTensor


class SharedMemoryUse:
    """The shared-memory regions one infer request uses, whatever protocol
    brought it: the leases it holds (inputs read in place, outputs to write)
    and, by output name, the lease each output is written to. The call that
    answers the request releases them once (``release``, idempotent)."""

    __slots__ = ("leases", "outputs")

    def __init__(self):
        self.leases: list = []
        self.outputs: dict = {}

    def release(self) -> None:
        leases, self.leases = self.leases, []
        self.outputs = {}
        for lease in leases:
            lease.release()

    def write(self, response) -> None:
        """Writes the outputs bound to regions there; the response keeps
        their name, datatype and shape without data, as Triton's does."""
        outputs = []
        for t in response.outputs:
            lease = self.outputs.get(t.name)
            if lease is not None and t.data is not None:
                lease.write(t.name, t.data, t.datatype)
                t = InferTensor(t.name, t.datatype, t.shape, None, t.parameters)
            outputs.append(t)
        response.outputs = outputs
