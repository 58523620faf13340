"""The per-rank capture file: docs/capture-format.md, version 2.

One JSON object per line. Ids (sites, streams, groups, buffers, events) are dense and defined by
their own record before any record uses them. The file ends with an ``end`` record holding the
number of records before it, so a reader can tell a finished file from a truncated one. A rank
that did not finish (it raised, was stopped by a signal, or hung past the timeout) ends its file
with ``partial`` in the end record: why, and where. Records reach the file (the kernel's page
cache) at every collective and synchronization, so a rank killed outright loses only what it
recorded since; the checker reads a file cut there as partial.

Nothing is written that the checker refuses (core/scenario/captured_program.cpp): text holds no
control character and no byte that is not UTF-8 (each is written as an escape, `\\x1b`), and is
cut to the loader's length; a rank stops at the loader's record limits, its file ending partial.
A write that fails (a full disk) ends the capture, never the program: the file is cut back to
its last whole line, ends partial where it can, and the program goes on unrecorded.
"""

import json
import os
import re
import stat
import sys

FORMAT_VERSION = 2

# The C++ loader's bounds (core/scenario/captured_program.{hpp,cpp}, docs/limits.md): a file past
# one is refused whole, so the writer stays inside them. test_reliability reads them there.
MAX_NAME_BYTES = 4096  # kMaxNameBytes: a name, file, function or reason
MAX_RECORDS_PER_RANK = 4_000_000  # CaptureLimits::kMaxRecordsPerRank
MAX_RECORDS = 16_000_000  # CaptureLimits::kMaxRecords, summed over the ranks

_BUFFER_BYTES = 1 << 20
_CUT = "..."
# What the loader refuses in text (core/base/text.hpp, is_control), and the surrogates a Python
# string holds for bytes that are not UTF-8 (a file name read with surrogateescape).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def rank_file(out_dir, rank):
    return os.path.join(out_dir, "rank-%d.jsonl" % rank)


def _escape(match):
    c = match.group()
    o = ord(c)
    if c in _NAMED:
        return _NAMED[c]
    if 0xDC80 <= o <= 0xDCFF:  # surrogateescape: the byte o - 0xDC00 of a name that is not UTF-8
        return "\\x%02x" % (o - 0xDC00)
    return "\\x%02x" % o if o < 0x100 else "\\u%04x" % o


def clean_text(text, limit=MAX_NAME_BYTES):
    """text as the loader takes it: control characters and bytes that are not UTF-8 written as
    escapes (`\\x1b`, `\\n`, `\\xff`), and at most `limit` bytes of UTF-8, cut with "..."."""
    text = _UNSAFE.sub(_escape, text)
    if len(text) * 4 <= limit:
        return text
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[:limit - len(_CUT)].decode("utf-8", "ignore") + _CUT


