"""Tests of train.py's checkpoint contract, each running it as a process.

Run with a Python that has PyTorch: python3 -m unittest -v test_train
(examples/python/python_test.go runs them in make test).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "train.py")
STEP = re.compile(r"^step=(\d+) loss=(\S+)$", re.M)


def environment(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "POD_NAME", "CHECKPOINT_DIR", "CHECKPOINT_URI")}
    env["OMP_NUM_THREADS"] = "1"  # the same sums in the same order: runs compare exactly
    env.update(extra)
    return env


class Run:
    """train.py as a process, its output collected line by line."""

    def __init__(self, directory, *args, env=None):
        self.proc = subprocess.Popen(
            [sys.executable, TRAIN, "--checkpoint-dir", directory, "--notice-file", os.path.join(directory, "..", "annotations"), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env or environment())
        self.lines = []

    def wait_for(self, pattern, timeout=60):
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if regex.search(line):
                return line
        raise AssertionError(f"no line matching {pattern!r}:\n" + self.output())

    def finish(self, timeout=120):
        out, _ = self.proc.communicate(timeout=timeout)
        self.lines.extend(out.splitlines())
        return self.proc.returncode

    def output(self):
        return "\n".join(self.lines)

    def steps(self):
        return [(int(m.group(1)), m.group(2)) for m in STEP.finditer(self.output())]


class TrainerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.ckpt = os.path.join(self.tmp, "ckpt")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_preempted_and_resumed_run_equals_an_uninterrupted_one(self):
        # Run whole in a "pod" without a service account token: recording the
        # checkpoint time fails, and training goes on.
        env = environment(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT="1", POD_NAME="trainer-0")
        whole = Run(os.path.join(self.tmp, "whole"), "--steps", "120", "--save-every", "25",
                    "--service-account-dir", os.path.join(self.tmp, "none"), env=env)
        self.assertEqual(whole.finish(), 0, whole.output())
        self.assertIn("could not record the checkpoint time on the pod", whole.output())

        first = Run(self.ckpt, "--steps", "120", "--save-every", "25", "--step-seconds", "0.02")
        first.wait_for(r"^step=60 ")
        first.proc.send_signal(signal.SIGTERM)
        self.assertEqual(first.finish(), 143, first.output())
        self.assertRegex(first.output(), r"checkpoint saved step=\d+ reason=sigterm")
        second = Run(self.ckpt, "--steps", "120", "--save-every", "25")
        self.assertEqual(second.finish(), 0, second.output())

        done = [s for s, _ in first.steps()]
        self.assertRegex(second.output(), rf"resumed from checkpoint checkpoint=ckpt-0*{done[-1] + 1}\.pt step={done[-1] + 1}")
        # Every step once, and each loss as in the run never stopped: the
        # model, optimizer, random state and data position all came back.
        self.assertEqual(first.steps() + second.steps(), whole.steps())

    def test_failed_save_on_sigterm_still_exits_143(self):
        run = Run(self.ckpt, "--steps", "100000", "--save-every", "0", "--step-seconds", "0.01")
        run.wait_for(r"^step=5 ")
        shutil.rmtree(self.ckpt)
        with open(self.ckpt, "w") as f:  # the directory is gone: no save can succeed
            f.write("not a directory")
        run.proc.send_signal(signal.SIGTERM)
        self.assertEqual(run.finish(), 143, run.output())
        self.assertIn("the checkpoint on SIGTERM failed", run.output())

    def test_checkpoints_hold_only_steps_that_ran_and_a_torn_one_is_skipped(self):
        run = Run(self.ckpt, "--steps", "45", "--save-every", "10", "--keep", "2")
        self.assertEqual(run.finish(), 0, run.output())
        # The final checkpoint holds the 45 steps that ran, no more.
        self.assertEqual(sorted(os.listdir(self.ckpt)), ["ckpt-000000040.pt", "ckpt-000000045.pt"])
        longer = Run(self.ckpt, "--steps", "50", "--save-every", "10", "--keep", "2")
        self.assertEqual(longer.finish(), 0, longer.output())
        self.assertEqual([s for s, _ in longer.steps()], list(range(45, 50)))
        self.assertEqual(sorted(os.listdir(self.ckpt)), ["ckpt-000000045.pt", "ckpt-000000050.pt"])

        with open(os.path.join(self.ckpt, "ckpt-000000050.pt"), "r+b") as f:
            f.truncate(100)  # torn, as if written in place and killed
        with open(os.path.join(self.ckpt, ".ckpt-000000051.pt.tmp-99"), "wb") as f:
            f.write(b"half a save")  # a save killed before its rename
        resumed = Run(self.ckpt, "--steps", "52", "--save-every", "10", "--keep", "2")
        self.assertEqual(resumed.finish(), 0, resumed.output())
        self.assertIn("skipping a checkpoint that does not load", resumed.output())
        self.assertEqual(resumed.steps()[0][0], 45)
        self.assertNotIn(".ckpt-000000051.pt.tmp-99", os.listdir(self.ckpt))

    def test_a_notice_gets_one_checkpoint_timed_to_it(self):
        notice_file = os.path.join(self.tmp, "annotations")

        def notice(at):
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
            with open(notice_file + ".tmp", "w") as f:
                f.write(f'gleaner.dev/reclaim-notice="{stamp}"\nteam="llm"\n')
            os.replace(notice_file + ".tmp", notice_file)

        run = Run(self.ckpt, "--steps", "100000", "--save-every", "0", "--step-seconds", "0.01", "--save-estimate", "0.1")
        run.wait_for(r"^step=5 ")
        first = time.time() + 6
        notice(first)
        run.wait_for(r"reclaim notice: checkpointing")
        moved = first + 3
        notice(moved)  # the forecast moved it before its checkpoint was due
        saved = run.wait_for(r"checkpoint saved .*reason=notice", timeout=30)
        at = float(re.search(r"time=(\S+)", saved).group(1))
        # Due at the moved time less twice the save's 0.1 s and a second; the
        # notice's times are whole seconds, so up to a second earlier.
        self.assertGreater(at, moved - 2.5, "saved for the first notice, not the moved one")
        self.assertLess(at, moved, "saved after the noticed eviction")
        time.sleep(1.5)
        run.proc.send_signal(signal.SIGTERM)
        self.assertEqual(run.finish(), 143, run.output())
        self.assertEqual(len(re.findall(r"reason=notice", run.output())), 1, run.output())

    def test_bad_arguments_are_usage_errors(self):
        for args, says in [
            (["--checkpoint-dir", "s3://bucket/run"], "this trainer writes to a directory"),
            ([], "no checkpoint location"),
        ]:
            proc = subprocess.run([sys.executable, TRAIN, *args], capture_output=True, text=True, env=environment())
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn(says, proc.stderr)


if __name__ == "__main__":
    unittest.main()
