"""One way for bench/'s scripts to write a result file: a temporary file in the same folder, flushed and
fsynced, then renamed over the target, so that a reader (or a later merge) never sees half a file and an
interrupted run leaves the previous file whole."""
import os
import tempfile


def write_atomic(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
