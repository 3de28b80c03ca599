#!/usr/bin/env python3
"""A PyTorch trainer that keeps Gleaner's checkpoint contract.

Gleaner lends idle inference GPUs to best-effort jobs and takes them back
with a SIGTERM and a grace period. This trainer (a small model on synthetic
data; swap in your own) shows everything a job must do to lose no work and
repeat none:

- On SIGTERM: finish the step in flight, save a checkpoint, exit 143. It
  exits 143 even when that save fails: the run was interrupted and must be
  retried (it resumes from the newest checkpoint that is there). Exit codes
  137 and 143 are what Argo's retry rule and the Job's pod failure policy
  treat as a preemption, so the trainer never uses them for its own errors.
- On start: resume from the newest whole checkpoint (model, optimizer, every
  random-number state including CUDA's, and the data position), skipping
  any that does not load.
- Every --save-every steps: a checkpoint, written atomically (a temporary
  file, fsync, rename), keeping the newest --keep.
- When the reclaim notice (gleaner.dev/reclaim-notice in the pod's
  annotations, a downward API file) appears: one checkpoint timed to finish
  by the noticed time, training on meanwhile. A notice that moves re-times
  that checkpoint instead of saving again; one withdrawn before then costs
  nothing.
- After each checkpoint: its time in the pod's gleaner.dev/last-checkpoint
  annotation, and in gleaner.dev/save-duration how long a SIGTERM save
  takes (the longest step and the longest save of this run), through the
  API with the pod's service account, so the reclaimer takes the pods that
  lose the least work first and gives a pod it must take at once that long
  (and 10 s to exit) rather than its whole grace period. A pod that may not
  do that (no token, no RBAC) trains on all the same.

A checkpoint holds the number of steps completed, so a resumed run starts at
the first step that did not run. Each step prints one line, `step=N
loss=X`; a run that is interrupted and resumed prints each step exactly once
across its pods.

Run it with `kubectl gleaner submit` (docs/researchers.md):

    kubectl gleaner submit train -n research --image IMAGE --gpus 1 \\
        --checkpoint-pvc train-ckpt --service-account gleaner-research-step \\
        -- python3 /app/train.py --steps 100000

It uses nothing but PyTorch and Python's standard library.
"""

import argparse
import datetime
import json
import math
import os
import random
import signal
import ssl
import sys
import time
import urllib.request

import torch

EXIT_PREEMPTED = 143  # 128 + SIGTERM: what a preempted step exits with
EXIT_USAGE = 2
NOTICE_KEY = "gleaner.dev/reclaim-notice"
LAST_CHECKPOINT_KEY = "gleaner.dev/last-checkpoint"
SAVE_DURATION_KEY = "gleaner.dev/save-duration"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# torch.load(weights_only=True) runs no code from the file, and is the default
# from PyTorch 2.6. PyTorch 1.x's restricted loader cannot read Python floats
# (an optimizer's state has them): there it loads the whole pickle, which is
# as safe as the directory the checkpoints are in.
WEIGHTS_ONLY = int(torch.__version__.split(".")[0]) >= 2


def log(message, **fields):
    parts = [message] + [f"{k}={v}" for k, v in fields.items()]
    print(" ".join(parts), flush=True)


# --- The contract's parts, independent of the model -------------------------

