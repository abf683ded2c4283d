"""Atomic, exclusive replacement of a file or directory (every writer of :mod:`dqkm.data`).

A store or model is written under a hidden temporary name beside its target,
``.<name>.tmp-<id>``, and then put in place in one step:

* a new target (``overwrite=False``) is claimed exclusively: a file by
  ``os.link`` (fails if the name exists), a directory by ``renameat2`` with
  ``RENAME_NOREPLACE`` (or, where the C library lacks it, by ``os.mkdir`` of
  the target followed by a rename onto that empty directory).  Of several
  writers racing for one name exactly one succeeds; the others get
  :class:`TargetExistsError`.
* an existing target (``overwrite=True``) is replaced by ``os.replace`` (a
  file) or swapped with ``renameat2(RENAME_EXCHANGE)`` (a directory), so that
  a reader opening the path finds the old or the new content, never none.
  Without ``renameat2`` the old directory is moved aside first (a reader may
  then find no store for a moment).  Only a Zarr store or a ``.npz`` archive
  holding a dqkm model header is replaced: any other file or directory is
  refused with :class:`~dqkm.exceptions.StoreError`.

The temporary name is removed on any exception, ``KeyboardInterrupt``
included, also when a second interrupt lands during that removal.
A ``file://`` URL is a local path and gets the guarantees above.  Other
fsspec filesystems (``memory://``, object stores such as ``s3://``) have no
atomic rename; there the write goes under the temporary name too and is then
committed by :func:`commit_remote`:

* a single file (``.npz``) is put in one write of one object: a reader finds
  the old or the new file.  ``overwrite=False`` uses the filesystem's
  exclusive create (``pipe_file(..., mode="create")``), which is atomic where
  the backend makes it so (the memory filesystem within one process, object
  stores with conditional writes) and a check-then-write elsewhere;
* a Zarr store is moved file by file with its root ``zarr.json`` as the commit
  point (created exclusively for a new target, written last when replacing).
  A dqkm model carries a write id in its root and in every array, so that
  :func:`dqkm.load` reading it meanwhile retries and then gets the old model,
  the new one, or a clear error; a data store read while it is being replaced
  there may mix the two, and a replacement interrupted midway leaves a store
  that a model load refuses (write ids differ) — the old store is not kept.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import uuid
import zipfile

from ..exceptions import StoreError

__all__ = ["AtomicTarget", "TargetExistsError", "is_replaceable"]

_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class TargetExistsError(StoreError, FileExistsError):
    """The target of a write exists and ``overwrite`` is false (or another writer
    claimed it first)."""


def _load_renameat2():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load_renameat2()


def _rename2(src, dst, flags):
    """``renameat2(src, dst, flags)``; False where the system does not support it."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), dst)


def is_replaceable(path) -> bool:
    """True if ``path`` is something dqkm may replace: a Zarr store (v2 or v3
    metadata at its top) or a ``.npz`` archive holding a dqkm model header."""
    if os.path.isdir(path) and not os.path.islink(path):
        return any(os.path.isfile(os.path.join(path, m)) for m in
                   ("zarr.json", ".zgroup", ".zarray"))
    if os.path.isfile(path) and str(path).endswith(".npz"):
        try:
            with zipfile.ZipFile(path) as z:
                return "__header__.npy" in z.namelist()
        except (zipfile.BadZipFile, OSError):
            return False
    return False


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def remove_all(paths, remove=_remove, exists=os.path.lexists):
    """Remove every path, finishing even if interrupted (``KeyboardInterrupt``
    during a removal is held, the removal retried, and re-raised at the end)."""
    pending = None
    for p in paths:
        for _ in range(5):
            try:
                remove(p)
                if not exists(p):
                    break
            except BaseException as e:  # noqa: BLE001 - finish the clean-up first
                pending = pending or e
    if pending is not None:
        raise pending


