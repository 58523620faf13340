"""The per-rank capture file: docs/capture-format.md, version 2.

One JSON object per line. Ids (sites, streams, groups, buffers, events) are dense and defined by
their own record before any record uses them. The file ends with an ``end`` record holding the
number of records before it, so a reader can tell a finished file from a truncated one. A rank
that did not finish (it raised, was stopped by a signal, or hung past the timeout) ends its file
with ``partial`` in the end record: why, and where. Records reach the file (the kernel's page
cache) at every collective and synchronization, so a rank killed outright loses only what it
recorded since; the checker reads a file cut there as partial.
"""

import json
import os

FORMAT_VERSION = 2


def rank_file(out_dir, rank):
    return os.path.join(out_dir, "rank-%d.jsonl" % rank)


class Writer:
    """Writes records in issue order; buffered, flushed at close."""

    def __init__(self, path, header):
        self.path = path
        self._f = open(path, "w", encoding="utf-8", buffering=1 << 20)
        self.records = 0
        head = {"shardcheck_capture": FORMAT_VERSION}
        head.update(header)
        self._f.write(self._dump(head))

    @staticmethod
    def _dump(obj):
        # ensure_ascii keeps every line valid UTF-8 whatever a file or op name holds.
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=True) + "\n"

    @property
    def closed(self):
        """Closed or abandoned: a record written now (by a thread the program left running
        past the capture's end) is dropped."""
        return self._f is None

    def write(self, record):
        if self._f is None:
            return
        self._f.write(self._dump(record))
        self.records += 1

    def flush(self):
        """Hands what is buffered to the kernel: it survives the process, whatever kills it."""
        if self._f is not None:
            self._f.flush()

    def write_line(self, text):
        """A record already formatted as one line of JSON (without the newline)."""
        if self._f is None:
            return
        self._f.write(text + "\n")
        self.records += 1

    def close(self, partial=None, site=None):
        """partial: why the rank did not finish (None: it did); site: where, a site id."""
        if self._f is None:
            return
        end = {"k": "end", "records": self.records}
        if partial is not None:
            # One line of plain text: an exception's message may hold line breaks.
            end["partial"] = " ".join(str(partial).split())[:1024] or "stopped"
            if site is not None:
                end["at"] = site
        self._f.write(self._dump(end))
        self._f.close()
        self._f = None

    def orphan(self):
        """In a forked child (a DataLoader worker), which holds a copy of the buffer (the
        parent's to flush) and of the file (where its records would land in the middle of the
        parent's): the copy of the file goes to /dev/null, and the writer is closed, so nothing
        reaches the file, not even the buffer when the child's file object is flushed at exit."""
        if self._f is None:
            return
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._f.fileno())
        finally:
            os.close(null)
        self._orphaned, self._f = self._f, None

    def abandon(self):
        """Closes without the end record: the file reads as truncated, as it is."""
        if self._f is not None:
            self._f.close()
            self._f = None
