import numpy as np
import pytest

from pyserver.kernel.errors import ServerError
from pyserver.model.classification import classify


def test_top_k_with_labels_and_triton_formatting():
    value = np.array([[0.1, 0.7, 0.2], [5.0, 1.0, 3.0]], np.float32)
    out = classify("OUT", value, 2, ["cat", "dog"], batching=True)
    assert out.shape == (2, 2)
    assert out[0].tolist() == [b"0.700000:1:dog", b"0.200000:2"]
    assert out[1].tolist() == [b"5.000000:0:cat", b"3.000000:2"]


def test_integers_and_no_batch():
    out = classify("OUT", np.array([3, 15, 7], np.int32), 5, None, batching=False)
    assert out.tolist() == [b"15:1", b"7:2", b"3:0"]


@pytest.mark.parametrize("k", [0, -1, "3", True])
def test_bad_count(k):
    with pytest.raises(ServerError):
        classify("OUT", np.zeros(3, np.float32), k, None, batching=False)