def _cleaned(obj):
    if isinstance(obj, str):
        return clean_text(obj)
    if isinstance(obj, dict):
        return {k: _cleaned(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_cleaned(v) for v in obj]
    return obj


def quoted(name):
    """A name as a JSON string the loader takes (records formatted by hand)."""
    return json.dumps(clean_text(name), ensure_ascii=True)


class Writer:
    """Writes records in issue order; buffered, flushed at collectives, syncs and close."""

    def __init__(self, path, header):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        # Only a regular file is ever removed (a rank file nothing reached): a path that names a
        # device (/dev/null) or anything else is the user's, never ours to delete.
        self._regular = stat.S_ISREG(os.fstat(self._fd).st_mode)
        self._buf = []
        self._buffered = 0
        self._in_file = 0  # bytes in the file, every one of them a whole line
        self._lines_in_file = 0  # lines in the file, the header's included
        self.records = 0
        self.failure = None  # why the capture stopped before the program did
        head = {"shardcheck_capture": FORMAT_VERSION}
        head.update(header)
        world = max(int(head.get("world_size", 1) or 1), 1)
        # One record is kept for the site an end record names.
        self._records_max = min(MAX_RECORDS_PER_RANK, MAX_RECORDS // world) - 1
        self._put(self._dump(head))

    @staticmethod
    def _dump(obj):
        # ensure_ascii keeps every line valid UTF-8 whatever a file or op name holds; a line
        # that may hold what the loader refuses (an escape, DEL, a long string) is cleaned.
        line = json.dumps(obj, separators=(",", ":"), ensure_ascii=True)
        if "\\" in line or "\x7f" in line or len(line) > MAX_NAME_BYTES:
            line = json.dumps(_cleaned(obj), separators=(",", ":"), ensure_ascii=True)
        return line + "\n"

    @property
    def closed(self):
        """Closed, abandoned or stopped: a record written now (by a thread the program left
        running past the capture's end, or after a failed write) is dropped."""
        return self._fd is None

    def _put(self, line):
        self._buf.append(line)
        self._buffered += len(line)
        if self._buffered >= _BUFFER_BYTES:
            self.flush()

    def _at_limit(self):
        """The rank has as many records as the loader takes: the file ends here, partial."""
        why = ("the capture stopped at %d records, the checker's limit for a rank of this world "
               "(docs/limits.md); what ran after was not recorded" % self.records)
        self.close(why)
        self.failure = self.failure or why
        print("shardcheck.capture: %s; the program goes on" % why, file=sys.stderr, flush=True)

    def write(self, record):
        if self._fd is None:
            return
        if self.records >= self._records_max:
            return self._at_limit()
        self._put(self._dump(record))
        self.records += 1

    def write_line(self, text):
        """A record already formatted as one line of JSON (without the newline), its names
        from quoted()."""
        if self._fd is None:
            return
        if self.records >= self._records_max:
            return self._at_limit()
        self._put(text + "\n")
        self.records += 1

    def flush(self):
        """Hands what is buffered to the kernel: it survives the process, whatever kills it."""
        if self._fd is None or not self._buf:
            return
        data = "".join(self._buf).encode("utf-8")
        self._buf, self._buffered = [], 0
        done = 0
        try:
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError as error:
            self._failed(error, data, done)
            return
        self._in_file += len(data)
        self._lines_in_file += data.count(b"\n")

    def _failed(self, error, data, done):
        """A write failed (a full disk, a file size limit): the file is cut back to a whole
        line, far enough that the end record fits in the bytes it held, and ends partial; the
        capture stops."""
        why = "the capture stopped: writing %s failed (%s); what ran after was not recorded" % (
            self.path, error.strerror or error)
        self.failure = why
        room = len(self._end_line(self.records, why, None))
        whole = data.rfind(b"\n", 0, max(done - room, 0)) + 1
        self._in_file += whole
        self._lines_in_file += data.count(b"\n", 0, whole)
        self._cut()
        if self._lines_in_file == 0:  # not even the header: no file rather than a refused one
            self._close_fd()
            if self._regular:
                _unlink(self.path)
        else:
            self._end(self._lines_in_file - 1, why, None)
            self._close_fd()
        print("shardcheck.capture: %s; the program goes on" % why, file=sys.stderr, flush=True)

    def _end_line(self, records, partial, site):
        end = {"k": "end", "records": records}
        if partial is not None:
            # One line of plain text: an exception's message may hold line breaks.
            end["partial"] = clean_text(" ".join(str(partial).split())[:1024]) or "stopped"
            if site is not None:
                end["at"] = site
        return self._dump(end).encode("utf-8")

    def _end(self, records, partial, site):
        data = self._end_line(records, partial, site)
        try:
            if os.write(self._fd, data) != len(data):
                self._cut()  # a cut end line: the file reads truncated
        except OSError:
            pass

    def _cut(self):
        """The file back to its whole lines, and the next write where they end."""
        try:
            os.ftruncate(self._fd, self._in_file)
            os.lseek(self._fd, self._in_file, os.SEEK_SET)
        except OSError:
            pass

    def close(self, partial=None, site=None):
        """partial: why the rank did not finish (None: it did); site: where, a site id."""
        if self._fd is None:
            return
        self.flush()
        if self._fd is None:  # the flush failed, and ended the file
            return
        self._end(self.records, partial, site)
        self._close_fd()

    def _close_fd(self):
        fd, self._fd = self._fd, None
        self._buf, self._buffered = [], 0
        if fd is not None:
            os.close(fd)

    def orphan(self):
        """In a forked child (a DataLoader worker), which holds a copy of the buffer (the
        parent's to write) and of the file descriptor (where its records would land in the
        middle of the parent's): the child drops both, so nothing of it reaches the file."""
        self._close_fd()

    def abandon(self):
        """Closes without the end record: the file reads as truncated, as it is."""
        self.flush()
        self._close_fd()


def _unlink(path):
    try:
        os.remove(path)
    except OSError:
        pass
