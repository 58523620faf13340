"""What hands work from one host thread to another, followed under a capture.

Threads the program starts run its operators under the capture too (a dispatch mode is the
thread's own), each on a host timeline of its own. What one thread does before a handover is
ordered before what the other does after it, so each handover leaves a signal on the giving
thread (Recorder.signal) and a wait for it on the taking one (Recorder.wait_signal):

- Thread.start and join; a ThreadPoolExecutor's submit, its future's result and exception.
- queue.Queue, LifoQueue, PriorityQueue: put and get; queue.SimpleQueue too, when the program
  names it after the capture began (it is a C type: the capture hands out a subclass).
- threading.Event set and wait; Semaphore (and BoundedSemaphore) release and acquire; a
  Barrier's wait (each party after every party's arrival in its round).
- Locks the program makes (threading.Lock, RLock, and the lock of a Condition it makes):
  release and acquire, Condition.wait included. Locks made inside torch, the standard library
  or the capture (a Queue's, an Event's) are left as they are: what they guard is followed above.

Not followed: polling a value or future.done(), locks made before the capture began.
"""

import _thread
import collections
import concurrent.futures
import itertools
import os
import queue
import sys
import threading


class Follower:
    """Installs the patches for one Hooks: patch(owner, name, make) records each for undoing."""

    def __init__(self, hooks, patch, mode, origin, quiet, own_dir, hidden):
        self.hooks = hooks
        self.rec = hooks.rec
        self.patch = patch
        self.mode = mode  # the dispatch mode's class: mode(hooks) captures a thread's operators
        self.origin = origin  # thread-local: .site names work with no frame of the program's
        self.quiet = quiet  # thread-local: .on while the capture's own threads run
        self.own_dir = own_dir
        self.hidden = hidden  # filename -> not the program's (torch, stdlib, capture)
        self.keys = itertools.count(1)

    # -- helpers -------------------------------------------------------------------------
    def internal(self):
        """The threading module's own events (a thread's start-up), the capture's threads."""
        f = sys._getframe(2).f_code.co_filename  # the caller of the patched function
        return f == threading.__file__ or f.startswith(self.own_dir + os.sep) or self.quieted()

    def quieted(self):
        return getattr(self.quiet, "on", False)

    def signal(self):
        return self.rec.signal(self.hooks.site())

    def wait(self, sid):
        self.rec.wait_signal(sid, self.hooks.site())

    def programs(self, depth):
        """True when the frame `depth` above the caller is the program's (not torch's, the
        standard library's or the capture's)."""
        f = sys._getframe(depth + 1).f_code.co_filename
        return not self.hidden(f)

    def install(self):
        self.threads()
        self.queues()
        self.events()
        self.locks()
        self.pools()

    # -- threads ---------------------------------------------------------------------------
    def threads(self):
        follower, hooks, rec = self, self.hooks, self.rec

        def start(orig):
            def wrapped(thread):
                if not follower.internal() and getattr(thread, "_shardcheck_key", None) is None:
                    site = hooks.site()
                    thread._shardcheck_key = ("thread", next(follower.keys))
                    thread._shardcheck_start = (rec.signal(site), site)
                    run = thread.run

                    def run_captured():
                        follower.origin.site = site
                        mode = follower.mode(hooks)
                        mode.__enter__()
                        try:
                            run()
                        finally:
                            mode.__exit__(None, None, None)
                            thread._shardcheck_end = rec.signal(site)  # named by its start

                    thread.run = run_captured
                return orig(thread)
            return wrapped

        def join(orig):
            def wrapped(thread, timeout=None):
                orig(thread, timeout)
                end = getattr(thread, "_shardcheck_end", None)
                if end is not None and not thread.is_alive() and not follower.internal():
                    follower.wait(end)
            return wrapped

        self.patch(threading.Thread, "start", start)
        self.patch(threading.Thread, "join", join)

    # -- queues ----------------------------------------------------------------------------
    def queues(self):
        follower = self

        # Queue._put and _get run with the queue's lock held: the signals keep the items' order.
        def put(orig):
            def wrapped(q, item):
                orig(q, item)
                if not follower.quieted():
                    q.__dict__.setdefault("_shardcheck_signals", collections.deque()).append(
                        follower.signal())
            return wrapped

        def get(orig, lifo):
            def wrapped(q):
                item = orig(q)
                signals = q.__dict__.get("_shardcheck_signals")
                if signals and not follower.quieted():
                    follower.wait(signals.pop() if lifo else signals.popleft())
                return item
            return wrapped

        # A PriorityQueue hands items out by priority: each item's own signal, by identity.
        def put_ranked(orig):
            def wrapped(q, item):
                orig(q, item)
                if not follower.quieted():
                    q.__dict__.setdefault("_shardcheck_by_item", {}).setdefault(
                        id(item), collections.deque()).append(follower.signal())
            return wrapped

        def get_ranked(orig):
            def wrapped(q):
                item = orig(q)
                by_item = q.__dict__.get("_shardcheck_by_item")
                signals = by_item.get(id(item)) if by_item else None
                if signals:
                    sid = signals.popleft()
                    if not signals:
                        del by_item[id(item)]
                    if not follower.quieted():
                        follower.wait(sid)
                return item
            return wrapped

        self.patch(queue.Queue, "_put", put)
        self.patch(queue.Queue, "_get", lambda orig: get(orig, False))
        self.patch(queue.LifoQueue, "_put", put)
        self.patch(queue.LifoQueue, "_get", lambda orig: get(orig, True))
        self.patch(queue.PriorityQueue, "_put", put_ranked)
        self.patch(queue.PriorityQueue, "_get", get_ranked)
        self.patch(queue, "SimpleQueue", lambda orig: _simple_queue(orig, follower))

    # -- events and semaphores ---------------------------------------------------------------
    def events(self):
        follower = self

        def event_set(orig):
            def wrapped(ev):
                if not follower.internal():
                    ev._shardcheck_signal = follower.signal()
                return orig(ev)
            return wrapped

        def event_wait(orig):
            def wrapped(ev, timeout=None):
                done = orig(ev, timeout)
                if done and not follower.internal():
                    follower.wait(getattr(ev, "_shardcheck_signal", None))
                return done
            return wrapped

        # A release hands over to the acquire it lets through: the earliest release not yet
        # taken (the semaphore's own lock keeps these in order only loosely: the earliest is
        # the one that orders least, so nothing is ordered that might not be).
        def release(orig):
            def wrapped(sem, n=1):
                if not follower.internal():
                    sem.__dict__.setdefault("_shardcheck_signals", collections.deque()).extend(
                        [follower.signal()] * n)
                return orig(sem, n)
            return wrapped

        def acquire(orig):
            def wrapped(sem, blocking=True, timeout=None):
                got = orig(sem, blocking, timeout)
                signals = sem.__dict__.get("_shardcheck_signals")
                if got and signals and not follower.internal():
                    try:
                        follower.wait(signals.popleft())
                    except IndexError:  # another acquire took it
                        pass
                return got
            return wrapped

        self.patch(threading.Event, "set", event_set)
        self.patch(threading.Event, "wait", event_wait)
        self.patch(threading.Semaphore, "release", release)
        self.patch(threading.BoundedSemaphore, "release", release)
        self.patch(threading.Semaphore, "acquire", acquire)
        self.patch(threading.Semaphore, "__enter__", acquire)
        self.patch(threading.Barrier, "wait", lambda orig: _barrier_wait(orig, follower))

    # -- locks -------------------------------------------------------------------------------
    def locks(self):
        follower = self

        def factory(orig, followed):
            def make(*args, **kwargs):
                inner = orig(*args, **kwargs)
                return followed(inner, follower) if follower.programs(1) else inner
            return make

        def condition_init(orig):
            def wrapped(cond, lock=None):
                if lock is None and follower.programs(1):
                    lock = _FollowedRLock(_RLOCK(), follower)
                orig(cond, lock)
            return wrapped

        self.patch(threading, "Lock", lambda orig: factory(orig, _FollowedLock))
        self.patch(threading, "RLock", lambda orig: factory(orig, _FollowedRLock))
        self.patch(threading.Condition, "__init__", condition_init)

    # -- pools -------------------------------------------------------------------------------
    def pools(self):
        """concurrent.futures: a task waits for its submit; result(), a done() that says so,
        wait() and as_completed() for the task's end."""
        follower, hooks, rec = self, self.hooks, self.rec

        def submit(orig):
            def wrapped(executor, fn, /, *args, **kwargs):
                site = hooks.site()
                sid = rec.signal(site)

                def task(*a, **k):
                    rec.wait_signal(sid, site)
                    before = getattr(follower.origin, "site", None)
                    follower.origin.site = site
                    try:
                        return fn(*a, **k)
                    finally:
                        follower.origin.site = before
                return orig(executor, task, *args, **kwargs)
            return wrapped

        def settle(orig):
            def wrapped(future, *args):
                future._shardcheck_signal = follower.signal()
                return orig(future, *args)
            return wrapped

        def outcome(orig):
            def wrapped(future, timeout=None):
                try:
                    return orig(future, timeout)
                finally:
                    follower.settled(future)
            return wrapped

        def polled(orig):
            def wrapped(future):
                done = orig(future)
                if done and not follower.internal():
                    follower.settled(future)
                return done
            return wrapped

        def waited(orig):
            def wrapped(fs, *args, **kwargs):
                got = orig(fs, *args, **kwargs)
                for future in got.done:
                    follower.settled(future)
                return got
            return wrapped

        def completed(orig):
            def wrapped(fs, *args, **kwargs):
                for future in orig(fs, *args, **kwargs):
                    follower.settled(future)
                    yield future
            return wrapped

        self.patch(concurrent.futures.ThreadPoolExecutor, "submit", submit)
        self.patch(concurrent.futures.Future, "set_result", settle)
        self.patch(concurrent.futures.Future, "set_exception", settle)
        self.patch(concurrent.futures.Future, "result", outcome)
        self.patch(concurrent.futures.Future, "exception", outcome)
        self.patch(concurrent.futures.Future, "done", polled)
        self.patch(concurrent.futures, "wait", waited)
        self.patch(concurrent.futures, "as_completed", completed)

    def settled(self, future):
        """The calling thread saw `future` finished (result(), a done() that said so, wait(),
        as_completed()): it waits for the task's end, once per thread and future."""
        sid = getattr(future, "_shardcheck_signal", None)
        if sid is None or not future.done():
            return
        seen = future.__dict__.setdefault("_shardcheck_seen", set())
        me = threading.get_ident()
        if me not in seen:
            seen.add(me)
            self.wait(sid)


