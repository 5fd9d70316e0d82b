"""tool_errors.py - how the Python tools of examples/ end: one line and a documented exit status.

A tool that fails prints one line on stderr, '<tool>: <file>: <reason>' (without '<file>: ' when
no file is to blame), and exits with the status scdino gives the same kind of failure:

    0  success
    1  runtime failure: a module is missing, an output cannot be written (disk full, permissions)
    2  bad arguments: an unknown option or bad value, an output path that is one of the inputs
    3  bad input file: missing, not a regular file, truncated or damaged, of another format,
       lacking an object the tool needs, or refused as unsafe

No traceback reaches the user for a bad file: everything a tool does with an input's content runs
inside reading(), which turns any exception into the one line.  Inputs are only read (h5py, json,
a weights-only torch.load); nothing in them is executed.  The tools find this file beside them.
"""
import argparse
import contextlib
import os
import stat
import sys
import tempfile

EXIT_FAILURE, EXIT_ARGS, EXIT_DATA = 1, 2, 3


class ToolError(Exception):
    """A failure to report as '<tool>: <path>: <reason>' with exit status `status`."""

    def __init__(self, status, path, reason):
        super().__init__(reason)
        self.status, self.path, self.reason = status, path, reason


def bad_data(path, reason):
    return ToolError(EXIT_DATA, path, reason)


def one_line(e):
    """An exception's text on one line: HDF5's and torch's messages span lines, a KeyError quotes."""
    s = e.args[0] if isinstance(e, KeyError) and e.args else e
    text = " ".join(str(s).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def need_file(path):
    """path must be an existing regular file: a directory cannot be read, a FIFO or a device would
    block the read or never end."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise bad_data(path, "no such file") from None
    except OSError as e:
        raise bad_data(path, "cannot look at it: %s" % (e.strerror or e)) from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
            "a device or socket"
        raise bad_data(path, "not a regular file (%s)" % kind)


@contextlib.contextmanager
def reading(path, what):
    """Any failure while taking `what` from the file `path` ends the tool with exit 3, naming it."""
    try:
        yield
    except ToolError:
        raise
    except Exception as e:  # a damaged file can raise anything from h5py, numpy, torch or json
        raise bad_data(path, "cannot read %s: %s" % (what, one_line(e))) from None


@contextlib.contextmanager
def writing(path):
    """A failed write of `path` (disk full, permissions, HDF5 or torch I/O) ends with exit 1."""
    try:
        yield
    except ToolError:
        raise
    except (OSError, RuntimeError) as e:
        raise ToolError(EXIT_FAILURE, path, "cannot write it: %s" % one_line(e)) from None


@contextlib.contextmanager
def atomic_output(dst):
    """A temporary file beside dst, with the permissions the umask gives, for the block to write;
    fsync'd and renamed over dst when the block ends normally, removed otherwise: dst is complete
    or untouched."""
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(dst) + ".", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(dst)))
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        os.close(fd)
        fd = -1
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dst)
        tmp = None
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)


def _same(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet)
        return os.path.realpath(a) == os.path.realpath(b)


def distinct_output(out, inputs):
    """Refuse (exit 2) an output path that names one of the inputs: the input is never replaced."""
    for i in inputs:
        if i and _same(out, i):
            raise ToolError(EXIT_ARGS, out, "is also the input %s: give another output path" % i)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line with exit status 2, like every other failure."""

    def error(self, message):
        raise ToolError(EXIT_ARGS, None, "%s (see --help)" % message)


def run(tool, main):
    """Run main() (its return value is the exit status); a ToolError ends in its one line."""
    try:
        status = main()
    except ToolError as e:
        print("%s: %s%s" % (tool, "%s: " % e.path if e.path else "", e.reason), file=sys.stderr)
        status = e.status
    except KeyboardInterrupt:
        print("%s: interrupted" % tool, file=sys.stderr)
        status = 130
    sys.exit(status or 0)
