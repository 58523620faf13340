#!/usr/bin/env python3
"""Splits a profile of `shardcheck run DIR` into the parts docs/performance.md names: each
sample goes to the innermost frame on its stack that matches a part's pattern, and the share of
it spent in page faults or in malloc/free is given beside.

    perf record -e cpu-clock -F 2000 --call-graph dwarf,16384 -o prof.data build/cli/shardcheck run DIR --runs 1
    perf script -i prof.data -F comm,tid,time,ip,sym > prof.txt
    python3 bench/capture/perf_parts.py prof.txt
"""
import re, sys, collections
cats = [  # (category, regex on symbol); checked innermost frame first
    ("load: json parse", r"JsonLine::"),
    ("load: line reading", r"Lines::next|Lines::fill"),
    ("load: interning", r"core::.*intern"),
    ("load: other", r"load_captured_program|RankLoader|read_headers|generalize_one_sided"),
    ("value checks", r"check_captured_values|ValueFlow"),
    ("teardown: ~World", r"World::~World|~RaceDetector|~Shadow"),
    ("sched: event name interning", r"SimRuntime::create_event|RankCalls::event"),
    ("sched: allocator pick", r"BlockPool::|Heap::allocate|Heap::release"),
    ("sched: race detector", r"RaceDetector::|UninitDetector|Detector::"),
    ("sched: shadow", r"Shadow::"),
    ("sched: clocks", r"VectorClock::"),
    ("sched: World::intern", r"World::intern|cached_name"),
    ("sched: new_op", r"World::new_op"),
    ("sched: alloc/free", r"World::alloc|World::free"),
    ("sched: interpreter", r"run_captured_program|RankCalls|IssueOrder|define_pre"),
    ("sched: scheduler", r"World::schedule|World::step_|RunQueue|World::run|World::refresh|World::pick"),
    ("sched: execute", r"World::execute|World::touch|World::begin|World::finish"),
    ("sched: issue", r"World::|SimRuntime::"),
    ("report/cli", r"shardcheck::run::|shardcheck::cli::|reports::"),
]
cre = [(c, re.compile(p)) for c, p in cats]
samples = collections.Counter(); inner = collections.Counter()
total = 0
frames = []
def flush():
    global total, frames
    if not frames: return
    total += 1
    leaf = frames[0]
    kind = "malloc" if re.search(r"malloc|free|_int_|operator new|operator delete|unlink_chunk|consolidate", leaf) else ("kernel/page" if re.search(r"^ffffffff|pvm_|page|\[k\]", leaf) else "")
    for f in frames:
        for c, r in cre:
            if r.search(f):
                samples[c] += 1; inner[(c, kind)] += 1; frames = []; return
    samples["(other)"] += 1; inner[("(other)", kind)] += 1
    frames = []
for line in open(sys.argv[1], errors="replace"):
    if not line.strip(): flush(); continue
    if not line.startswith("\t") and not line.startswith(" "): flush(); continue
    parts = line.strip().split(None, 1)
    sym = parts[1] if len(parts) > 1 else ""
    prev = None
    while prev != sym:
        prev = sym; sym = re.sub(r"<[^<>]*>", "", sym)
    frames.append(parts[0] + " " + sym)
flush()
for c, n in samples.most_common():
    sub = ", ".join("%s %.1f%%" % (k or "self", 100.0 * v / total) for (cc, k), v in inner.items() if cc == c and k)
    print("%-32s %5.1f%%  %s" % (c, 100.0 * n / total, sub))
print("samples", total)