_RLOCK = threading.RLock  # the real one, for a Condition's own lock


def _barrier_wait(orig, follower):
    """Barrier.wait: every party leaves a signal as it arrives and, once through, waits for the
    signals of every party of its round (arrivals counted in order: round = arrival // parties)."""
    def wrapped(barrier, timeout=None):
        if follower.internal():
            return orig(barrier, timeout)
        state = barrier.__dict__.setdefault("_shardcheck", {"lock": _thread.allocate_lock(),
                                                            "arrivals": 0, "rounds": {}})
        sid = follower.signal()
        with state["lock"]:
            round_ = state["arrivals"] // barrier.parties
            state["arrivals"] += 1
            state["rounds"].setdefault(round_, [0, []])[1].append(sid)
        index = orig(barrier, timeout)  # a broken barrier raises: nothing was handed over
        with state["lock"]:
            entry = state["rounds"][round_]
            entry[0] += 1
            signals = list(entry[1])
            if entry[0] == barrier.parties:
                del state["rounds"][round_]
        for s in signals:
            follower.wait(s)
        return index
    return wrapped


class _FollowedLock:
    """A lock the program made: its release hands what the thread did to the next acquire by
    another thread."""

    __slots__ = ("_inner", "_follower", "_signal", "_by", "__weakref__")

    def __init__(self, inner, follower):
        self._inner = inner
        self._follower = follower
        self._signal = None  # the last release's signal, and the thread that left it
        self._by = None

    def _released(self):
        if not self._follower.quieted():
            self._signal = self._follower.signal()
            self._by = threading.get_ident()

    def _acquired(self):
        if self._signal is not None and self._by != threading.get_ident() and \
                not self._follower.quieted():
            self._follower.wait(self._signal)

    def acquire(self, blocking=True, timeout=-1):
        got = self._inner.acquire(blocking, timeout)
        if got:
            self._acquired()
        return got

    def release(self):
        self._released()
        self._inner.release()

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()

    def locked(self):
        return self._inner.locked()

    def _at_fork_reinit(self):
        self._inner._at_fork_reinit()

    def __repr__(self):
        return repr(self._inner)


