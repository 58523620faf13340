"""The capture never gives a verdict on what it did not check, and never writes what its checker
refuses: --check checks however the program ends, the launcher checks only files its own ranks
wrote, names and reasons are written as the loader takes them, and the capture's own troubles
(a full disk, a bad command line, a killed launcher, a second capture in the folder) never pass
for the program's. Each test is named for the harm it would let through. CPU, one or two ranks;
the tests that need the checker skip without SHARDCHECK_BIN."""

import json
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
ROOT = os.path.dirname(PYROOT)
sys.path.insert(0, PYROOT)

from shardcheck.capture import writer  # noqa: E402
from shardcheck.capture.recorder import Recorder  # noqa: E402

try:
    import torch
    HAVE_TORCH = True
except ImportError:
    if os.environ.get("SHARDCHECK_REQUIRE_TORCH"):
        raise
    HAVE_TORCH = False

BIN = os.environ.get("SHARDCHECK_BIN")
needs_checker = unittest.skipUnless(BIN and HAVE_TORCH, "SHARDCHECK_BIN is not set, or no torch")

# Every program below reads bytes nothing wrote: a check that ran says so, at line 3.
FINDING = "import torch\nx = torch.empty(4)\nx.sum()\n"
FOUND = "[uninitialized_read]"
CLEAN = "import torch\nx = torch.ones(4)\nx.sum()\n"


def env(**extra):
    values = dict(os.environ, PYTHONPATH=PYROOT, PYTHONDONTWRITEBYTECODE="1")
    values.update(extra)
    return values


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text).lstrip())


