"""``check_resume``: prove that a training command resumes exactly, by killing it.

The command runs once uninterrupted (the reference), then ``kills`` more
times, each in a fresh copy of its directory, SIGKILLed at instants drawn
from ``seed``: at a random moment, right after a checkpoint write began, or
twice (a second kill after the first resume); after each kill it is started
again, unchanged, until it finishes. The audit records its checkpoint writer
appended (``NAMEDSCHEMA_AUDIT``) are then compared with the reference's.

check_resume   run the check; returns a ResumeReport
ResumeReport   the verdict (``exact``, ``status``, ``exit_code``), the killed runs, the
               first difference, ``summary()`` and ``to_dict()``
KilledRun      one killed run: its kills, where each resumed, its first difference
Kill           one SIGKILL: the step, whether a checkpoint write was under way, the resume
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..training.audit import ENV_IGNORE
from .compare import Difference, Records, first_difference, reference_records
from .runs import Event, Life, Run

__all__ = ["check_resume", "ResumeReport", "KilledRun", "Kill", "HINT", "NOT_REPRODUCIBLE_HINT",
           "EXIT_CODES"]

HINT = ("hint: a resume differs when the checkpoint does not hold all of the run's state: "
        "a generator it does not track (np.random.default_rng, random.Random, a "
        "torch.Generator), a counter kept in a local or global variable, an env wrapper's "
        "hidden state. Track it (RunCheckpoint.track) or derive it from tracked state; "
        "see the check-resume page of the docs (docs/check_resume.rst).")
GLOBAL_HINT = ("; `global_rngs` are Python's, numpy's and torch's global generators, which "
               "RunCheckpoint keeps: seed them (random.seed, np.random.seed, "
               "torch.manual_seed) even if the loop does not use them")
NOT_REPRODUCIBLE_HINT = (
    "hint: the usual causes are generators nobody seeded that the checkpoint keeps (a gym "
    "space's np_random, drawn from OS entropy when a wrapper or a vector env reads it: "
    "seed every wrapper's observation_space and action_space) and wall-clock values kept "
    "in an object (time.time(), time.perf_counter()); leave a value that must differ out "
    "of the comparison with --ignore PATTERN (check_resume(ignore=...)); see the "
    "check-resume page of the docs (docs/check_resume.rst).")
# status -> exit status of `namedschema check-resume`
EXIT_CODES = {"exact": 0, "diverged": 1, "nondeterministic": 1, "not-resumed": 1,
              "crashed": 2, "timeout": 2, "no-checkpoints": 2, "leaked": 2, "no-kills": 2}


@dataclass
class Kill:
    """One SIGKILL of a run."""

    step: int | None              # the step the run was at (None: it had not said)
    during_write: int | None      # the step whose checkpoint write was under way, if any
    resumed_from: int | None      # the step the next start restored (None: started over)
    second: bool = False          # a kill of a run that had resumed already

    @property
    def lost(self) -> int | None:
        """Steps done again after the resume."""
        if self.step is None:
            return None
        return self.step - (self.resumed_from if self.resumed_from is not None else -1)

    def to_dict(self) -> dict[str, Any]:
        """The kill as JSON-ready data."""
        return {"step": self.step, "during_write": self.during_write,
                "resumed_from": self.resumed_from, "second": self.second, "lost": self.lost}


@dataclass
class KilledRun:
    """One run killed once or twice and finished."""

    index: int
    plan: str                     # how its kills were aimed
    kills: list[Kill] = field(default_factory=list)
    exact: bool | None = None     # None: it could not be compared (see problem)
    compared: int = 0             # records compared with the reference
    difference: Difference | None = None
    problem: str | None = None
    status: str | None = None     # a status of ResumeReport when not exact
    directory: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The run as JSON-ready data."""
        return {"index": self.index, "plan": self.plan, "exact": self.exact,
                "kills": [k.to_dict() for k in self.kills], "compared": self.compared,
                "difference": None if self.difference is None else self.difference.to_dict(),
                "problem": self.problem, "status": self.status, "directory": self.directory}


