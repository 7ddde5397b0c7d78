"""A strict, bounded ZIP reader over a :class:`FileBuffer` (torch.save archives and .npz).

Only what the two formats use: stored (method 0) and deflated (method 8) records, ZIP64, no
encryption, no multi-disk archives. Every offset and size is checked against the file before
it is used. Stored records are returned as zero-copy views of the file buffer; deflated ones
are inflated incrementally into a buffer of exactly the size the central directory declares,
which is first checked against deflate's maximum ratio, so a zip bomb is refused before
anything large is allocated, and the CRC-32 of inflated data is verified.
"""

from __future__ import annotations

import zlib

import numpy as np

from modulekit.checkpoint._common import fail

__all__ = ["ZipEntry", "read_central_directory", "record_bytes", "record_array", "is_zip"]

_EOCD_SIG = b"PK\x05\x06"
_EOCD64_LOC_SIG = b"PK\x06\x07"
_EOCD64_SIG = b"PK\x06\x06"
_CDH_SIG = b"PK\x01\x02"
_LFH_SIG = b"PK\x03\x04"
# Deflate cannot expand more than about 1032:1; anything claiming more is a lie (or a bomb).
_MAX_DEFLATE_RATIO = 1032
_CHUNK = 1 << 22


def is_zip(buf):
    head = buf.bytes_at(0, min(4, buf.size), "the magic number")
    return head in (_LFH_SIG, _EOCD_SIG)


class ZipEntry:
    __slots__ = ("name", "method", "crc", "csize", "usize", "data_start")

    def __init__(self, name, method, crc, csize, usize, data_start):
        self.name = name
        self.method = method
        self.crc = crc
        self.csize = csize
        self.usize = usize
        self.data_start = data_start


def _find_eocd(buf):
    path = buf.path
    lo = max(0, buf.size - 22 - 0xFFFF)
    tail = buf.bytes_at(lo, buf.size - lo, "the end of the archive")
    pos = len(tail)
    while True:
        pos = tail.rfind(_EOCD_SIG, 0, pos)
        if pos < 0:
            raise fail(path, "end of file", "no ZIP end-of-central-directory record")
        if pos + 22 <= len(tail):
            (comment_len,) = buf.unpack("<H", lo + pos + 20, "the ZIP comment length")
            if lo + pos + 22 + comment_len == buf.size:
                return lo + pos


def _check_end_record(path, at, disk, cd_disk, n_here, n_total):
    """The end record of a single-disk archive with at least one record, or CheckpointError."""
    if disk != 0 or cd_disk != 0 or n_here != n_total:
        raise fail(path, f"offset {at}",
                   f"bogus end-of-central-directory record (disk {disk}, directory on disk "
                   f"{cd_disk}, {n_here} of {n_total} entries on this disk): not a "
                   "single-disk archive")
    if n_total == 0:
        raise fail(path, f"offset {at}", "the ZIP archive holds no records: not a checkpoint")


def read_central_directory(buf):
    """Return ``{name: ZipEntry}`` for the archive in ``buf``, validated."""
    path = buf.path
    eocd = _find_eocd(buf)
    disk, cd_disk, n_here, n_total, cd_size, cd_offset = buf.unpack(
        "<HHHHII", eocd + 4, "the end-of-central-directory record")
    _check_end_record(path, eocd, disk, cd_disk, n_here, n_total)
    cd_limit = eocd
    loc = eocd - 20
    has_zip64 = loc >= 0 and buf.bytes_at(loc, 4, "the ZIP64 locator") == _EOCD64_LOC_SIG
    needs_zip64 = n_total == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF
    if needs_zip64 and not has_zip64:
        raise fail(path, f"offset {eocd}", "ZIP64 fields without a ZIP64 locator")
    if has_zip64:  # (torch writes the ZIP64 records whether or not it needs them)
        (d, eocd64, nd) = buf.unpack("<IQI", loc + 4, "the ZIP64 locator")
        if d != 0 or nd != 1:
            raise fail(path, f"offset {loc}", f"ZIP64 locator names disk {d} of {nd} (a "
                                              "multi-disk archive is not a checkpoint)")
        if eocd64 + 56 > loc or buf.bytes_at(eocd64, 4, "the ZIP64 record") != _EOCD64_SIG:
            raise fail(path, f"offset {loc}", f"bad ZIP64 end record offset {eocd64}")
        cd_limit = eocd64
        if needs_zip64:
            (_sz, _vm, _vn, disk, cd_disk, n_here, n_total, cd_size, cd_offset) = buf.unpack(
                "<QHHIIQQQQ", eocd64 + 4, "the ZIP64 end record")
            _check_end_record(path, eocd64, disk, cd_disk, n_here, n_total)
    if cd_offset + cd_size != cd_limit:
        what = "overlaps" if cd_offset + cd_size > cd_limit else "does not end at"
        raise fail(path, f"offset {eocd}",
                   f"central directory [{cd_offset}, {cd_offset + cd_size}) {what} the end "
                   f"records at {cd_limit}")
    if n_total * 46 > cd_size:
        raise fail(path, f"offset {eocd}",
                   f"{n_total} entries cannot fit in a central directory of {cd_size} bytes")
    entries = {}
    pos = cd_offset
    end = cd_offset + cd_size
    for i in range(n_total):
        where = f"central directory entry {i} at offset {pos}"
        if pos + 46 > end or buf.bytes_at(pos, 4, where) != _CDH_SIG:
            raise fail(path, where, "bad central directory entry signature")
        (_vm, _vn, flags, method, _t, _dt, crc, csize, usize, nlen, elen, clen, _disk, _ia, _ea,
         lho) = buf.unpack("<HHHHHHIIIHHHHHII", pos + 4, where)
        if pos + 46 + nlen + elen + clen > end:
            raise fail(path, where, "entry runs past the end of the central directory")
        raw_name = buf.bytes_at(pos + 46, nlen, where)
        try:
            name = raw_name.decode("utf-8" if flags & 0x800 else "cp437")
        except UnicodeDecodeError:
            raise fail(path, where, "record name is not valid UTF-8") from None
        where = f"record {name!r}"
        if usize == 0xFFFFFFFF or csize == 0xFFFFFFFF or lho == 0xFFFFFFFF:
            usize, csize, lho = _zip64_extra(buf, pos + 46 + nlen, elen, usize, csize, lho,
                                             where)
        if flags & 0x1:
            raise fail(path, where, "encrypted records are not supported")
        if method not in (0, 8):
            raise fail(path, where, f"compression method {method} is not supported "
                                    "(stored or deflated only)")
        if method == 0 and csize != usize:
            raise fail(path, where, f"stored record with compressed size {csize} != size {usize}")
        if lho + 30 > cd_offset or buf.bytes_at(lho, 4, where) != _LFH_SIG:
            raise fail(path, where, f"no local header at offset {lho}")
        (l_nlen, l_elen) = buf.unpack("<HH", lho + 26, where)
        if buf.bytes_at(lho + 30, l_nlen, where) != raw_name:
            raise fail(path, where, f"local header at offset {lho} names another record")
        data_start = lho + 30 + l_nlen + l_elen
        if data_start + csize > cd_offset:
            raise fail(path, where,
                       f"data [{data_start}, {data_start + csize}) runs into the central "
                       f"directory at {cd_offset}")
        if name in entries:
            raise fail(path, where, "duplicate record name")
        entries[name] = ZipEntry(name, method, crc, csize, usize, data_start)
        pos += 46 + nlen + elen + clen
    return entries


