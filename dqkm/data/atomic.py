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
Remote (fsspec) targets are written the same way but moved without these
guarantees (object stores have no atomic rename).
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
        if self.url:
            import fsspec

            self.fs, self.fpath = fsspec.core.url_to_fs(self.path)
        else:
            self.fs, self.fpath = None, os.path.abspath(self.path)
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
        if not self.url and not is_replaceable(self.fpath):
            kind = "directory" if os.path.isdir(self.fpath) else "file"
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
        old = None
        if self.exists(self.fpath):
            old = f"{self.tmp}.old"
            self.fs.mv(self.fpath, old, recursive=True)
        try:
            self.fs.mv(self.tmp, self.fpath, recursive=True)
        except BaseException:
            if old is not None:
                self.fs.mv(old, self.fpath, recursive=True)
            raise

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
