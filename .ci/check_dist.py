"""Check an sdist and the wheel built from it: ``python .ci/check_dist.py SDIST WHEEL``.

The sdist must hold every file git tracks under ``src/`` (sources, declarations, stubs, every
kernel and header, ``py.typed``) and the license, README and build files, and no build output.
The wheel must hold one extension per ``.pyx``, every ``.pyi`` stub and ``py.typed``, the
license, PEP 639 license metadata and the package's version; its extensions carry no debug
information or symbol table (a release build), and the wheel stays small.
"""

import email.parser
import os
import struct
import subprocess
import sys
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_WHEEL_BYTES = 4 << 20  # about 1 MB today; 13 MB of .so files with debug information


def elf_sections(data: bytes) -> list:
    """Section names of a 64-bit little-endian ELF image."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not an ELF64 LE file"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def header(i):
        return struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
    strtab_off = header(shstrndx)[4]
    names = []
    for i in range(shnum):
        name_off = header(i)[0]
        end = data.index(b"\0", strtab_off + name_off)
        names.append(data[strtab_off + name_off : end].decode())
    return names


def check_sdist(path: str) -> None:
    with tarfile.open(path) as tar:
        names = tar.getnames()
    top = names[0].split("/")[0]
    have = {n[len(top) + 1 :] for n in names if "/" in n}
    tracked = subprocess.run(
        ["git", "ls-files", "src"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    want = set(tracked) | {"LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in"}
    missing = sorted(want - have)
    assert not missing, f"sdist lacks {len(missing)} source files: {missing[:10]}"
    outputs = sorted(n for n in have if n.endswith((".so", ".pyd", ".pyc", ".html")) or (
        n.startswith("src/modulekit/_ext/") and n.count("/") == 3 and n.endswith(".c")))
    assert not outputs, f"sdist ships build outputs: {outputs[:10]}"
    print(f"sdist {os.path.basename(path)}: {len(have)} entries, all {len(want)} sources")


def check_wheel(path: str) -> None:
    size = os.path.getsize(path)
    assert size < MAX_WHEEL_BYTES, f"wheel is {size} bytes (> {MAX_WHEEL_BYTES})"
    with zipfile.ZipFile(path) as whl:
        names = whl.namelist()
        pyx = sorted(
            os.path.basename(n)[: -len(".pyx")]
            for n in subprocess.run(
                ["git", "ls-files", "src/modulekit/_ext/*.pyx"], cwd=ROOT, check=True,
                capture_output=True, text=True,
            ).stdout.split()
        )
        for ext in pyx:
            so = [n for n in names if n.startswith(f"modulekit/_ext/{ext}.") and n.endswith(".so")]
            assert len(so) == 1, f"wheel: extension {ext}: {so}"
            sections = elf_sections(whl.read(so[0]))
            unstripped = [s for s in sections if s.startswith(".debug") or s == ".symtab"]
            assert not unstripped, f"{so[0]} is not stripped: {unstripped}"
            assert f"modulekit/_ext/{ext}.pyi" in names, f"wheel lacks the {ext}.pyi stub"
        assert "modulekit/py.typed" in names, "wheel lacks modulekit/py.typed"
        assert not [n for n in names if n.endswith((".c", ".pyx"))], "wheel ships sources"
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(whl.read(meta_name).decode())
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "no LICENSE"
        assert meta["License-Expression"] == "BSD-3-Clause", meta["License-Expression"]
        assert meta["License"] is None, "deprecated License field present"
        init = whl.read("modulekit/__init__.py").decode()
        assert f'__version__ = "{meta["Version"]}"' in init, "version is not single-sourced"
    py_tag = os.path.basename(path).split("-")[-3]
    assert py_tag != "py3", f"pure-Python wheel {os.path.basename(path)}: no extensions"
    print(f"wheel {os.path.basename(path)}: {size / 1e6:.2f} MB, {len(pyx)} stripped "
          f"extensions, stubs, py.typed, License-Expression {meta['License-Expression']}")


if __name__ == "__main__":
    check_sdist(sys.argv[1])
    check_wheel(sys.argv[2])