@dataclass
class ResumeReport:
    """The verdict of :func:`check_resume`.

    ``status``: exact, diverged (a resumed run differs), nondeterministic (a run
    differs before any kill: the command is not reproducible), not-resumed (a
    restart ignored its checkpoint), crashed, timeout, no-checkpoints (no
    audit record came: not a RunCheckpoint/resumable run, or no save before the
    end), leaked (a fresh run resumed: its checkpoints are outside its directory),
    no-kills (every planned kill came after the run had ended).
    """

    status: str
    command: list[str]
    message: str
    runs: list[KilledRun] = field(default_factory=list)
    reference_checkpoints: list[int] = field(default_factory=list)
    reference_seconds: float = 0.0
    seed: int = 0
    output: str = ""              # the tail of the output of the run that failed
    directory: str | None = None  # where the runs are (only with keep=True)

    @property
    def exact(self) -> bool:
        """Whether every killed run resumed bit-exact."""
        return self.status == "exact"

    @property
    def exit_code(self) -> int:
        """0 exact, 1 a resume or the command differs, 2 the check could not be made."""
        return EXIT_CODES[self.status]

    @property
    def kills(self) -> list[Kill]:
        """Every kill of every run, in order."""
        return [k for run in self.runs for k in run.kills]

    @property
    def divergence(self) -> Difference | None:
        """The first difference of the first run that differs."""
        return next((r.difference for r in self.runs if r.difference is not None), None)

    def summary(self) -> str:
        """The verdict in a line or two, with the hint when a resume differs."""
        return self.message

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``--json``)."""
        return {"status": self.status, "exact": self.exact, "exit_code": self.exit_code,
                "message": self.message, "command": self.command, "seed": self.seed,
                "reference_checkpoints": self.reference_checkpoints,
                "reference_seconds": round(self.reference_seconds, 3),
                "runs": [r.to_dict() for r in self.runs], "output": self.output,
                "directory": self.directory}


def _n(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _steps(kills: Sequence[Kill]) -> str:
    return ", ".join(_n(k.step) for k in kills)


# --------------------------------------------------------------------------
# The check
# --------------------------------------------------------------------------

def check_resume(command: str | Iterable[str], *, kills: int = 5, seed: int = 0,
                 timeout: float = 600.0, cwd: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None, copy: bool = True,
                 keep: bool = False, workdir: str | os.PathLike[str] | None = None,
                 progress: Callable[[str], None] | None = None,
                 ignore: Iterable[str] = (), progress_every: float = 10.0) -> ResumeReport:
    """Run ``command`` uninterrupted and ``kills`` times killed and resumed; compare.

    Args:
        command: the training command, unchanged (a list, or a string split as a shell
            would); it must use ``RunCheckpoint`` or ``namedschema.rlpyt.resumable``
            and resume from its checkpoint when started again.
        kills: how many runs to kill (each once or, every third, twice).
        seed: draws the kill instants (the command's own seeds are its business).
        timeout: seconds each start of the command may take before it counts as hung.
        cwd: the command's directory (default: the current one); each run works in a
            fresh copy of it (``copy=False``: in ``cwd`` itself, the command then
            writes its checkpoints under ``$NAMEDSCHEMA_CHECK_DIR``).
        env: the command's environment (default: this process's).
        keep: keep the runs' directories (their path is in the report).
        workdir: where the runs' directories are made (default: the temporary dir).
        progress: called with a line of text as the check goes on: at each run's end,
            and every ``progress_every`` seconds while a run goes on (its step).
        ignore: shell-style patterns of parts left out of the comparison, matched against
            ``OBJECT.PATH`` as a difference names them (``envs.*.episode_start_time``,
            ``envs.*.time_queue``) or an object's name alone (``logger``): values that
            differ in every run by design (the time). Known wall-clock attributes of
            env wrappers are left out already. The runs themselves are unchanged: what
            they checkpoint is not, only what is digested for the comparison.
        progress_every: seconds between two lines of progress within a run.

    Returns:
        A :class:`ResumeReport`; ``report.exact`` is the verdict.
    """
    argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    if not argv:
        raise ValueError("check_resume: the command is empty")
    if not isinstance(kills, int) or kills < 1:
        raise ValueError(f"check_resume: kills must be a positive int, got {kills!r}")
    if not timeout > 0:
        raise ValueError(f"check_resume: timeout must be positive, got {timeout!r}")
    if not progress_every > 0:
        raise ValueError(f"check_resume: progress_every must be positive, got "
                         f"{progress_every!r}")
    patterns = [ignore] if isinstance(ignore, str) else list(ignore)
    if not all(isinstance(p, str) and p and "\n" not in p for p in patterns):
        raise ValueError(f"check_resume: ignore must be non-empty patterns (str) without "
                         f"newlines, got {ignore!r}")
    run_env = dict(os.environ if env is None else env)
    run_env.pop(ENV_IGNORE, None)
    if patterns:
        run_env[ENV_IGNORE] = "\n".join(patterns)
    source = os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd())
    say = progress or (lambda line: None)
    root = tempfile.mkdtemp(prefix="check-resume-",
                            dir=None if workdir is None else os.fspath(workdir))
    try:
        check = _Check(argv, kills, seed, timeout, source, run_env, copy, root, say)
        check.progress_every = progress_every
        report = check.run()
        if keep:
            report.directory = root
        return report
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


class _Check:
    def __init__(self, argv: list[str], kills: int, seed: int, timeout: float, source: str,
                 env: Mapping[str, str], copy: bool, root: str,
                 say: Callable[[str], None]) -> None:
        self.argv, self.n_kills, self.seed, self.timeout = argv, kills, seed, timeout
        self.source, self.env, self.copy, self.root, self.say = source, env, copy, root, say
        self.rng = random.Random(seed)
        self.progress_every = 10.0
        self.what = "the uninterrupted run"    # the run under way, for progress lines
        self.last_step: int | None = None      # the reference's last checkpoint
        self._said = time.monotonic()

    def _run(self, name: str) -> Run:
        run = Run(self.root, name, self.argv, self.source, self.env, self.timeout, self.copy)
        run.tick = self._tick
        return run

    def _tick(self, run: Run) -> None:
        """A progress line every ``progress_every`` seconds: the run, its step, its time."""
        now = time.monotonic()
        if now - self._said < self.progress_every:
            return
        self._said = now
        step = run.current_step()
        where = "no step yet" if step is None else f"step {_n(step)}"
        if step is not None and self.last_step is not None:
            where += f" of {_n(self.last_step)}"
        start = f", start {len(run.lives)}" if len(run.lives) > 1 else ""
        self.say(f"check-resume: {self.what}: {where} ({run.elapsed:.0f} s{start})")

    def _report(self, status: str, message: str, **extra: Any) -> ResumeReport:
        return ResumeReport(status, self.argv, message, seed=self.seed, **extra)

    # -- the reference ------------------------------------------------------------------

    def run(self) -> ResumeReport:
        self.say(f"check-resume: the uninterrupted run: {shlex.join(self.argv)}")
        ref = self._run("reference")
        ref.start()
        began = time.monotonic()
        life = ref.finish()
        seconds = time.monotonic() - began
        failure = self._failure(life, "the uninterrupted run")
        if failure is not None:
            return failure
        if any(e.kind == "restore" for e in life.events):
            return self._leaked(life, "the uninterrupted run")
        records = reference_records(life)
        steps = sorted(records.by_step)
        if not steps:
            errors = [e.error for e in life.events if e.kind == "audit-error"]
            why = (f" (the audit failed: {errors[0]})" if errors else
                   " (no RunCheckpoint or namedschema.rlpyt.resumable save ran, or the "
                   "variable NAMEDSCHEMA_AUDIT did not reach the process writing them)")
            return self._report("no-checkpoints",
                                f"NO CHECKPOINTS: the uninterrupted run ended without writing "
                                f"a checkpoint check-resume could see{why}; nothing to resume "
                                "from", output=life.output, reference_seconds=seconds)
        self.say(f"check-resume: the uninterrupted run took {seconds:.1f} s, "
                 f"{len(steps)} checkpoints (steps {_n(steps[0])} to {_n(steps[-1])})")
        timeline = _Timeline(life.events)
        self.last_step = records.end_step if records.end_step is not None else steps[-1]
        runs = []
        for index in range(self.n_kills):
            self.what = f"run {index + 1}/{self.n_kills}"
            run = self._killed_run(index, records, timeline)
            runs.append(run)
            self.say(f"check-resume: run {index + 1}/{self.n_kills}: {_describe_run(run)}")
            if run.status in ("crashed", "timeout", "leaked"):
                break
        return self._verdict(runs, steps, seconds)

    def _failure(self, life: Life, what: str) -> ResumeReport | None:
        if life.timed_out:
            return self._report("timeout", f"TIMEOUT: {what} did not finish within "
                                f"{self.timeout:g} s (a hang?); it was killed",
                                output=life.output)
        if life.returncode != 0:
            return self._report("crashed", f"CRASHED: {what} exited with "
                                f"{_exit_text(life.returncode)}", output=life.output)
        return None

    def _leaked(self, life: Life, what: str) -> ResumeReport:
        step = next(e.step for e in life.events if e.kind == "restore")
        return self._report(
            "leaked", f"LEAKED: {what} resumed from a checkpoint of step {_n(step)} at its "
            "first start: its checkpoint is not in its fresh working directory (an old "
            "checkpoint in the command's directory, or an absolute path; write checkpoints "
            "under $NAMEDSCHEMA_CHECK_DIR or a relative path)", output=life.output)

    # -- a killed run -------------------------------------------------------------------

    def _plan(self, index: int) -> list[tuple[str, float]]:
        kinds = ("moment", "write", "second")
        kind = kinds[(index + self.seed) % 3]
        if kind == "moment":
            return [("moment", self.rng.uniform(0.15, 0.9))]
        if kind == "write":
            return [("write", self.rng.random())]
        second = "write" if self.rng.random() < 0.5 else "moment"
        return [("moment", self.rng.uniform(0.1, 0.6)), (second, self.rng.uniform(0.1, 0.9))]

    def _killed_run(self, index: int, records: Records, timeline: _Timeline) -> KilledRun:
        plan = self._plan(index)
        run = self._run(f"run-{index + 1}")
        result = KilledRun(index + 1, " then ".join(p[0] for p in plan))
        for number, (kind, draw) in enumerate(plan):
            run.start()
            outcome = self._kill_when(run, kind, draw, timeline)
            if outcome != "killed":     # it ended (or hung) before the kill
                run.finish()
                break
            life = run.lives[-1]
            result.kills.append(Kill(life.kill_step, life.kill_during_write, None,
                                     second=number > 0))
        else:
            run.start()
            run.finish()
        self._resumes(run, result)
        if result.status is None:
            self._compare(run, records, result)
        return result

    def _kill_when(self, run: Run, kind: str, draw: float, timeline: _Timeline) -> str:
        """Kill the life as planned: "killed", or "exit"/"timeout" if it ended first."""
        first = run.wait_for(lambda e: e.kind in ("restore", "save-begin"))
        if isinstance(first, str):
            return first
        restored = first.step if first.kind == "restore" else None
        if kind == "write":   # right after the k-th checkpoint write of this start began
            n = timeline.saves_after(restored)
            k = 2 + int(draw * (n - 2)) if restored is None and n >= 3 else \
                max(1, min(n, 1 + int(draw * n)))
            count = [1 if first.kind == "save-begin" else 0]

            def wanted(event: Event) -> bool:
                if event.kind == "save-begin":
                    count[0] += 1
                    return count[0] >= k
                return False
            hit: Event | str = first if count[0] >= k else run.wait_for(wanted)
        else:                 # at a moment drawn over what the reference took from here
            delay = draw * timeline.seconds_after(restored)
            hit = run.wait_for(None, until=first.t + delay)
        if isinstance(hit, Event) or hit == "until":
            run.kill()
            return "killed"
        return hit

    def _resumes(self, run: Run, result: KilledRun) -> None:
        """Where each kill resumed; a problem when a start failed or ignored a checkpoint."""
        result.directory = run.dir
        lives = run.lives
        if any(e.kind == "restore" for e in lives[0].events):
            result.status, result.problem = "leaked", self._leaked(lives[0], "a fresh run").message
            return
        killed = [i for i, life in enumerate(lives) if life.killed]
        for kill, i in zip(result.kills, killed, strict=True):
            nxt = lives[i + 1] if i + 1 < len(lives) else None
            restore = next((e.step for e in nxt.events if e.kind == "restore"), None) \
                if nxt else None
            kill.resumed_from = restore
            if kill.during_write is not None and kill.during_write == restore:
                kill.during_write = None   # its write had ended, though not yet reported
            saved = [e.step for life in lives[:i + 1] for e in life.events
                     if e.kind == "checkpoint"]
            if nxt is not None and restore is None and saved:
                result.status = "not-resumed"
                result.problem = (f"NOT RESUMED: after the kill at step {_n(kill.step)} the "
                                  f"command started over, though its checkpoint of step "
                                  f"{_n(saved[-1])} was on disk (does it call restore() and "
                                  "find the same checkpoint path?)")
                return
        last = lives[-1]
        what = ("the restart after the kill at step " + _n(result.kills[-1].step)
                if result.kills else "a run")
        if last.timed_out:
            result.status = "timeout"
            result.problem = f"TIMEOUT: {what} did not finish within {self.timeout:g} s"
        elif last.killed:
            result.status, result.problem = "crashed", f"{what} was killed"
        elif last.returncode != 0:
            result.status = "crashed"
            result.problem = f"CRASHED: {what} exited with {_exit_text(last.returncode)}"

    def _compare(self, run: Run, records: Records, result: KilledRun) -> None:
        diff, compared, _ = first_difference(records, run.lives)
        result.compared, result.difference = compared, diff
        if not result.kills:
            result.status = "no-kills"
            return
        result.exact = diff is None
        if diff is not None:
            result.status = "nondeterministic" if diff.life == 0 else "diverged"

    # -- the verdict --------------------------------------------------------------------

    def _verdict(self, runs: list[KilledRun], steps: list[int], seconds: float) -> ResumeReport:
        extra = {"runs": runs, "reference_checkpoints": steps, "reference_seconds": seconds}
        for status in ("leaked", "crashed", "timeout", "not-resumed", "nondeterministic",
                       "diverged"):
            bad = [r for r in runs if r.status == status]
            if bad:
                return self._report(status, self._bad_message(status, bad[0]), **extra,
                                    output=_output_of(bad[0]))
        killed = [r for r in runs if r.kills]
        if not killed:
            return self._report("no-kills", "NO KILLS: every run ended before its planned "
                                "kill (the command is too short to kill: give it more steps)",
                                **extra)
        kills = [k for r in killed for k in r.kills]
        during = sum(k.during_write is not None for k in kills)
        second = sum(k.second for k in kills)
        lost = [k.lost for k in kills if k.lost is not None]
        parts = [f"kills at steps {_steps(kills)}",
                 f"{during} during a checkpoint write"]
        if second:
            parts.append(f"{second} a second kill after a resume")
        if lost:
            parts.append(f"resume lost on average {sum(lost) / len(lost):,.0f} steps")
        missed = len(runs) - len(killed)
        tail = f"; {missed} planned kills came after the run had ended" if missed else ""
        message = (f"exact: {len(killed)} of {len(killed)} killed runs resumed bit-exact "
                   f"({'; '.join(parts)}){tail}")
        return self._report("exact", message, **extra)

    def _bad_message(self, status: str, run: KilledRun) -> str:
        if status in ("diverged", "nondeterministic") and run.difference is not None:
            diff = run.difference
            if status == "nondeterministic":
                return (f"NOT REPRODUCIBLE: run {run.index} differs from the uninterrupted run "
                        f"before it was killed: first difference at {diff.describe()}. The "
                        "command does not repeat itself (an unseeded generator, the time, "
                        "nondeterministic kernels), so its resume cannot be checked"
                        + (GLOBAL_HINT if diff.objects[0] == "global_rngs" else "")
                        + "\n" + NOT_REPRODUCIBLE_HINT)
            kill = run.kills[min(diff.life, len(run.kills)) - 1]
            resumed = (f"resumed from step {_n(kill.resumed_from)}"
                       if kill.resumed_from is not None else "started over")
            return (f"DIVERGED after the kill at step {_n(kill.step)} (run {run.index}, "
                    f"{resumed}): first difference at {diff.describe()}\n{HINT}")
        return f"{run.problem} (run {run.index})"


class _Timeline:
    """When the uninterrupted run saved what (seconds from its start)."""

    def __init__(self, events: Sequence[Event]) -> None:
        start = next((e.t for e in events if e.kind == "start"), events[0].t if events else 0.0)
        self.end = (events[-1].t - start) if events else 0.0
        self.saves = [(e.step, e.t - start) for e in events if e.kind == "save-begin"]

    def _time_of(self, step: int | None) -> float:
        if step is None:   # a first start: from its first checkpoint on
            return self.saves[0][1] if self.saves else 0.0
        return next((t for s, t in self.saves if s is not None and s >= step), self.end)

    def seconds_after(self, step: int | None) -> float:
        """How long the reference ran after its checkpoint of ``step``."""
        return max(self.end - self._time_of(step), 0.01)

    def saves_after(self, step: int | None) -> int:
        """How many checkpoints the reference began after ``step``."""
        return sum(1 for s, _ in self.saves if step is None or (s is not None and s > step))


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no status"
    if code < 0:
        import signal
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


def _output_of(run: KilledRun) -> str:
    if run.directory is None:
        return ""
    logs = sorted(f for f in os.listdir(run.directory) if f.startswith("life-"))
    if not logs:
        return ""
    with open(os.path.join(run.directory, logs[-1]), "rb") as f:
        return f.read()[-4000:].decode(errors="replace")


def _describe_run(run: KilledRun) -> str:
    kills = "; ".join(
        f"killed at step {_n(k.step)}"
        + (f" (during the checkpoint write of step {_n(k.during_write)})"
           if k.during_write is not None else "")
        + (f", resumed from step {_n(k.resumed_from)}" if k.resumed_from is not None
           else ", started over") for k in run.kills) or "ended before its kill"
    verdict = {None: "exact", "no-kills": "not killed"}.get(run.status, run.status)
    return f"{kills}: {verdict if run.exact is not False else run.status}"