class Preempted:
    """Remembers a SIGTERM; the loop checks it between steps."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        if not self.requested:
            log("SIGTERM: saving a checkpoint after this step, then exiting", signal=signum)
        self.requested = True


class Checkpoints:
    """Checkpoints in one directory: ckpt-<steps completed>.pt, newest kept."""

    def __init__(self, directory, keep):
        self.directory = directory
        self.keep = keep
        os.makedirs(directory, exist_ok=True)
        # A save killed half-way leaves its temporary file: never loaded, but
        # as large as a checkpoint. One trainer writes here at a time.
        for name in os.listdir(directory):
            if name.startswith(".ckpt-") and ".pt.tmp-" in name:
                os.unlink(os.path.join(directory, name))

    def _names(self):
        names = [n for n in os.listdir(self.directory) if n.startswith("ckpt-") and n.endswith(".pt")]
        return sorted(names, reverse=True)  # zero-padded: newest first

    def save(self, state, steps):
        final = os.path.join(self.directory, f"ckpt-{steps:09d}.pt")
        tmp = os.path.join(self.directory, f".ckpt-{steps:09d}.pt.tmp-{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)  # atomic: a reader sees the old file or the whole new one
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself survives a crash
        finally:
            os.close(fd)
        for old in self._names()[self.keep:]:
            try:
                os.unlink(os.path.join(self.directory, old))
            except OSError:
                pass

    def latest(self, device):
        """The newest checkpoint that loads, or None."""
        for name in self._names():
            path = os.path.join(self.directory, name)
            try:
                # A checkpoint is a dict of tensors, numbers and strings.
                state = torch.load(path, map_location=device, weights_only=WEIGHTS_ONLY)
                if not isinstance(state, dict) or "steps" not in state:
                    raise ValueError("not a checkpoint of this trainer")
            except Exception as e:
                log("skipping a checkpoint that does not load", path=path, error=repr(e))
                continue
            return name, state
        return None, None


def read_notice(path):
    """The reclaim notice's expected eviction time, or None.

    The downward API writes one key="value" line per annotation, the value
    quoted as Go quotes strings (which JSON reads for these values), and
    keeps the file current as the annotations change.
    """
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None  # not mounted (yet): no notice
    for line in lines:
        key, _, value = line.partition("=")
        if key != NOTICE_KEY:
            continue
        try:
            text = json.loads(value)
            return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            log("ignoring an unreadable reclaim notice", line=line)
    return None


class NoticeTimer:
    """Times one checkpoint to finish by the noticed eviction.

    A checkpoint started at the noticed time minus twice the last save's
    duration and a second finishes in time with room to spare; one due
    already starts at once. A notice that moves moves that time; it does not
    add a save. A withdrawn notice cancels it.
    """

    def __init__(self, path, save_estimate):
        self.path = path
        self.save_took = save_estimate  # until a save is measured
        self.notice = None
        self.due = None
        self.last_read = 0.0

    def poll(self, now):
        if self.path is None or now - self.last_read < 1.0:
            return  # the kubelet updates the file within a minute: once a second is plenty
        self.last_read = now
        notice = read_notice(self.path)
        if notice == self.notice:
            return
        if notice is None:
            log("reclaim notice withdrawn: no checkpoint for it")
            self.due = None
        else:
            self.due = notice - 2 * self.save_took - 1.0
            log("reclaim notice: checkpointing before the expected eviction",
                eviction=_iso(notice), checkpoint_at=_iso(self.due))
        self.notice = notice

    def take_due(self, now):
        """True once, when the notice's checkpoint should start."""
        if self.due is not None and now >= self.due:
            self.due = None
            return True
        return False


def record_checkpoint(when, took, service_account_dir):
    """Write the checkpoint's time into this pod's last-checkpoint annotation,
    and took (seconds from SIGTERM to a saved checkpoint, at most) into its
    save-duration one.

    Best effort: outside a cluster, without a token or without the RBAC to
    patch pods it logs why and returns; the checkpoint stands either way.
    Bounded at 5 seconds, so it does not eat the grace period.
    """
    try:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        pod = os.environ["POD_NAME"]
        namespace = os.environ.get("POD_NAMESPACE")
        if not namespace:
            with open(os.path.join(service_account_dir, "namespace")) as f:
                namespace = f.read().strip()
        with open(os.path.join(service_account_dir, "token")) as f:
            token = f.read().strip()
        if ":" in host:
            host = f"[{host}]"  # IPv6
        stamp = datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        # A Go duration, rounded up to a tenth of a second.
        save = f"{math.ceil(took * 10) / 10:.1f}s"
        body = json.dumps({"metadata": {"annotations": {LAST_CHECKPOINT_KEY: stamp, SAVE_DURATION_KEY: save}}}).encode()
        request = urllib.request.Request(
            f"https://{host}:{port}/api/v1/namespaces/{namespace}/pods/{pod}", data=body, method="PATCH",
            headers={"Authorization": "Bearer " + token, "Content-Type": "application/merge-patch+json"})
        tls = ssl.create_default_context(cafile=os.path.join(service_account_dir, "ca.crt"))
        with urllib.request.urlopen(request, context=tls, timeout=5):
            pass
    except KeyError as e:
        log("not recording the checkpoint time: not in a pod", missing=str(e))
    except Exception as e:
        log("could not record the checkpoint time on the pod", error=repr(e))


def _iso(ts):
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat(timespec="seconds")


# --- The model, the data and the state to save -------------------------------

class Data:
    """A synthetic regression set, visited in a shuffled order per epoch.

    The position (epoch, offset) is all a resumed run needs: each epoch's
    order comes from the seed and the epoch alone.
    """

    def __init__(self, seed, samples, features):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(samples, features, generator=g)
        w = torch.randn(features, 1, generator=g)
        self.y = torch.tanh(self.x @ w) + 0.05 * torch.randn(samples, 1, generator=g)
        self.seed = seed
        self.epoch, self.offset = 0, 0
        self._order = self._shuffle()

    def _shuffle(self):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(len(self.x), generator=g)

    def next_batch(self, size):
        if self.offset + size > len(self.x):
            self.epoch, self.offset = self.epoch + 1, 0
            self._order = self._shuffle()
        idx = self._order[self.offset:self.offset + size]
        self.offset += size
        return self.x[idx], self.y[idx]

    def position(self):
        return {"epoch": self.epoch, "offset": self.offset}

    def seek(self, position):
        self.epoch, self.offset = position["epoch"], position["offset"]
        self._order = self._shuffle()


def rng_state():
    version, internal, gauss = random.getstate()
    state = {"torch": torch.get_rng_state(), "python": [version, list(internal), gauss]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state):
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state:
        if torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda"])
        else:
            log("the checkpoint's CUDA random state is for other devices; not restored")