class AtomicTarget:
    """Context manager: write under :attr:`tmp` (or :attr:`tmp_url`), put in place on
    success, remove on any exception.  See the module docstring."""

    def __init__(self, path, overwrite):
        self.path = str(path)
        self.overwrite = overwrite
        self.url = isinstance(path, str) and "://" in path
        self.fs, self.fpath = None, None
        if self.url:
            import fsspec
            from fsspec.implementations.local import LocalFileSystem

            self.fs, self.fpath = fsspec.core.url_to_fs(self.path)
            if isinstance(self.fs, LocalFileSystem):  # file://: the local guarantees
                self.url, self.fs = False, None
        if not self.url:
            self.fpath = os.path.abspath(self.fpath or self.path)
        parent, name = os.path.split(self.fpath.rstrip("/"))
        self.tmp = f"{parent}/.{name}.tmp-{uuid.uuid4().hex[:8]}"

    # ------------------------------------------------------------------ helpers
    def exists(self, p):
        return self.fs.exists(p) if self.url else os.path.lexists(p)

    def _remove_all(self, *paths):
        if self.url:
            remove_all(paths, lambda p: self.fs.exists(p) and self.fs.rm(p, recursive=True),
                       self.fs.exists)
        else:
            remove_all(paths)

    def open_tmp(self, mode="wb"):
        """The temporary name opened as a file (a single-file target, e.g. ``.npz``)."""
        return self.fs.open(self.tmp, mode) if self.url else open(self.tmp, mode)

    @property
    def tmp_url(self):
        if not self.url:
            return self.tmp
        protocol = self.path.split("://", 1)[0]
        return f"{protocol}://{self.tmp}"

    def _exists_error(self):
        return TargetExistsError(f"{self.path!r} already exists; pass overwrite=True "
                                 "(--overwrite on the command line) to replace it.")

    def check(self):
        """Refuse now (before a long computation) what the write would refuse later:
        :class:`TargetExistsError` if the target exists and ``overwrite`` is false,
        :class:`~dqkm.exceptions.StoreError` if it exists but is not a Zarr store or
        dqkm model file that dqkm may replace."""
        if not self.exists(self.fpath):
            return
        if not self.overwrite:
            raise self._exists_error()
        if not (_remote_replaceable(self.fs, self.fpath) if self.url
                else is_replaceable(self.fpath)):
            kind = "directory" if (self.fs.isdir(self.fpath) if self.url
                                   else os.path.isdir(self.fpath)) else "file"
            raise StoreError(f"overwrite=True would replace {self.path!r}, a {kind} that is "
                             "not a Zarr store or dqkm model file; dqkm replaces only what it "
                             "wrote. Choose another path, or remove it yourself first.")

    # ------------------------------------------------------------------ protocol
    def __enter__(self):
        self.check()
        if not self.url:
            os.makedirs(os.path.dirname(self.fpath) or ".", exist_ok=True)
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.check()
                if self.url:
                    self._commit_url()
                else:
                    self._commit_local()
        finally:
            # after a commit the temporary name is gone, or holds the replaced content
            self._remove_all(self.tmp, f"{self.tmp}.old")
        return False

    def _commit_url(self):
        """Put :attr:`tmp` in place on a filesystem without atomic rename (see
        :func:`commit_remote`)."""
        commit_remote(self.fs, self.tmp, self.fpath, overwrite=self.overwrite,
                      exists_error=self._exists_error)

    def _commit_local(self):
        is_dir = os.path.isdir(self.tmp)
        if not self.overwrite or not os.path.lexists(self.fpath):
            try:
                self._claim(is_dir)
                return
            except TargetExistsError:
                if not self.overwrite:
                    raise
                self.check()  # another writer created it meanwhile: replace it
        if not is_dir or not os.path.isdir(self.fpath):
            if os.path.isdir(self.fpath):
                raise StoreError(f"{self.path!r} is a directory; dqkm writes a file there "
                                 "only when it is absent.")
            os.replace(self.tmp, self.fpath)
        elif not _rename2(self.tmp, self.fpath, _RENAME_EXCHANGE):
            old = f"{self.tmp}.old"
            os.replace(self.fpath, old)
            try:
                os.replace(self.tmp, self.fpath)
            except BaseException:
                os.replace(old, self.fpath)
                raise

    def _claim(self, is_dir):
        """Put :attr:`tmp` at the target name only if the name is free (exclusive)."""
        try:
            if not is_dir:
                os.link(self.tmp, self.fpath)
                return
            if _rename2(self.tmp, self.fpath, _RENAME_NOREPLACE):
                return
            os.mkdir(self.fpath)  # reserve the name, then rename onto the empty directory
        except FileExistsError:
            raise self._exists_error() from None
        try:
            os.rename(self.tmp, self.fpath)
        except BaseException:
            try:
                os.rmdir(self.fpath)  # only ever removes the empty directory made above
            except OSError:
                pass
            raise


