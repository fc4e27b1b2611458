"""A passthrough FUSE filesystem that injects storage faults, for tests of
what the node does when its disk fails or slows down. This machine's
kernel has no device-mapper (`dm-flakey`, `dm-error`, `dm-delay`), so the
faults those targets give are made here, one level up, on the files under
the mount: every call reaches the real file below, except the ones a fault
names.

    python faultyfs.py BACKING_DIR MOUNTPOINT

Commands on stdin, one a line (each answered with `ok` on stdout once in
force):

    fail-writes SUBSTRING   writes to files whose path contains SUBSTRING fail with EIO
    fail-syncs SUBSTRING    their fsync/fdatasync fail with EIO (writes pass)
    delay-writes MS         every write and sync takes MS milliseconds more
    heal                    no faults

Writes and syncs that reach the real file are made durable as the caller
asked: a file opened with O_DSYNC (the node's segments) has each write
followed by an fdatasync here, which is where `fail-syncs` fails it, as a
device whose cache flush fails would.
"""
import errno
import os
import sys
import threading
import time

import mfusepy as fuse

LOCK = threading.Lock()
FAULTS = {"fail_writes": None, "fail_syncs": None, "delay": 0.0}


def fault(kind, path):
    with LOCK:
        sub = FAULTS[kind]
    return sub is not None and sub in path


def delay():
    with LOCK:
        d = FAULTS["delay"]
    if d:
        time.sleep(d)


class Faulty(fuse.Operations):
    use_ns = True

    def __init__(self, root):
        self.root = os.path.realpath(root)
        # Descriptors of files opened with O_DSYNC or O_SYNC.
        self.synced = set()

    def _opened(self, fd, flags):
        if flags & (os.O_DSYNC | os.O_SYNC):
            self.synced.add(fd)
        return fd

    def _full(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def access(self, path, amode):
        if not os.access(self._full(path), amode):
            raise fuse.FuseOSError(errno.EACCES)

    def chmod(self, path, mode):
        os.chmod(self._full(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._full(path), uid, gid)

    def create(self, path, mode, flags):
        plain = flags & ~(os.O_DIRECT | os.O_DSYNC | os.O_SYNC)
        return self._opened(os.open(self._full(path), plain | os.O_CREAT, mode), flags)

    def getattr(self, path, fh=None):
        st = os.lstat(self._full(path))
        out = {k: getattr(st, k) for k in (
            "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")}
        for k in ("st_atime", "st_mtime", "st_ctime"):
            out[k] = getattr(st, k + "_ns")
        return out

    def mkdir(self, path, mode):
        os.mkdir(self._full(path), mode)

    def open(self, path, flags):
        # O_DIRECT is the kernel's business above; the file below is
        # opened without it, and syncs are passed on.
        plain = flags & ~(os.O_DIRECT | os.O_DSYNC | os.O_SYNC)
        return self._opened(os.open(self._full(path), plain), flags)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._full(path))

    def readlink(self, path):
        return os.readlink(self._full(path))

    def release(self, path, fh):
        self.synced.discard(fh)
        os.close(fh)

    def rename(self, old, new):
        os.rename(self._full(old), self._full(new))

    def rmdir(self, path):
        os.rmdir(self._full(path))

    def statfs(self, path):
        st = os.statvfs(self._full(path))
        return {k: getattr(st, k) for k in (
            "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
            "f_flag", "f_frsize", "f_namemax")}

    def symlink(self, target, source):
        os.symlink(source, self._full(target))

    def truncate(self, path, length, fh=None):
        if fault("fail_writes", path):
            raise fuse.FuseOSError(errno.EIO)
        os.truncate(self._full(path), length)

    def unlink(self, path):
        os.unlink(self._full(path))

    def utimens(self, path, times=None):
        os.utime(self._full(path), ns=times)

    def write(self, path, data, offset, fh):
        delay()
        if fault("fail_writes", path):
            raise fuse.FuseOSError(errno.EIO)
        n = os.pwrite(fh, data, offset)
        if fh in self.synced:
            if fault("fail_syncs", path):
                raise fuse.FuseOSError(errno.EIO)
            os.fdatasync(fh)
        return n

    def fsync(self, path, datasync, fh):
        delay()
        if fault("fail_syncs", path) or fault("fail_writes", path):
            raise fuse.FuseOSError(errno.EIO)
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)

    def fallocate(self, path, mode, offset, length, fh):
        if fault("fail_writes", path):
            raise fuse.FuseOSError(errno.EIO)
        os.posix_fallocate(fh, offset, length)

    def flush(self, path, fh):
        pass


def commands():
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        with LOCK:
            if words[0] == "fail-writes":
                FAULTS["fail_writes"] = words[1]
            elif words[0] == "fail-syncs":
                FAULTS["fail_syncs"] = words[1]
            elif words[0] == "delay-writes":
                FAULTS["delay"] = int(words[1]) / 1000
            elif words[0] == "heal":
                FAULTS.update(fail_writes=None, fail_syncs=None, delay=0.0)
            else:
                print(f"unknown command {words[0]}", flush=True)
                continue
        print("ok", flush=True)


if __name__ == "__main__":
    backing, mountpoint = sys.argv[1], sys.argv[2]
    threading.Thread(target=commands, daemon=True).start()
    fuse.FUSE(Faulty(backing), mountpoint, foreground=True, nothreads=False, allow_other=True)
