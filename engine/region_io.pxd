# engine/region_io.pyx: a batch's tensors into, and a worker's answers out
# of, a Python-backend worker's shared-memory regions.

cpdef list read_results(mm, encoded, dict dtypes, object error_of, object again=*)
