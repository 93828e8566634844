"""Host attacks on a real GPU: a `load_inline` build planted for another candidate, and a
`setsid` child holding host memory past the cap while the worker holds a CUDA context."""

import shutil

import pytest
import torch
import torch.utils.cpp_extension

import kscience.evaluate.judge.session as session_module
from kscience.evaluate.result import CRASHED, OK

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

_EXT = """
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="kscience_victim_ext", cpp_sources='''
#include <torch/extension.h>
torch::Tensor softmax(torch::Tensor x) {{ {body} }}
''', functions=["softmax"])
"""

_HONEST_BODY = "return torch::softmax(x.to(torch::kFloat), -1).to(torch::kBFloat16);"
_PLANTED_BODY = "return torch::zeros_like(x);"

# After building, the planter dates every file of its build far in the future, so that ninja
# would call the build up to date for any later sources written under the same name.
_FUTURE = """
import os

_root = os.environ["TORCH_EXTENSIONS_DIR"]
for _dir, _, _files in os.walk(_root):
    for _f in _files:
        os.utime(os.path.join(_dir, _f), (4102444800, 4102444800))  # 2100-01-01
"""


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="needs a C++ compiler")
def test_a_planted_load_inline_build_does_not_reach_another_candidate(judge, monkeypatch, tmp_path):
    monkeypatch.setenv("KSCIENCE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(session_module.LIMITS, "import", (600.0, 600.0))  # two cold builds
    planter = judge(_EXT.format(body=_PLANTED_BODY), _FUTURE, """
        def custom_kernel(data):
            return honest(data[0])
        """, shapes="tests")
    assert planter.status == OK, planter.message
    victim = judge(_EXT.format(body=_HONEST_BODY), """
        def custom_kernel(data):
            return _ext.softmax(data[0].contiguous())
        """)
    assert victim.status == OK, f"{victim.message}\n{victim.stderr_tail[-2000:]}"


def test_a_setsid_child_cannot_hold_host_memory_past_the_cap(judge, monkeypatch):
    monkeypatch.setenv("KSCIENCE_WORKER_RSS_BYTES", str(4 * 2**30))
    result = judge("""
        import os
        import time

        torch.zeros(1, device="cuda")  # the worker holds a CUDA context, as a real candidate does

        def start_hog():
            r, w = os.pipe()
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    hog = bytearray(b"\\x01") * (6 * 2**30)
                    os.write(w, b"x")
                    time.sleep(120)
                os._exit(0)
            os.close(w)
            os.read(r, 1)

        start_hog()

        def custom_kernel(data):
            time.sleep(0.3)
            return honest(data[0])
        """, shapes="tests")
    assert result.status == CRASHED, result.message
    assert "memory cap" in result.message