def _zip64_extra(buf, start, length, usize, csize, lho, where):
    pos = start
    end = start + length
    while pos + 4 <= end:
        (tag, size) = buf.unpack("<HH", pos, where)
        if pos + 4 + size > end:
            break
        if tag == 0x0001:
            fields = pos + 4
            vals = []
            for present in (usize == 0xFFFFFFFF, csize == 0xFFFFFFFF, lho == 0xFFFFFFFF):
                if present:
                    if fields + 8 > pos + 4 + size:
                        raise fail(buf.path, where, "truncated ZIP64 extra field")
                    vals.append(buf.unpack("<Q", fields, where)[0])
                    fields += 8
                else:
                    vals.append(None)
            return (
                usize if vals[0] is None else vals[0],
                csize if vals[1] is None else vals[1],
                lho if vals[2] is None else vals[2],
            )
        pos += 4 + size
    raise fail(buf.path, where, "ZIP64 sizes without a ZIP64 extra field")


def record_array(buf, entry, check_crc=False):
    """The record's bytes as a 1-D uint8 ndarray: a view of the file when stored."""
    path = buf.path
    where = f"record {entry.name!r}"
    if entry.method == 0:
        out = buf.u8[entry.data_start:entry.data_start + entry.csize]
        if check_crc and zlib.crc32(out) != entry.crc:
            raise fail(path, where, "CRC-32 mismatch (corrupt record)")
        return out
    if entry.usize > _MAX_DEFLATE_RATIO * entry.csize + 1024:
        raise fail(path, where,
                   f"claims to inflate {entry.csize} bytes to {entry.usize}, beyond deflate's "
                   "maximum ratio (zip bomb?)")
    out = np.empty(entry.usize, dtype=np.uint8)
    d = zlib.decompressobj(-15)
    filled = 0
    crc = 0
    src = entry.data_start
    src_end = entry.data_start + entry.csize
    try:
        while not d.eof:
            if d.unconsumed_tail:
                chunk = d.decompress(d.unconsumed_tail, _CHUNK)
            elif src < src_end:
                step = min(_CHUNK, src_end - src)
                chunk = d.decompress(buf.data[src:src + step], _CHUNK)
                src += step
            else:
                chunk = d.decompress(b"", _CHUNK)
                if not chunk:
                    raise fail(path, where, "deflate stream is truncated")
            if chunk:
                if filled + len(chunk) > entry.usize:
                    raise fail(path, where,
                               f"inflates to more than the declared {entry.usize} bytes")
                out[filled:filled + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
                crc = zlib.crc32(chunk, crc)
                filled += len(chunk)
    except zlib.error as exc:
        raise fail(path, where, f"corrupt deflate data: {exc}") from None
    if filled != entry.usize:
        raise fail(path, where, f"inflates to {filled} bytes, the directory declares "
                                f"{entry.usize}")
    if crc != entry.crc:
        raise fail(path, where, "CRC-32 mismatch (corrupt record)")
    return out


def record_bytes(buf, entry):
    """The whole record as ``bytes`` (for small records: pickles, text), CRC checked."""
    return record_array(buf, entry, check_crc=True).tobytes()
