"""kernellab.image.contents: an image's files from its save archive, layers applied in order, times ignored."""
from __future__ import annotations

import io
import json
import tarfile

from kernellab.image import contents


def _layer(entries: list[tuple[str, bytes | None, int]]) -> bytes:
    """A layer tar: (path, data or None for a directory, mtime)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, data, mtime in entries:
            info = tarfile.TarInfo(path)
            info.mtime = mtime
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _save(layers: list[bytes]) -> io.BytesIO:
    names = [f"{i}/layer.tar" for i in range(len(layers))]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in [*zip(names, layers), ("manifest.json", json.dumps([{"Layers": names}]).encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def test_layers_apply_in_order_with_whiteouts_and_opaque_directories():
    base = _layer([("etc", None, 1), ("etc/a", b"a", 1), ("etc/b", b"b", 1), ("opt", None, 1), ("opt/x", b"x", 1)])
    top = _layer([("etc/.wh.a", b"", 2), ("etc/b", b"B", 2), ("opt/.wh..wh..opq", b"", 2), ("opt/y", b"y", 2)])
    files = contents.read_save(_save([base, top]))
    assert set(files) == {"/etc", "/etc/b", "/opt", "/opt/y"}
    assert files["/etc/b"].startswith("file 644 0:0 ") and files["/etc/b"] != contents.read_save(_save([base]))["/etc/b"]


def test_times_never_count_and_every_difference_is_listed():
    a = contents.read_save(_save([_layer([("f", b"same", 1), ("g", b"one", 1), ("h", b"h", 1)])]))
    b = contents.read_save(_save([_layer([("f", b"same", 999), ("g", b"two", 1), ("i", b"i", 1)])]))
    result = contents.compare(a, b)
    assert (result.same, result.differ, result.only_a, result.only_b) == (1, ["/g"], ["/h"], ["/i"])
    assert not result.identical and "1 differ; 1 only in A; 1 only in B" in result.summary("A", "B")
    assert contents.compare(a, a).identical
