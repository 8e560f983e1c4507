"""JAX's CUDA plugin, linked by LLD, pruned for this GPU and run: the same results as the original.

JAX builds its CUDA plugin with clang and LLD (``.comment``: "Linker: LLD"), which leaves the
``__fatbinwrap`` pointer slots 0 and keeps the container's address only in the RELATIVE
relocation's addend. Every library of the installed plugin that holds device code is pruned for
this GPU into a copy of the plugin's packages, put first on ``sys.path`` of a child JAX process;
the child's ``/proc/self/maps`` shows that the copies were loaded, and what it computes (random
numbers by the plugin's threefry kernel, LU with its pivots-to-permutation kernel, QR, an
eigensolver, sorts and top-k by XLA's own kernels) equals what the original plugin computes: bit
for bit where two runs of the original agree, to rounding where they do not.
Skipped where JAX's CUDA plugin is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fatbinkit
from fatbinkit.formats import elf
from fatbinkit.formats.arch import Arch
from fatbinkit.runtime import Device
from fatbinkit.slim import prune

np = pytest.importorskip("numpy")  # on the GPU machine with JAX

PLUGINS = [(f"jax_cuda{v}_plugin", f"jax_plugins.xla_cuda{v}") for v in (13, 12)]

CHILD = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_threefry_gpu_kernel_lowering", True)
assert jax.devices()[0].platform == "gpu", jax.devices()
key = jax.random.key(7)
x = jax.random.normal(key, (512, 512), dtype=jnp.float32)
lu, piv, perm = jax.lax.linalg.lu(x)
q, r = jnp.linalg.qr(x)
w = jnp.linalg.eigvalsh(x @ x.T)
s = jnp.sort(x.ravel())
a = jnp.argsort(x[:, 0])
tv, ti = jax.lax.top_k(x[0], 17)
np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in dict(
    normal=x, lu=lu, piv=piv, perm=perm, q=q, r=r, eig=w, sort=s, argsort=a, topv=tv,
    topi=ti).items()})
maps = open("/proc/self/maps").read()
print(json.dumps(sorted({l.split()[-1] for l in maps.splitlines()
                         if l.endswith(".so") and ("jax_cuda" in l or "xla_cuda" in l)})))
"""


def _plugin() -> tuple[Path, Path] | None:
    for ext, pjrt in PLUGINS:
        a, b = importlib.util.find_spec(ext), importlib.util.find_spec(pjrt)
        if a and b and a.origin and b.origin:
            return Path(a.origin).parent, Path(b.origin).parent
    return None


def _lld(path: Path) -> bool:
    comment = elf.find_section(path.read_bytes(), ".comment")
    return comment is not None and b"Linker: LLD" in comment


def _child(site: Path | None, out: Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """The plugin libraries the child loaded, and what it computed."""
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", CHILD, str(out)], capture_output=True, text=True,
                         env=env, check=False, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    with np.load(out) as saved:
        return json.loads(run.stdout.strip().splitlines()[-1]), dict(saved)


def test_pruned_lld_jax_plugin_computes_as_the_original(gpu: Device, tmp_path: Path) -> None:
    found = _plugin()
    if found is None:
        pytest.skip("JAX's CUDA plugin (jax_cuda13_plugin / jax_cuda12_plugin) is not installed")
    ext, pjrt = found
    site = tmp_path / "site"
    shutil.copytree(ext, site / ext.name)
    shutil.copytree(pjrt, site / "jax_plugins" / pjrt.name)
    dev = Arch(gpu.arch.number)
    pruned = []
    for lib in sorted(site.rglob("*.so")):
        if not fatbinkit.open(lib).codes:
            continue
        assert _lld(lib), f"{lib.name} is not LLD-linked"
        before = lib.stat().st_size
        out = tmp_path / "pruned.so"
        prune(lib, out, [dev])
        after = out.stat().st_size
        assert after < before, lib.name
        was, now = (fatbinkit.open(p).check([dev]).verdicts[0] for p in (lib, out))
        assert (now.status, now.strict_ok) == (was.status, was.strict_ok), lib.name
        os.replace(out, lib)
        pruned.append((lib.relative_to(site).as_posix(), before, after, now.status))
    assert pruned, "no library of the plugin holds device code"
    print("\npruned for", dev.sm, json.dumps(pruned))
    loaded, original = _child(None, tmp_path / "original.npz")
    _, again = _child(None, tmp_path / "again.npz")
    loaded_slim, slim = _child(site, tmp_path / "pruned.npz")
    assert all(str(site) in p for p in loaded_slim)
    assert not any(str(site) in p for p in loaded)
    print("pruned loaded", loaded_slim)
    # what two runs of the original plugin compute alike must be computed alike by the pruned
    # one, bit for bit; the rest (cuSOLVER's eigensolver may differ run to run) to rounding
    same = sorted(k for k in original if np.array_equal(original[k], again[k]))
    print("bit-reproducible across runs of the original:", same)
    for key in original:
        if key in same:
            assert np.array_equal(slim[key], original[key]), key
        else:
            np.testing.assert_allclose(slim[key], original[key], rtol=1e-5,
                                       atol=1e-5 * float(np.abs(original[key]).max()))
