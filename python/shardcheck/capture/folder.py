"""The capture's folder (--out): claimed by one capture at a time, emptied of an earlier capture's
rank files before this one starts, and checked only where every rank file is this capture's.

A capture that launches its ranks (the launcher, or one process that may start its own) holds an
exclusive lock on DIR/.shardcheck-capture.lock from before its first rank starts until its check
ends; ranks another launcher started (torchrun, mpirun) each hold it shared. Each capture has a
launch id, which every rank writes in its header (`launch`): a rank file without it was not
written by this capture, and is never checked.
"""

import errno
import fcntl
import json
import os
import re
import shlex
import uuid
from typing import List, NamedTuple, Optional

LOCK_NAME = ".shardcheck-capture.lock"
LAUNCH_ENV = "SHARDCHECK_LAUNCH_ID"
# The names the checker reads as rank files (core/scenario/captured_program.cpp, rank_of_file),
# and the file a launching process moves aside (spawned.py).
_RANK_FILE = re.compile(r"rank-[0-9]{1,6}\.jsonl\Z")
_ASIDE_FILE = re.compile(r"\.launcher-[0-9]+\.jsonl\Z")


class UsageError(Exception):
    """A capture that cannot start as asked: one line on stderr, exit 2, before any rank runs."""


class Claim(NamedTuple):
    out: str  # the folder, absolute
    launch_id: str
    lock_fd: int  # held open until the process ends: the lock goes with it


def shown(path: str) -> str:
    """A path as a shell command line takes it: quoted, and never read as an option."""
    if path.startswith("-"):
        path = os.path.join(".", path)
    return shlex.quote(path)


def _folder(out: str) -> str:
    """The folder, made if missing, as an absolute path."""
    if os.path.lexists(out) and not os.path.isdir(out):
        raise UsageError("--out %s exists and is not a folder (the capture writes a folder of "
                         "rank-<R>.jsonl files)" % shown(out))
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as error:
        raise UsageError("--out %s: cannot make the folder: %s" % (shown(out), error.strerror))
    return os.path.abspath(out)


def _lock(out: str, how: int) -> int:
    path = os.path.join(out, LOCK_NAME)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as error:
        raise UsageError("--out %s: cannot write there: %s" % (shown(out), error.strerror))
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except OSError as error:
        holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        os.close(fd)
        if error.errno not in (errno.EWOULDBLOCK, errno.EACCES):
            raise UsageError("--out %s: cannot lock it: %s" % (shown(out), error.strerror))
        raise UsageError("--out %s: another capture is writing into it (%s); wait for it to end, "
                         "or give another folder" % (shown(out), holder or "pid unknown"))
    if how == fcntl.LOCK_EX:
        text = ("pid %d" % os.getpid()).encode("ascii")
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
    return fd


def claim(out: str) -> Claim:
    """The folder for a capture that launches its ranks: made if missing, locked, emptied of
    earlier rank files, and a launch id that the ranks inherit (LAUNCH_ENV)."""
    given, out = out, _folder(out)
    fd = _lock(given, fcntl.LOCK_EX)
    for name in os.listdir(out):
        if _RANK_FILE.match(name) or _ASIDE_FILE.match(name):
            try:
                os.remove(os.path.join(out, name))
            except OSError as error:
                os.close(fd)
                raise UsageError("--out %s: cannot remove the earlier capture's %s: %s"
                                 % (shown(given), name, error.strerror))
    launch_id = uuid.uuid4().hex
    os.environ[LAUNCH_ENV] = launch_id
    return Claim(out, launch_id, fd)


def share(out: str) -> int:
    """The folder for one rank of a launcher that is not the capture's (torchrun): made if
    missing and locked shared, so a capture launching its own ranks there is refused."""
    _folder(out)
    return _lock(out, fcntl.LOCK_SH)


def launch_of(path: str) -> Optional[str]:
    """The launch id a rank file's header names, or None (no header, or none in it)."""
    try:
        with open(path, "rb") as f:
            head = json.loads(f.readline(1 << 20))
    except (OSError, ValueError):
        return None
    return head.get("launch") if isinstance(head, dict) else None


def rank_files(out: str) -> List[str]:
    try:
        return sorted(n for n in os.listdir(out) if _RANK_FILE.match(n))
    except OSError:
        return []


def unchecked(out: str, launch_id: str, world: Optional[int]) -> List[str]:
    """Why the folder must not be checked as this capture's: [] when every rank file in it was
    written by this launch (and, given the world, exactly ranks 0 .. world-1 are there)."""
    names = rank_files(out)
    why = ["%s was not written by this capture" % n for n in names
           if launch_of(os.path.join(out, n)) != launch_id]
    if world is not None:
        why += ["rank %d left no file" % r for r in range(world)
                if "rank-%d.jsonl" % r not in names]
    elif not names:
        why.append("no rank wrote its file")
    return why