# ----------------------------------------------------------------- remote (fsspec)
def _remote_replaceable(fs, path) -> bool:
    """:func:`is_replaceable` on an fsspec filesystem."""
    if fs.isdir(path):
        return any(fs.isfile(f"{path}/{m}") for m in ("zarr.json", ".zgroup", ".zarray"))
    if fs.isfile(path) and str(path).endswith(".npz"):
        try:
            with fs.open(path, "rb") as f, zipfile.ZipFile(f) as z:
                return "__header__.npy" in z.namelist()
        except (zipfile.BadZipFile, OSError):
            return False
    return False


def _put(fs, path, data, *, exclusive, exists_error):
    """Write ``data`` as the object ``path`` in one call (``mode="create"`` if
    ``exclusive``: the filesystem's exclusive create)."""
    try:
        fs.pipe_file(path, data, mode="create" if exclusive else "overwrite")
    except FileExistsError:
        raise exists_error() from None


def commit_remote(fs, tmp, target, *, overwrite, exists_error):
    """Move the file or Zarr store written at ``tmp`` to ``target`` on ``fs``, an
    fsspec filesystem without atomic rename (memory, object stores).

    A file is written in one ``pipe_file`` (one object: a reader finds the old
    or the new one); a new target uses the filesystem's exclusive create.  A
    Zarr store is moved file by file so that its root ``zarr.json`` is the
    commit point: a new target is claimed by creating that file exclusively
    (before the arrays follow), an existing one gets every array's metadata
    before its chunks, loses the files the new store lacks, and gets its root
    metadata last.  A dqkm model's write id, in the root and in every array,
    lets :func:`dqkm.load` tell a store in the middle of this from a whole one.
    """
    if fs.isfile(tmp):
        _put(fs, target, fs.cat_file(tmp), exclusive=not overwrite, exists_error=exists_error)
        return
    tmp = tmp.rstrip("/")
    rel = sorted(f[len(tmp) + 1:] for f in fs.find(tmp))
    root = "zarr.json" if "zarr.json" in rel else ".zgroup" if ".zgroup" in rel else None
    if root is None:
        raise StoreError(f"{tmp!r} holds no Zarr metadata at its top; nothing was written "
                         f"to {target!r}.")
    # each array's metadata before its chunks; the root last (or, claiming, first)
    ordered = sorted((r for r in rel if r != root),
                     key=lambda r: (not r.endswith(("zarr.json", ".zarray", ".zattrs")), r))
    fresh = not fs.exists(target)
    if fresh or not overwrite:
        _put(fs, f"{target}/{root}", fs.cat_file(f"{tmp}/{root}"), exclusive=True,
             exists_error=exists_error)
        try:
            for r in ordered:
                fs.mv(f"{tmp}/{r}", f"{target}/{r}")
        except BaseException:
            # the target was claimed by this write: nobody else wrote there
            remove_all([target], lambda p: fs.exists(p) and fs.rm(p, recursive=True),
                       fs.exists)
            raise
        return
    old = {f[len(target.rstrip('/')) + 1:] for f in fs.find(target)}
    for r in ordered:
        fs.mv(f"{tmp}/{r}", f"{target}/{r}")
    stale = sorted(old - set(rel) - {root})
    if stale:
        fs.rm([f"{target}/{r}" for r in stale])
    fs.mv(f"{tmp}/{root}", f"{target}/{root}")
