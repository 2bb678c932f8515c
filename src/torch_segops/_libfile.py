"""The compiled library as a file, for both the loader (``_library.py``) and the doctor: where it is, whether
it can be handed to the dynamic loader at all, and the words for a torch whose import fails. Imports no torch.

A path can name a FIFO (opening it to read waits for a writer: the doctor hung), a device (``/dev/zero``
never ends: MemoryError), a directory, or a truncated copy of a shared object (the dynamic loader maps its
segments past the end of the file and the process dies of SIGBUS on first touch). Files are opened without
blocking and read only when they are regular files; a shared object is checked against its own ELF headers
(a few KB read) before anything loads it. Corruption that keeps the size (zeroed or random bytes) passes
this check: only the doctor finds it, by the sha256 of the install record (docs/environments.md, "The doctor").
"""

from __future__ import annotations

import importlib.util
import os
import stat
import struct
import sys

LIBRARY_ENV = "TORCH_SEGOPS_LIBRARY"
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
# The first bytes of a shared library where it is not ELF: Mach-O 64-bit (either byte order), PE ("MZ").
_MAGIC = {"darwin": (b"\xcf\xfa\xed\xfe", b"\xfe\xed\xfa\xcf"), "win32": (b"MZ",)}


class NotARegularFile(OSError):
    """The path exists but is not a regular file (or is larger than the reader accepts)."""


def library_path() -> str:
    """Path of the compiled library (``$TORCH_SEGOPS_LIBRARY`` overrides the search)."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        return override
    # find_spec also resolves scikit-build-core editable installs, where the .so lives outside src/.
    spec = importlib.util.find_spec("torch_segops._C")
    if spec is not None and spec.origin and os.path.exists(spec.origin):
        return spec.origin
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_C.so")


def open_regular(path: str) -> tuple[int, int]:
    """(file descriptor, size) of a regular file, opened without blocking on a FIFO; NotARegularFile otherwise."""
    # O_NONBLOCK and O_CLOEXEC: POSIX only; O_BINARY: Windows only (no text-mode translation)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
            raise NotARegularFile(f"{path} is {kind}, not a regular file")
        return fd, st.st_size
    except BaseException:
        os.close(fd)
        raise


def _opened(path: str):
    """(binary file object, size) of the regular file ``path``, or (None, why it cannot be opened)."""
    try:
        fd, size = open_regular(path)
    except OSError as e:
        return None, str(e) if isinstance(e, NotARegularFile) else f"{path} cannot be opened: {e.strerror or e}"
    return os.fdopen(fd, "rb"), size


def elf_problem(path: str) -> str | None:
    """Why ``path`` cannot be a complete ELF shared object, or None when its headers, program headers,
    loaded segments and section headers all lie inside the file. Reads a few KB; never loads it."""
    fh, size = _opened(path)
    if fh is None:
        return size
    with fh:
        ident = fh.read(64)
        if ident[:4] != b"\x7fELF":
            return f"{path} is not a shared object (an ELF file starts with 7f 45 4c 46, this one with {ident[:4].hex(' ') or 'nothing'})"
        if len(ident) < 16 or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            return f"{path} is a damaged ELF file (bad class or byte order in its first 16 bytes)"
        wide, order = ident[4] == 2, "<" if ident[5] == 1 else ">"
        header = order + ("HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH")
        if len(ident) < 16 + struct.calcsize(header):
            return f"{path} is truncated: {size} bytes, shorter than an ELF header"
        (e_type, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _) = struct.unpack_from(header, ident, 16)
        if e_type != 3:  # ET_DYN
            return f"{path} is an ELF file but not a shared object (e_type {e_type})"
        entry = order + ("IIQQQQQQ" if wide else "IIIIIIII")
        if phnum and phentsize < struct.calcsize(entry):
            return f"{path} is a damaged ELF file (program header entries of {phentsize} bytes)"
        ends = [phoff + phentsize * phnum, shoff + shentsize * shnum if shoff else 0]
        if ends[0] <= size:
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
            for k in range(phnum):
                fields = struct.unpack_from(entry, table, k * phentsize)
                p_type, p_offset, p_filesz = (fields[0], fields[2], fields[5]) if wide else (fields[0], fields[1], fields[4])
                if p_type == 1:  # PT_LOAD: mapped from the file
                    ends.append(p_offset + p_filesz)
    needed = max(ends)
    if needed > size:
        return (f"{path} is truncated: it has {size} bytes, but its ELF headers describe {needed} "
                "(an interrupted copy, download or install)")
    return None


def library_file_problem(path: str, platform: str = sys.platform) -> str | None:
    """Why ``path`` cannot be this platform's shared library, or None: ``elf_problem`` (every check) on
    ELF platforms; on macOS and Windows a regular file that starts with the Mach-O or PE magic (their
    headers are not checked further)."""
    magic = _MAGIC.get(platform)
    if magic is None:
        return elf_problem(path)
    fh, size = _opened(path)
    if fh is None:
        return size
    with fh:
        head = fh.read(4)
    if not any(head.startswith(m) for m in magic):
        kind = "a Mach-O" if platform == "darwin" else "a PE (DLL)"
        return f"{path} is not {kind} shared object (it starts with {head.hex(' ') or 'nothing'}, {size} bytes)"
    return None


def describe_torch_import_error(e: BaseException) -> str:
    """What `import torch` raising ``e`` means, in the words both the doctor and ``import torch_segops`` use."""
    if isinstance(e, SystemExit):
        return (f"`import torch` raised SystemExit({e.code!r}): torch's import exits the process instead of raising "
                "an ImportError (a broken torch installation)")
    return f"{type(e).__name__}: {e}".strip()
