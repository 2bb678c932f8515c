"""What the installers wrote down: pip's ``<dist-info>/RECORD`` (each file's sha256, urlsafe base64) and
``direct_url.json`` (the source folder), conda's ``conda-meta/<name>-<version>-<build>.json`` ("paths_data": each
file's sha256, or sha256_in_prefix where the installer rewrote it; "url" and "channel": where the package came
from). Every file is read as one that may be anything (a FIFO, /dev/zero, a truncated copy)."""

from __future__ import annotations

import base64
import contextlib
import csv
import glob
import hashlib
import io
import json
import mmap
import os
import re
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

from .._libfile import NotARegularFile, open_regular
from .records import CUDATOOLKIT

PACKAGE = "torch-segops"
_RECORD_LIMIT = 64 << 20  # a record lists a package's files: a few MB for the largest packages


def read_regular(path: str, limit: int = _RECORD_LIMIT) -> bytes:
    """The contents of the regular file ``path`` of at most ``limit`` bytes; OSError (NotARegularFile) otherwise."""
    fd, size = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        if size > limit:
            raise NotARegularFile(f"{path} has {size} bytes, more than the {limit} expected")
        return fh.read(limit + 1)[:limit]


def find_in_file(path: str, start: bytes, end: bytes, limit: int = 4096) -> bytes | None:
    """The bytes from the first ``start`` to the next ``end`` (included, at most ``limit`` bytes) in a regular file
    (mapped, not read: a CUDA build's library is hundreds of MB); None when absent."""
    fd, size = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        if not size:
            return None
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
            i = m.find(start)
            j = m.find(end, i, i + limit) if i >= 0 else -1
            return m[i : j + len(end)] if j >= 0 else None


def file_sha256(path: str) -> str:
    fd, _ = open_regular(path)
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def json_or_none(read):
    """``json.loads(read())``, or None where reading fails (unreadable, not a regular file: a FIFO, /dev/zero) or the
    text is not JSON (a library or torch printing)."""
    try:
        return json.loads(read())
    except (OSError, ValueError):
        return None


def conda_meta(prefix: str, name: str):
    """(file, record) of each record of the package ``name`` (not ``name``-dev & co.) in ``prefix``/conda-meta."""
    for file in sorted(glob.glob(os.path.join(glob.escape(prefix), "conda-meta", name + "-*.json"))):
        rec = json_or_none(lambda: read_regular(file))
        if isinstance(rec, dict) and rec.get("name") == name:
            yield file, rec


def find_cudatoolkit(conda_prefix: str | None) -> str | None:
    """The version of the `cudatoolkit` package recorded in conda_prefix/conda-meta, or None."""
    records = conda_meta(conda_prefix, CUDATOOLKIT) if conda_prefix else ()
    return next((str(rec.get("version") or "unknown version") for _, rec in records), None)


def conda_record(path: str) -> dict | None:
    """The torch-segops record in the conda-meta/ of the environment holding ``path`` that lists it, with the channel
    the package came from: its "url" less subdir and file name, else "channel"."""
    path = Path(os.path.abspath(path))
    prefix = next((p for p in path.parents if os.path.isdir(p / "conda-meta")), None)
    rel = prefix and path.relative_to(prefix).as_posix()
    for name, rec in conda_meta(str(prefix), PACKAGE) if prefix else ():
        entry = next((e for e in (rec.get("paths_data") or {}).get("paths") or [] if isinstance(e, dict) and e.get("_path") == rel), None)
        if entry is None and rel not in (rec.get("files") or []):
            continue
        entry = entry or {}  # listed in "files" only (an old conda): no hash
        sha = entry.get("sha256_in_prefix") or (None if entry.get("prefix_placeholder") else entry.get("sha256"))
        url, channel, subdir = (str(rec.get(k) or "") for k in ("url", "channel", "subdir"))
        channel = (url.rsplit("/", 2)[0] if url.count("/") >= 3 else channel.rstrip("/").removesuffix("/" + subdir)
                   if channel and subdir else channel or None)
        return {"kind": "conda", "record": name, "sha256": sha, "channel": channel}
    return None


def pip_record(path: str) -> dict | None:
    """The torch_segops RECORD (pip, uv, ...) in a folder above ``path`` that lists it, with the source folder
    of a local install (direct_url.json)."""
    folder = os.path.dirname(os.path.abspath(path))
    for _ in range(3):  # site-packages/torch_segops/_C.so
        folder = os.path.dirname(folder)
        rel = os.path.relpath(os.path.abspath(path), folder).replace(os.sep, "/")
        for dist in sorted(glob.glob(os.path.join(glob.escape(folder), "torch_segops-*.dist-info"))):
            try:
                rows = list(csv.reader(io.StringIO(read_regular(os.path.join(dist, "RECORD")).decode())))
            except (OSError, ValueError):
                continue
            digest = next((r[1] for r in rows if len(r) > 1 and r[0] == rel), None)
            if digest is None:
                continue
            sha = None
            with contextlib.suppress(ValueError):  # not base64
                sha = base64.urlsafe_b64decode(digest[7:] + "==").hex() if digest.startswith("sha256=") else None
            url = json_or_none(lambda: read_regular(os.path.join(dist, "direct_url.json")))
            url, folder_install = (url, isinstance(url.get("dir_info"), dict)) if isinstance(url, dict) else ({}, False)
            local = url2pathname(urlparse(url["url"]).path) if folder_install and str(url.get("url")).startswith("file:") else None
            return {"kind": "pip", "record": os.path.join(dist, "RECORD"), "sha256": sha,
                    "source": local if local and os.path.isdir(local) else None,
                    "editable": bool(local and url["dir_info"].get("editable"))}
    return None


def local_channel() -> str:
    """The channel tools/main.sh builds (``<tools.conda_tools.cache_dir()>/output/channel``; a test checks they agree)."""
    cache = os.environ.get("TORCH_SEGOPS_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torch-segops")
    return Path(cache).expanduser().resolve().joinpath("output", "channel").as_uri()


def channel_builds(channel: str) -> list[str]:
    """The builds (e.g. "cpu_h1a2b3c4_0") of torch-segops packages in the folder of a file:// channel."""
    folder = url2pathname(urlparse(channel).path)
    names = (os.path.basename(p) for p in glob.glob(os.path.join(glob.escape(folder), "*", PACKAGE + "-*")))
    return sorted(m.group(1) for m in (re.fullmatch(r"torch-segops-[^-]+-(.+)\.(?:conda|tar\.bz2)", n) for n in names) if m)
