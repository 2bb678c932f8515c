"""x86-64: no function the CPU kernel objects beyond the baseline (avx2, avx512) share with the rest of _C.so is
kept as AVX code (tools/cpu_object_code.py: a shared inline function kept from the avx2 object would make a CPU
without AVX2 die with SIGILL in the common code). Checked on the pip build's folder (build/<tag>, which
tools/bootstrap.sh makes), and the check's control: a library linked with the avx2 object first, which keeps
the avx2 copy of a shared inline function, fails it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tools import cpu_object_code as coc

pytestmark = pytest.mark.skipif(os.uname().machine != "x86_64", reason="the x86-64 kernel objects")

SHARED_HEADER = """#pragma once  // noipa: kept out of line, uncloned, as the library's shared functions are
#include <vector>
[[gnu::noipa]] inline void fill_ramp(std::vector<float>& v) { for (std::size_t i = 0; i < v.size(); ++i) v[i] = 2.0f * float(i) + 1.0f; }
"""
COMMON = '#include "ramp.h"\nfloat common_sum(int n) { std::vector<float> v(n); fill_ramp(v); return v[n - 1]; }\n'
AVX2 = ('#include "ramp.h"\nnamespace isa_avx2 { float kernel(int n) { std::vector<float> v(n); fill_ramp(v);'
        ' float s = 0; for (float x : v) s += x; return s; } }\n')


def test_shared_functions_are_kept_as_baseline_code():
    try:
        build_dir = coc.default_build_dir()
    except SystemExit as e:
        pytest.fail(f"{e}")
    bad, shared, beyond = coc.check(build_dir)
    assert coc.kernel_objects(build_dir), "no kernel object beyond the baseline in the pip build"
    assert beyond > 1000, f"only {beyond} functions with AVX code: are the avx2/avx512 objects in _C.so?"
    assert shared > 0, "the objects share no function (std::vector, torch::stable::Tensor): the check read nothing"
    assert not bad, f"shared functions kept as code beyond the baseline: {sorted(bad)[:10]}"


@pytest.mark.parametrize("avx2_first", [False, True])
def test_the_check_sees_a_shared_function_kept_from_the_avx2_object(tmp_path, avx2_first):
    if shutil.which("g++") is None:
        pytest.skip("g++ not found")
    (tmp_path / "ramp.h").write_text(SHARED_HEADER)
    objs = {}
    for name, text, flags in (("common", COMMON, []), ("avx2", AVX2, ["-mavx2", "-mfma"])):
        src = tmp_path / f"{name}.cpp"
        src.write_text(text)
        folder = tmp_path / "CMakeFiles" / ("torch_segops_C.dir" if name == "common" else "torch_segops_cpu_avx2.dir")
        folder.mkdir(parents=True, exist_ok=True)
        objs[name] = folder / f"{name}.cpp.o"
        subprocess.run(["g++", "-O3", "-fPIC", "-fvisibility-inlines-hidden", *flags, "-c", str(src), "-o", str(objs[name])],
                       check=True)
    order = [objs["avx2"], objs["common"]] if avx2_first else [objs["common"], objs["avx2"]]
    subprocess.run(["g++", "-shared", "-o", str(tmp_path / "_C.so"), *map(str, order)], check=True)
    bad, shared, _ = coc.check(tmp_path)
    assert shared >= 1, "fill_ramp is a weak function of the avx2 object"
    if avx2_first:
        assert any("fill_ramp" in name for name in bad), bad
    else:
        assert not bad, bad