def capture(cwd, *args, timeout=120, preexec_fn=None, extra_env=None):
    """python3 -m shardcheck.capture ARGS in cwd: (exit status, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-m", "shardcheck.capture"] + list(args), cwd=cwd,
                       env=env(**(extra_env or {})), capture_output=True, text=True,
                       timeout=timeout, preexec_fn=preexec_fn)
    return p.returncode, p.stdout, p.stderr


def check(folder):
    p = subprocess.run([BIN, "run", folder], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def earlier_clean_capture(out, world):
    """A capture another run left in `out`, which the checker calls clean."""
    os.makedirs(out, exist_ok=True)
    for r in range(world):
        rec = Recorder(writer.rank_file(out, r), {"rank": r, "world_size": world})
        site = rec.site("earlier.py", 1, "<module>")
        rec.on_alloc(0x1000, 0, site)
        rec.op("aten::fill_", 0, [], [(0x1000, 64, 0, 64)], site)
        rec.op("aten::sum", 0, [(0x1000, 64, 0, 64)], [], site)
        rec.close()


def text_of(path):
    with open(path) as f:
        return f.read()


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@needs_checker
class CheckAfterTheProgramTest(unittest.TestCase):
    """--check with one process: the check runs whichever way the program ends, and the status
    is never 0 when the program failed or the check found something."""

    def run_program(self, ending, text=FINDING):
        with tempfile.TemporaryDirectory() as d:
            write(os.path.join(d, "prog.py"), text + ending)
            return capture(d, "--check", "--out", "cap", "--device", "cpu", "--", "prog.py")

    def test_sys_exit_zero_still_checks_and_reports_finding(self):
        for ending in ("import sys\nsys.exit(0)\n",
                       "import sys\ndef main():\n    return 0\nsys.exit(main())\n"):
            with self.subTest(ending=ending):
                code, out, err = self.run_program(ending)
                self.assertEqual(code, 1, out + err)
                self.assertIn(FOUND, out)

    def test_sys_exit_five_still_checks_and_does_not_exit_zero(self):
        code, out, err = self.run_program("import sys\nsys.exit(5)\n")
        self.assertNotEqual(code, 0, out + err)
        self.assertIn(FOUND, out)
        self.assertIn("exited with status 5", out)

    def test_an_exception_still_checks_keeps_its_traceback_and_does_not_exit_zero(self):
        code, out, err = self.run_program("raise ValueError('the program failed')\n")
        self.assertNotEqual(code, 0, out + err)
        self.assertIn(FOUND, out)
        self.assertIn("Traceback", err)
        self.assertIn("ValueError: the program failed", err)
        self.assertNotIn("__main__.py", err)  # the program's frames, not the capture's

    def test_os_exit_zero_still_checks_and_reports_finding(self):
        code, out, err = self.run_program("import os\nos._exit(0)\n")
        self.assertEqual(code, 1, out + err)
        self.assertIn(FOUND, out)

    def test_os_exit_zero_of_a_clean_program_exits_zero_only_after_its_check(self):
        code, out, err = self.run_program("import os\nos._exit(0)\n", text=CLEAN)
        self.assertEqual(code, 0, out + err)
        self.assertIn("clean   cap: no findings", out)

    def test_a_program_that_changes_directory_gets_its_own_capture_checked(self):
        # A clean capture named like --out where the program goes: checked instead, it was
        # the verdict on a program with a finding.
        with tempfile.TemporaryDirectory() as d:
            earlier_clean_capture(os.path.join(d, "elsewhere", "cap"), 1)
            write(os.path.join(d, "prog.py"), FINDING + "import os\nos.chdir('elsewhere')\n")
            code, out, err = capture(d, "--check", "--out", "cap", "--device", "cpu", "--",
                                     "prog.py")
        self.assertEqual(code, 1, out + err)
        self.assertIn(FOUND, out)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class LauncherFolderTest(unittest.TestCase):
    """--nproc-per-node: the launcher's status and verdict are about this launch's files."""

    def launch(self, d, out, *extra, program="prog.py", extra_env=None):
        return capture(d, "--nproc-per-node", "2", "--out", out, "--device", "cpu",
                       *extra, "--", program, extra_env=extra_env)

    def test_ranks_that_write_nothing_never_get_an_earlier_captures_clean_verdict(self):
        with tempfile.TemporaryDirectory() as d:
            earlier_clean_capture(os.path.join(d, "cap"), 2)
            if BIN:
                self.assertEqual(check(os.path.join(d, "cap"))[0], 0)
            # Each rank is killed while it starts (as one killed importing torch).
            write(os.path.join(d, "site", "sitecustomize.py"), """
                import os, signal
                if os.environ.get("SHARDCHECK_LAUNCHED"):
                    os.kill(os.getpid(), signal.SIGKILL)
                """)
            write(os.path.join(d, "prog.py"), FINDING)
            code, out, err = self.launch(
                d, "cap", *(["--check"] if BIN else []),
                extra_env={"PYTHONPATH": os.path.join(d, "site") + os.pathsep + PYROOT})
            self.assertEqual(code, 2, out + err)
            self.assertNotIn("clean", out)
            self.assertIn("not checked, no verdict: rank 0 left no file; rank 1 left no file",
                          err)
            self.assertEqual(sorted(os.listdir(os.path.join(d, "cap"))),
                             [".shardcheck-capture.lock"])

    def test_an_out_that_is_a_scenario_file_is_refused_before_any_rank_starts(self):
        # It was run as the scenario it is, and its verdict given as the program's.
        with tempfile.TemporaryDirectory() as d:
            write(os.path.join(d, "x.yaml"), "name: x\n")
            write(os.path.join(d, "prog.py"), "open('ran', 'w').close()\n" + FINDING)
            code, out, err = self.launch(d, "x.yaml", "--check")
            self.assertEqual(code, 2, out + err)
            self.assertEqual(err.strip().count("\n"), 0, err)
            self.assertIn("--out x.yaml exists and is not a folder", err)
            self.assertFalse(os.path.exists(os.path.join(d, "ran")))
            with open(os.path.join(d, "x.yaml")) as f:
                self.assertEqual(f.read(), "name: x\n")

    @needs_checker
    def test_a_rank_that_fails_fails_the_launcher_even_when_its_capture_checks_clean(self):
        # Rank 1 ends its program (its file finished and clean), then exits 3 at its exit.
        with tempfile.TemporaryDirectory() as d:
            write(os.path.join(d, "prog.py"), CLEAN + "import atexit, os\n"
                  "if os.environ['RANK'] == '1':\n"
                  "    atexit.register(lambda: os._exit(3))\n")
            code, out, err = self.launch(d, "cap", "--check")
            self.assertIn("clean   cap: no findings", out)
            self.assertEqual(code, 1, out + err)
            self.assertIn("rank 1: exit 3", err)

    def test_ranks_do_not_outlive_a_launcher_killed_with_sigkill(self):
        with tempfile.TemporaryDirectory() as d:
            write(os.path.join(d, "prog.py"), """
                import os, time
                import torch
                torch.ones(4).sum()
                with open("pid-" + os.environ["RANK"], "w") as f:
                    f.write(str(os.getpid()))
                time.sleep(120)
                """)
            launcher = subprocess.Popen(
                [sys.executable, "-m", "shardcheck.capture", "--nproc-per-node", "2", "--out",
                 "cap", "--device", "cpu", "--", "prog.py"], cwd=d, env=env(),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            pids = self.wait_for_pids(d, launcher)
            try:
                launcher.kill()
                launcher.wait()
                deadline = time.monotonic() + 20
                while any(map(alive, pids)) and time.monotonic() < deadline:
                    time.sleep(0.1)
                self.assertEqual([p for p in pids if alive(p)], [])
                for r in range(2):
                    self.assertIn("stopped by SIGTERM", read(writer.rank_file(
                        os.path.join(d, "cap"), r))[-1].get("partial", ""))
            finally:
                for p in pids:
                    if alive(p):
                        os.kill(p, signal.SIGKILL)

    def wait_for_pids(self, d, launcher):
        deadline = time.monotonic() + 90
        names = [os.path.join(d, "pid-%d" % r) for r in range(2)]
        while time.monotonic() < deadline and launcher.poll() is None:
            try:
                return [int(text_of(n)) for n in names]
            except (OSError, ValueError):
                time.sleep(0.1)
        launcher.kill()
        self.fail("the ranks did not start")


def alive(pid):
    """Running: not gone and not a zombie no one reaped."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class CaptureTroublesTest(unittest.TestCase):
    """The capture's own troubles are said as such, and the program is not made to pay."""

    def test_a_full_disk_mid_capture_neither_aborts_the_program_nor_passes_for_whole(self):
        # The file may grow to 64 KiB: its first write of 1 MiB of records fails part way.
        def small_files():
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

        with tempfile.TemporaryDirectory() as d:
            write(os.path.join(d, "prog.py"), """
                import torch
                x = torch.ones(4)
                for _ in range(20000):
                    x.add_(1)
                print("the program finished:", int(x[0]))
                """)
            check = ["--check"] if BIN else []
            code, out, err = capture(d, *check, "--out", "cap", "--device", "cpu", "--",
                                     "prog.py", preexec_fn=small_files)
            self.assertIn("the program finished: 20001", out, err)
            self.assertNotIn("Traceback", err)
            self.assertIn("the capture stopped: writing", err)
            path = writer.rank_file(os.path.join(d, "cap"), 0)
            self.assertLessEqual(os.path.getsize(path), 64 << 10)
            rows = read(path)  # every line whole
            self.assertIn("the capture stopped", rows[-1].get("partial", ""))
            if BIN:
                self.assertEqual(code, 1, out + err)
                self.assertIn("PARTIAL cap", out)

    def test_usage_errors_are_one_line_and_exit_2_never_a_traceback(self):
        with tempfile.TemporaryDirectory() as d:
            write(os.path.join(d, "prog.py"), "open('ran', 'w').close()\n")
            cases = [(["--out", "cap", "--bogus"], {}),
                     (["--out", "cap", "--timeout", "nan"], {}),
                     (["--out", "cap", "--nproc-per-node", "0"], {}),
                     (["--out", "prog.py"], {}),
                     (["--out", "cap"], {"TORCH_CUDA_SANITIZER": "1"})]
            if not torch.cuda.is_available():
                cases.append((["--out", "cap", "--device", "cuda"], {}))
            for args, extra in cases:
                with self.subTest(args=args, env=extra):
                    code, out, err = capture(d, *args, "--", "prog.py", extra_env=extra)
                    self.assertEqual(code, 2, err)
                    self.assertNotIn("Traceback", err)
                    self.assertEqual(err.strip().count("\n"), 0, err)
                    self.assertTrue(err.startswith("python3 -m shardcheck.capture: error: "), err)
                    self.assertFalse(os.path.exists(os.path.join(d, "ran")))

    def test_two_captures_into_one_folder_at_once_cannot_both_succeed(self):
        with tempfile.TemporaryDirectory() as d:
            write(os.path.join(d, "prog.py"), """
                import os, time
                import torch
                torch.ones(4).sum()
                open("started", "w").close()
                deadline = time.monotonic() + 600  # till the test says go
                while not os.path.exists("go") and time.monotonic() < deadline:
                    time.sleep(0.05)
                """)
            first = subprocess.Popen([sys.executable, "-m", "shardcheck.capture", "--out", "cap",
                                      "--device", "cpu", "--", "prog.py"], cwd=d, env=env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                deadline = time.monotonic() + 60
                while not os.path.exists(os.path.join(d, "started")):
                    self.assertLess(time.monotonic(), deadline, "the first did not start")
                    if first.poll() is not None:
                        self.fail("the first capture ended: %s" % (first.communicate(),))
                    time.sleep(0.05)
                code, out, err = capture(d, "--out", "cap", "--device", "cpu", "--", "prog.py")
                self.assertEqual(code, 2, err)
                self.assertIn("another capture is writing into it (pid %d)" % first.pid, err)
            finally:
                open(os.path.join(d, "go"), "w").close()
                out, err = first.communicate(timeout=60)
            self.assertEqual(first.returncode, 0, err)
            rows = read(writer.rank_file(os.path.join(d, "cap"), 0))
            self.assertEqual(rows[-1], {"k": "end", "records": len(rows) - 2})

    @needs_checker
    def test_the_printed_command_for_a_folder_named_dash_rf_runs_as_printed(self):
        with tempfile.TemporaryDirectory() as d:
            write(os.path.join(d, "prog.py"), CLEAN)
            code, out, err = capture(d, "--out=-rf", "--device", "cpu", "--", "prog.py")
            self.assertEqual(code, 0, err)
            line = re.search(r"check it with: shardcheck (.*)", err).group(1)
            self.assertEqual(line, "run ./-rf")
            p = subprocess.run(shlex.quote(BIN) + " " + line, shell=True, cwd=d,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("clean   -rf: no findings", p.stdout)


class LoaderLimitsTest(unittest.TestCase):
    """The writer holds the C++ loader's own bounds, read from its source."""

    def test_the_writers_limits_are_the_loaders(self):
        with open(os.path.join(ROOT, "core", "scenario", "captured_program.hpp")) as f:
            hpp = f.read().replace("'", "")
        with open(os.path.join(ROOT, "core", "scenario", "captured_program.cpp")) as f:
            cpp = f.read()

        def constant(text, name):
            return int(re.search(r"\b%s = (?:int64_t\{)?(\d+)" % name, text).group(1))

        self.assertEqual(constant(cpp, "kMaxNameBytes"), writer.MAX_NAME_BYTES)
        self.assertEqual(constant(hpp, "kMaxRecordsPerRank"), writer.MAX_RECORDS_PER_RANK)
        self.assertEqual(constant(hpp, "kMaxRecords"), writer.MAX_RECORDS)

    def test_text_the_loader_refuses_is_written_as_escapes_and_cut_to_its_length(self):
        self.assertEqual(writer.clean_text("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m")
        self.assertEqual(writer.clean_text("a\nb\tc\x7f\x85"), "a\\nb\\tc\\x7f\\x85")
        self.assertEqual(writer.clean_text("d\udcff/p.py"), "d\\xff/p.py")
        self.assertEqual(writer.clean_text("tr\u00e4in.py"), "tr\u00e4in.py")
        long = writer.clean_text("\u00e4" * 3000)  # two bytes each
        self.assertLessEqual(len(long.encode("utf-8")), writer.MAX_NAME_BYTES)
        self.assertTrue(long.endswith("..."))

    @needs_checker
    def test_a_rank_past_the_record_limit_ends_partial_instead_of_refused_whole(self):
        with tempfile.TemporaryDirectory() as d, \
                mock.patch.object(writer, "MAX_RECORDS_PER_RANK", 12):
            earlier_clean_capture_many(d, ops=20)
            rows = read(writer.rank_file(d, 0))
            self.assertLessEqual(len(rows) - 2, 12)
            self.assertIn("the checker's limit", rows[-1]["partial"])
            code, out = check(d)
            self.assertEqual(code, 1, out)
            self.assertIn("PARTIAL", out)

    def test_a_write_that_fails_ends_the_capture_not_the_program(self):
        with tempfile.TemporaryDirectory() as d:
            w = writer.Writer(os.path.join(d, "rank-0.jsonl"), {"rank": 0, "world_size": 1})
            w._fd, first = os.open("/dev/full", os.O_WRONLY), w._fd
            os.close(first)
            w.write({"k": "device_sync", "at": 0})
            w.flush()  # ENOSPC: said on stderr, never raised
            self.assertTrue(w.closed)
            self.assertIn("No space left on device", w.failure)
            w.write({"k": "device_sync", "at": 0})
            w.close()

    def test_a_failed_write_to_a_device_path_never_deletes_the_device(self):
        # A rank file nothing reached is removed, but only a regular file: the writer pointed at
        # /dev/null that fails must leave /dev/null a device (removing it broke every program
        # on the machine that writes there).
        with tempfile.TemporaryDirectory() as d:
            fifo = os.path.join(d, "not-a-file")
            os.mkfifo(fifo)
            keep = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so opening for writing works
            try:
                w = writer.Writer(fifo, {"rank": 0, "world_size": 1})
                w._fd, first = os.open("/dev/full", os.O_WRONLY), w._fd
                os.close(first)
                w.write({"k": "device_sync", "at": 0})
                w.flush()
                self.assertTrue(w.closed)
                self.assertTrue(os.path.exists(fifo), "the writer removed a path that is no regular file")
            finally:
                os.close(keep)


def earlier_clean_capture_many(out, ops):
    rec = Recorder(writer.rank_file(out, 0), {"rank": 0, "world_size": 1})
    site = rec.site("many.py", 1, "<module>")
    rec.on_alloc(0x1000, 0, site)
    rec.op("aten::fill_", 0, [], [(0x1000, 64, 0, 64)], site)
    for _ in range(ops):
        rec.op("aten::add_", 0, [(0x1000, 64, 0, 64)], [(0x1000, 64, 0, 64)], site)
    rec.close()


@needs_checker
class RefusedTextTest(unittest.TestCase):
    """Text a program puts in its capture (a message, a thread's or parameter's name, a function,
    a folder) reaches the file as the loader takes it: the capture is checked, its finding
    named, never refused whole (exit 2)."""

    def capture_here(self, d, body):
        from shardcheck import capture as capture_in
        with capture_in(d, device="cpu"):
            x = torch.empty(4)
            x.sum()  # the finding
            body()

    def assert_checked(self, d):
        code, out = check(d)
        self.assertEqual(code, 1, out)
        self.assertIn(FOUND, out)
        return out

    def strings(self, d):
        with open(writer.rank_file(d, 0), encoding="utf-8") as f:
            return f.read()

    def test_colour_escapes_in_an_exception_message_do_not_make_the_capture_refused(self):
        def body():
            raise RuntimeError("\x1b[31mfailed\x1b[0m")
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(RuntimeError):
                self.capture_here(d, body)
            out = self.assert_checked(d)
            self.assertIn("raised RuntimeError: \\x1b[31mfailed\\x1b[0m", out)

    def test_a_thread_named_with_a_newline_does_not_make_the_capture_refused(self):
        def body():
            t = threading.Thread(target=lambda: torch.ones(4).add_(1), name="loader\nworker")
            t.start()
            t.join()
        with tempfile.TemporaryDirectory() as d:
            self.capture_here(d, body)
            self.assertIn('"loader\\\\nworker"', self.strings(d))
            self.assert_checked(d)

    def test_a_parameter_dict_key_with_a_tab_does_not_make_the_capture_refused(self):
        def body():
            params = torch.nn.ParameterDict({"w\tb": torch.nn.Parameter(torch.ones(4))})
            opt = torch.optim.SGD(params.parameters(), lr=0.1)
            params["w\tb"].sum().backward()
            opt.step()
        with tempfile.TemporaryDirectory() as d:
            self.capture_here(d, body)
            self.assertIn("w\\\\tb", self.strings(d))
            self.assert_checked(d)

    def test_a_function_name_past_the_loaders_length_does_not_make_the_capture_refused(self):
        name = "f" * 5000
        scope = {"torch": torch}
        exec("def %s():\n    torch.ones(4).add_(1)\n" % name, scope)
        with tempfile.TemporaryDirectory() as d:
            self.capture_here(d, scope[name])
            funcs = [r["func"] for r in read(writer.rank_file(d, 0)) if r.get("k") == "site"]
            self.assertIn("f" * 4093 + "...", funcs)
            self.assert_checked(d)

    def test_a_script_under_a_folder_whose_name_is_not_utf8_does_not_make_the_capture_refused(self):
        with tempfile.TemporaryDirectory() as d:
            folder = os.path.join(os.fsencode(d), b"run\xff")
            os.makedirs(folder)
            with open(os.path.join(folder, b"prog.py"), "w") as f:
                f.write(FINDING)
            p = subprocess.run([os.fsencode(sys.executable), b"-m", b"shardcheck.capture",
                                b"--check", b"--out", b"cap", b"--device", b"cpu", b"--",
                                os.path.join(b"run\xff", b"prog.py")], cwd=d, env=env(),
                               capture_output=True, timeout=120)
            out = p.stdout.decode("utf-8", "replace")
            self.assertEqual(p.returncode, 1, out + p.stderr.decode("utf-8", "replace"))
            self.assertIn(FOUND, out)
            self.assertIn("run\\xff/prog.py:3", out)


if __name__ == "__main__":
    unittest.main()