def parse_args(argv):
    p = argparse.ArgumentParser(description="A PyTorch trainer that keeps Gleaner's checkpoint contract.")
    default_dir = os.environ.get("CHECKPOINT_DIR") or os.environ.get("CHECKPOINT_URI")
    p.add_argument("--checkpoint-dir", default=default_dir,
                   help="directory of the checkpoints; a retried pod must get the same one "
                        "(default: $CHECKPOINT_DIR, which submit --checkpoint-pvc sets, else a local "
                        "$CHECKPOINT_URI)")
    p.add_argument("--steps", type=int, default=1000, help="steps to train in all")
    p.add_argument("--save-every", type=int, default=100, help="a checkpoint every N steps (0: only on SIGTERM, notices and the end)")
    p.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    p.add_argument("--notice-file", default="/etc/podinfo/annotations",
                   help="the pod's annotations from the downward API, where the reclaim notice appears")
    p.add_argument("--service-account-dir", default=SERVICE_ACCOUNT_DIR,
                   help="where the pod's service account token is mounted")
    p.add_argument("--save-estimate", type=float, default=10.0,
                   help="seconds a save is expected to take until one is measured (times the notice's checkpoint)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--step-seconds", type=float, default=0.0, help="sleep after each step (to watch a tiny run be preempted)")
    args = p.parse_args(argv)
    if not args.checkpoint_dir:
        p.error("no checkpoint location: pass --checkpoint-dir, or submit with --checkpoint-pvc "
                "(a checkpoint in the container's own filesystem dies with the pod)")
    if "://" in args.checkpoint_dir:
        scheme = args.checkpoint_dir.split("://", 1)[0]
        if scheme != "file":
            p.error(f"--checkpoint-dir {args.checkpoint_dir}: this trainer writes to a directory; mount your "
                    f"{scheme}:// store as one (submit --checkpoint-pvc with a CSI driver for it), "
                    f"or replace Checkpoints.save and latest with your store's client (one PUT is atomic)")
        args.checkpoint_dir = args.checkpoint_dir[len("file://"):]
    for name in ("steps", "keep", "batch_size", "hidden"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.save_every < 0 or args.step_seconds < 0 or not args.save_estimate > 0 or not args.lr > 0:
        p.error("--save-every and --step-seconds must not be negative, --save-estimate and --lr must be positive")
    return args


def main(argv):
    preempted = Preempted()  # first: a SIGTERM during start-up is handled by the contract too
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    data = Data(args.seed, samples=1024, features=16)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, args.hidden), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(args.hidden, 1),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    checkpoints = Checkpoints(args.checkpoint_dir, args.keep)

    steps = 0  # steps completed: the next step to run
    name, state = checkpoints.latest(device)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        data.seek(state["data"])
        steps = state["steps"]
        log("resumed from checkpoint", checkpoint=name, step=steps)
    else:
        log("no checkpoint: starting fresh", directory=args.checkpoint_dir)

    notices = NoticeTimer(args.notice_file, args.save_estimate)
    saved = steps if state is not None else -1  # the steps the newest checkpoint holds
    longest_step = longest_save = 0.0  # seconds: a SIGTERM waits for both

    def save(reason):
        nonlocal saved, longest_save
        if saved == steps:
            return True  # nothing has run since the last checkpoint
        began = time.monotonic()
        checkpoints.save({
            "steps": steps,  # completed: never a step that did not run
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": rng_state(),
            "data": data.position(),
        }, steps)
        notices.save_took = time.monotonic() - began
        longest_save = max(longest_save, notices.save_took)
        saved = steps
        log("checkpoint saved", step=steps, reason=reason, took=f"{notices.save_took:.3f}s", time=f"{time.time():.3f}")
        record_checkpoint(time.time(), longest_step + longest_save, args.service_account_dir)
        return True

    try:
        while steps < args.steps and not preempted.requested:
            began = time.monotonic()
            model.train()
            x, y = data.next_batch(args.batch_size)
            x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            log(f"step={steps}", loss=f"{loss.item():.6f}")
            steps += 1
            # A SIGTERM waits for the step in flight, its sleep included.
            longest_step = max(longest_step, time.monotonic() - began + (args.step_seconds or 0))

            now = time.time()
            notices.poll(now)
            if notices.take_due(now):
                save("notice")
            elif args.save_every and steps % args.save_every == 0:
                save("periodic")
            if args.step_seconds:
                time.sleep(args.step_seconds)
    except Exception as e:
        if not preempted.requested:
            raise  # the trainer's own error: exit 1, not retried as a preemption
        # A step cut short may have changed the weights half-way: save
        # nothing, and resume from the last checkpoint.
        log("a step failed after SIGTERM; not saving it", error=repr(e))
        return EXIT_PREEMPTED

    if preempted.requested:
        try:
            save("sigterm")
        except BaseException as e:
            # Still 143: the run was interrupted and is retried from the
            # newest checkpoint that is there.
            log("the checkpoint on SIGTERM failed", error=repr(e))
        return EXIT_PREEMPTED
    save("final")
    log("done", step=steps)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