class _FollowedRLock(_FollowedLock):
    """An RLock the program made (or a Condition's): also what Condition.wait uses to give the
    lock up while it waits and take it back after."""

    __slots__ = ()

    def _is_owned(self):
        return self._inner._is_owned()

    def _release_save(self):
        self._released()
        return self._inner._release_save()

    def _acquire_restore(self, state):
        self._inner._acquire_restore(state)
        self._acquired()

    def _recursion_count(self):
        return self._inner._recursion_count()


def _simple_queue(base, follower):
    """queue.SimpleQueue, each item carried with the signal its put left."""

    class SimpleQueue(base):
        def __init__(self):
            self._followed = follower.programs(1)  # not a pool's own work queue

        def put(self, item, block=True, timeout=None):
            if not self._followed:
                return base.put(self, item, block, timeout)
            sid = None if follower.quieted() else follower.signal()
            base.put(self, (sid, item), block, timeout)

        def put_nowait(self, item):
            self.put(item, False)

        def get(self, block=True, timeout=None):
            if not self._followed:
                return base.get(self, block, timeout)
            sid, item = base.get(self, block, timeout)
            if sid is not None and not follower.quieted():
                follower.wait(sid)
            return item

        def get_nowait(self):
            return self.get(False)

    SimpleQueue.__module__ = "queue"
    return SimpleQueue
