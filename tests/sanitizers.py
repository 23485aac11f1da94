"""What a test needs to know about the interpreter `make sanitize-python`
starts: AddressSanitizer's runtime preloaded (LD_PRELOAD) under an
uninstrumented Python."""

import os

import pytest

ASAN_PRELOADED = "libasan" in os.environ.get("LD_PRELOAD", "")

# OpenVINO's TBB opens libtbbbind with dlopen(RTLD_DEEPBIND), which the ASan
# runtime refuses by ending the process (google/sanitizers#611): the first
# compile_model() under `make sanitize-python` ended the whole test run. The
# OpenVINO backend is Python over OpenVINO, none of pyserver's C++, so
# nothing the sanitizer is there to check is lost.
skip_openvino_under_asan = pytest.mark.skipif(
    ASAN_PRELOADED, reason="OpenVINO's TBB dlopens libtbbbind with RTLD_DEEPBIND, which "
                           "AddressSanitizer's runtime refuses (it ends the process)")
