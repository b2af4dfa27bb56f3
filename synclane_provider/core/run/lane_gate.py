"""What a worker does before each page: wait its turn in the lane's rate budget, and out any throttle on the lane.

A lane is one API account. Its rate budget (:class:`~synclane_provider.core.declare.ratelimit.Rate`, from the owner
source or the queue) and the throttle a server's named wait puts on it are kept in ``<schema>.lane_budgets``, so
every worker on every machine keeps to the same ones. A lane is *throttled*; an owner is *paused* (by a person or
its handler, until resumed): the two words are kept apart everywhere.

* **Budget.** A lane with a rate takes one unit before each page in one statement (``take_lane_budget``),
  which answers how long to wait; a handler that makes more requests in a page takes more with
  :meth:`PageJob.spend <synclane_provider.core.page_context.PageJob.spend>`.
* **On its turn or not at all.** Pacing the grants paces what the API sees only if each request is sent on its
  turn. On a busy machine the slot may wake late, the handler may start late, the database may answer
  late; a request sent late lands close behind the next taker's, and with the one ``requests`` before it in one
  of the API's periods. So on the work thread, immediately before the handler (and in ``spend``, immediately
  before the requests it pays for), :meth:`LaneGate.keep_turn` checks the clock: a page later than half the
  rate's :attr:`~synclane_provider.core.declare.ratelimit.Rate.lateness` after its turn gives the turn up unused and
  takes a new one. A turn is reckoned from the instant the take was *sent*, the earliest the database can
  have placed it, so every delay on the way counts as lateness. A wasted turn slows the lane a little; it
  never lets it overrun.
* **Throttle.** When a handler raises ``JobThrottled`` with the wait the server named, the wait is the lane's:
  :meth:`LaneGate.throttle` records it on the lane's row and moves the lane's waiting jobs to its end. We chose
  to hold the lane's *jobs* back (so idle workers take other lanes' work meanwhile, and the take statement stays
  as it is) and to have the runner wait before a page (so that a job that starts in the lane anyway -- inserted
  or requeued during the throttle, or running beside, in a wider lane -- still sends nothing before it ends). A lane
  without a rate learns of a throttle at no cost: the take and the cursor save return what is left of it.

* **Learnt.** What the API's answers say (``job.observe``, :meth:`LaneGate.observe`) is kept on the lane's row
  too: what is left until the reset becomes a pace every worker keeps besides the declared rate, nothing left a
  hold until the reset; a 429 the headers do not explain halves a declared rate, which grows back
  (:meth:`LaneGate.refused`). Each take is spaced from when the job's request before it really left (``late``:
  measured when the handler was called, or when it said, :meth:`LaneGate.sent`).
* **Quota.** A wait longer than the queue's ``longest_wait`` is not waited in the slot: :class:`LaneHeld` hands the
  job back at its cursor, due when the lane's ``quota_until`` ends.
* **Fresh first.** A history page keeps to the queue's ``history_share`` of a declared budget while the lane's
  recurring work is due, and hands a full lane over after its page (``Turn.yields``).

* **Clearance.** A wait before a page leaves time for the job's owner to be paused or for a cancel to ask the job
  to stop, and either promises that no page is requested for it from then on. So the gate asks the table right
  before the page whenever the job waited since the table last told the worker about it (``page_clearance``):
  after a turn slept for or a throttle waited out, and for a job taken with the previous job's finish and run later.
  A lane with a rate asks in its budget statement, which it sends before each page anyway; only a page that then
  waits asks again. A page held back raises :class:`PageNotSent`, and the worker hands the job back (a cancelled
  one ends abandoned, as the cancel promised).

Waits before a page are yielded to the slot (:mod:`~synclane_provider.core.run.waits`), which sleeps them on its
stop event or runs other jobs meanwhile; waits within a page (``keep_turn``, ``spend``) sleep on the handler's own
thread. Either way they hold no transaction and poll nothing; the job's lease is renewed
meanwhile by the process's :class:`~synclane_provider.core.run.lease.Leases`. A throttle without a named wait is our
own guess (doubled and jittered per job), so it delays only its job; the budget is the tool for pacing a lane.

Waits are computed on the slot's clock (the database's, or a pinned one) and slept in real time: a test that
pins the clock and declares a rate sleeps the rate's intervals for real, whatever it does with the clock.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from synclane_provider.core.clock import Clock
from synclane_provider.core.db.store import Clearance, LaneTake, LaneTurn, Store
from synclane_provider.core.declare.declarations import Queue
from synclane_provider.core.declare.owners import owners_of
from synclane_provider.core.declare.ratelimit import Limits, check_units, lateness, limits, regrowth
from synclane_provider.core.metrics import LANE_LEARNT_RATE, NO_METRICS, Metrics
from synclane_provider.core.numbers import whole
from synclane_provider.core.rate_headers import RateNews
from synclane_provider.core.records import Job
from synclane_provider.core.run.waits import Sleeps, sleep, waited_out
from synclane_provider.core.states import JobMode

log = logging.getLogger(__name__)


class PageNotSent(Exception):
    """The page was not sent: the slot was asked to stop while the page waited for a new turn, or, right before it,
    the job's owner was found paused, a cancel asking the job to stop, or the job no longer the worker's. The
    worker hands the job back."""

    def __init__(self, message: str, *, waited: float = 0.0) -> None:
        super().__init__(message)
        self.waited = waited
        """Seconds the page waited (its turn, a throttle on its lane) before it was held back."""


class LaneHeld(PageNotSent):
    """The page would wait longer than the queue's ``longest_wait`` (a quota used up until a reset far away): the
    worker hands the job back at its cursor, due when the wait ends, instead of waiting in the slot."""


@dataclass(frozen=True)
class Turn:
    """A lane's turn a page (or a ``spend``) holds: the units taken, and the latest instant to send on it."""

    rates: Limits
    """The lane's rates (none: a lane without a budget, whose page has no turn to keep)."""
    units: int = 1
    latest: float = math.inf
    """time.monotonic() after which the turn is missed (infinite: a lane without a rate, or without headroom)."""
    waited: float = 0.0
    """Seconds slept for it."""
    page: bool = False
    """A page's turn (whether it may still go is asked with each take), not the turn of a ``spend`` within one."""
    due: float = math.inf
    """time.monotonic() of the turn: how late the request then leaves is the next take's ``late``."""
    paced: bool = False
    """The lane keeps a pace it learnt from its API's answers (a turn to keep even without a declared rate)."""
    yields: bool = False
    """A history page whose lane's recurring work waits for it: the job is handed back after the page."""

    @property
    def kept(self) -> bool:
        """Whether there is a turn to keep: a declared rate or a learnt pace."""
        return bool(self.rates) or self.paced


class OwnerRates:
    """The rates of a queue's lanes as its owner source lists them, read at most once per ``refresh`` (the plan
    interval) for every seat of a slot: a slot running hundreds of jobs asks the source as often as one running
    one. When the source fails, the rates it gave last are kept, and the queue's rate holds for owners it does not
    list."""

    def __init__(
        self, queue: Queue, *, refresh: timedelta, log: logging.Logger | logging.LoggerAdapter[logging.Logger]
    ) -> None:
        self._queue = queue
        self._refresh = refresh.total_seconds()
        self._log = log
        self._lock = threading.Lock()
        self._rates: dict[str, Limits] = {}
        self._read_at: float | None = None

    def of(self, job: Job) -> Limits:
        """The rates of the job's lane (none, one, or several windows): its owner's, else the queue's."""
        with self._lock:
            now = time.monotonic()
            if self._read_at is None or now - self._read_at >= self._refresh:
                self._read_at = now
                try:
                    self._rates = {o.id: limits(o.rate) for o in owners_of(self._queue) if o.rate is not None}
                except Exception as exc:  # noqa: BLE001 - a budget lookup must not fail the job; the last rates stay
                    self._log.warning(
                        "queue %s: the owner source failed (%s); keeping the rates it gave last", self._queue.name, exc
                    )
            return self._rates.get(job.owner) or limits(self._queue.rate)


class LaneGate:
    """One seat's view of its lanes' budgets and throttles."""

    def __init__(
        self,
        store: Store,
        queue: Queue,
        *,
        clock: Clock,
        stop: threading.Event,
        refresh: timedelta = timedelta(minutes=1),
        rates: OwnerRates | None = None,
        log: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        """``rates``: the slot's owners' rates, shared by its seats (else the gate's own, read every ``refresh``)."""
        self._store = store
        self._metrics = metrics
        self._queue = queue
        self._clock = clock
        self._stop = stop
        self._log = log or logging.getLogger(__name__)
        self._rates = rates or OwnerRates(queue, refresh=refresh, log=self._log)
        self._paced: set[str] = set()
        """Lanes whose takes said they keep a learnt pace: their pages take a turn even without a declared rate."""
        self._learnt: dict[str, timedelta | None] = {}
        """The pace this slot last wrote for each lane from headers (a repeat of it is not written again)."""
        self._late: tuple[int, float] = (0, 0.0)
        """The job whose request last left, and how many seconds after its turn: its next take is spaced from then."""
        self._due: tuple[int, float] = (0, math.inf)
        """The job whose turn was last kept, and its instant (time.monotonic()), for :meth:`sent` to measure from."""

    def limits_of(self, job: Job) -> Limits:
        """The rates of the job's lane (see :class:`OwnerRates`)."""
        return self._rates.of(job)

    def before_page(self, job: Job, *, throttle_left: float, heard: bool = True) -> Sleeps[Turn]:
        """Take one unit of the lane's budget (if it has one), wait until the page may start, and make sure it still
        may: the turn, to be kept with :meth:`keep_turn` immediately before the page is sent.

        ``throttle_left`` is what the take or the last cursor save said was left of a throttle on the lane; a lane with
        a rate is told afresh by its budget statement. ``heard``: whether that take or save told the worker about
        the job with no wait since (False for a job taken with the previous job's finish and run later). Raises
        :class:`PageNotSent` when the page must not go (see :meth:`_check`). Its waits are yielded to the slot
        (see :mod:`~synclane_provider.core.run.waits`).
        """
        rates = self.limits_of(job)
        if throttle_left > self._queue.longest_wait.total_seconds():
            raise self._held(job, throttle_left)
        if not rates and job.lane not in self._paced:
            waited = yield from sleep(throttle_left)
            if waited > 0 or not heard:
                self._check(job, self._store.page_clearance(job.id, worker=self._worker_of(job)), waited=waited)
            return Turn((), waited=waited)
        return (yield from self._wait_turn(job, rates, 1, page=True))

    def keep_turn(self, job: Job, turn: Turn) -> float:
        """Called immediately before sending: while the turn has been missed, give it up and take (and wait for)
        a new one; seconds waited. Raises :class:`PageNotSent` when the slot is asked to stop meanwhile, and, for a
        page's turn, when the page must not go any more (its new take and its wait are checked as before_page's)."""
        waited = 0.0
        while turn.rates and time.monotonic() > turn.latest:
            self._log.info(
                "%s: %.3f s late for its turn in lane %s; taking a new one",
                job.describe(),
                time.monotonic() - turn.latest,
                job.lane,
            )
            try:
                turn = waited_out(self._wait_turn(job, turn.rates, turn.units, page=turn.page), self._stop)
            except PageNotSent as held:
                held.waited += waited
                raise
            waited += turn.waited
            if self._stop.is_set():
                raise PageNotSent(
                    f"{job.describe()}: asked to stop while waiting for a new turn in lane {job.lane}", waited=waited
                )
        if turn.kept:
            self._due = (job.id, turn.due)
            self.sent(job)  # the request leaves now, unless the handler says later (job.sent, job.observe)
        return waited

    def sent(self, job: Job, at: float | None = None) -> None:
        """The job's request left at ``at`` (time.monotonic(); default now): the lane's next turn is spaced from
        then, however late after its turn that was. Nothing for a job whose turn this slot did not keep."""
        due_job, due = self._due
        if due_job == job.id and due != math.inf:
            left = time.monotonic() if at is None else at
            self._late = (job.id, max(left - due, 0.0))

    def spend(self, job: Job, units: int) -> timedelta:
        """Take ``units`` more of the job's lane's budget within a page and wait until they may be used (a turn
        missed meanwhile is taken again, see :meth:`keep_turn`)."""
        if not whole(units, 1):
            raise ValueError(f"spend() takes a positive number of units, got {units!r}")
        rates = self.limits_of(job)
        if not rates and job.lane not in self._paced:
            return timedelta(0)
        if rates:
            check_units(f"spend({units})", units, rates, job.lane)
        turn = waited_out(self._wait_turn(job, rates, units), self._stop)
        return timedelta(seconds=turn.waited + self.keep_turn(job, turn))

    def throttle(self, job: Job, wait: timedelta) -> None:
        """Hold the job's whole lane for ``wait``, the wait a server named: no job of the lane starts a page before
        it ends. Written before the throttled job's finish, whose take must not find the lane free."""
        until = self._store.throttle_lane(self._queue.name, job.lane, wait=wait, now=self._clock())
        self._log.info(
            "lane %s of queue %s throttled until %s (named by the server to %s)",
            job.lane,
            self._queue.name,
            until.isoformat(),
            job.describe(),
        )

    def _wait_turn(self, job: Job, rates: Limits, units: int, *, page: bool = False) -> Sleeps[Turn]:
        """Take ``units`` of the lane's budget and sleep until their turn. The turn is reckoned from the instant
        the take was sent: the database placed it no earlier, so what the answer took to come back counts as
        lateness, never as time in hand. A turn further away than the queue's ``longest_wait`` is not waited for
        (nor taken): :class:`LaneHeld`.

        A page's turn (``page``) also says whether the page may still go, in the take's own statement; a page
        that then sleeps for its turn asks again once it has slept (see :meth:`_check`)."""
        sent = time.monotonic()
        late_job, late = self._late
        take = LaneTake(
            cost=[rate.interval * units for rate in rates],
            tolerance=[rate.tolerance for rate in rates],
            interval=None if page else [rate.interval for rate in rates],
            units=units,
            late=timedelta(seconds=late if late_job == job.id else 0.0),
            longest=self._queue.longest_wait,
            regrowth=regrowth(rates),
            history=bool(rates) and job.mode != JobMode.RECURRING,
            priority=job.priority,
            lane_width=job.lane_width,
            history_cost=rates[0].interval * units / self._queue.history_share if rates else None,
        )
        shared = 0.0  # waited for history's share of the lane while its fresh work was due
        while True:
            if page:
                turn = self._store.take_page_turn(
                    self._queue.name, job.lane, take, job=job.id, worker=self._worker_of(job), now=self._clock()
                )
                self._check(job, turn.clearance, waited=shared)
            else:
                turn = self._store.take_turn(self._queue.name, job.lane, take, now=self._clock())
            if not turn.again:
                break
            shared += yield from sleep(turn.wait)
            if self._stop.is_set():
                raise PageNotSent(f"{job.describe()}: asked to stop while history waited for its share", waited=shared)
            sent = time.monotonic()
        self._note_paced(job.lane, turn)
        if turn.wait > self._queue.longest_wait.total_seconds():
            raise self._held(job, turn.wait)
        room = lateness(rates).total_seconds() / 2 if rates else 0.0
        latest = sent + turn.wait + room if room > 0 else math.inf
        slept = yield from sleep(turn.wait)
        if page and slept > 0:
            self._check(job, self._store.page_clearance(job.id, worker=self._worker_of(job)), waited=shared + slept)
        return Turn(
            rates, units, latest, shared + slept, page, due=sent + turn.wait, paced=turn.paced, yields=turn.yield_lane
        )

    def _note_paced(self, lane: str, turn: LaneTurn) -> None:
        if turn.paced:
            self._paced.add(lane)
        else:
            self._paced.discard(lane)

    def _held(self, job: Job, seconds: float) -> LaneHeld:
        """A wait too long to wait in the slot: the job goes back, due when it ends (its lane's quota_until)."""
        self._log.info(
            "%s: lane %s is held for %s more (a quota used up); handed back until then",
            job.describe(),
            job.lane,
            timedelta(seconds=round(seconds)),
        )
        return LaneHeld(f"{job.describe()}: lane {job.lane} held for {seconds:.0f} s more", waited=0.0)

    def observe(self, job: Job, news: RateNews) -> None:
        """What an API's answer said of the lane's limit (``job.observe``): what is left until the reset, spread
        evenly, becomes the lane's learnt pace; nothing left holds the lane until the reset -- handed back as a
        quota when further away than the queue's ``longest_wait``. A pace this slot already wrote for the lane
        (within a twentieth) is not written again."""
        pace = news.pace
        hold = news.reset if news.exhausted else None
        if hold is None and news.retry_after is not None and news.exhausted:
            hold = news.retry_after
        if pace is None and hold is None:
            return
        last = self._learnt.get(job.lane)
        if hold is None and pace is not None and last is not None and abs(pace - last) <= last / 20:
            return
        quota = hold is not None and hold > self._queue.longest_wait
        held_until = self._store.learn_lane(
            self._queue.name, job.lane, pace=pace, hold=hold, quota=quota, now=self._clock()
        )
        if pace is not None:
            self._learnt[job.lane] = pace
            self._paced.add(job.lane)
            self._learnt_rate(job, pace)
        if held_until is not None:
            self._log.info(
                "lane %s of queue %s %s until %s (its API said nothing is left, to %s)",
                job.lane,
                self._queue.name,
                "on quota" if quota else "throttled",
                held_until.isoformat(),
                job.describe(),
            )

    def refused(self, job: Job) -> None:
        """The API refused a page of the lane (a 429): a lane with a declared rate and no headers to go by halves
        its rate, which grows back to the declared one as requests pass (AIMD)."""
        rates = self.limits_of(job)
        if not rates:
            return
        cut = self._store.cut_lane_pace(
            self._queue.name, job.lane, unit=rates[0].interval, regrowth=regrowth(rates), now=self._clock()
        )
        if cut is not None:
            self._paced.add(job.lane)
            self._learnt_rate(job, cut)
            self._log.info(
                "lane %s of queue %s refused: its rate cut to %.3g a second, growing back to %s",
                job.lane,
                self._queue.name,
                1 / cut.total_seconds(),
                rates[0].describe(),
            )

    def _learnt_rate(self, job: Job, pace: timedelta) -> None:
        if pace > timedelta(0):
            tags = {"queue": self._queue.name, "lane": job.lane}
            self._metrics.gauge(LANE_LEARNT_RATE, tags, 1 / pace.total_seconds())

    def hold_quota(self, job: Job, wait: timedelta) -> None:
        """A server named a wait longer than the queue's ``longest_wait`` (a quota's reset): the lane waits it out
        as a quota, its jobs handed back until then."""
        until = self._store.learn_lane(self._queue.name, job.lane, pace=None, hold=wait, quota=True, now=self._clock())
        self._log.info(
            "lane %s of queue %s on quota until %s (named by the server to %s)",
            job.lane,
            self._queue.name,
            until.isoformat() if until else "?",
            job.describe(),
        )

    def _check(self, job: Job, clearance: Clearance | None, *, waited: float) -> None:
        """Raise :class:`PageNotSent` when the page must not go: the job's owner was paused or a cancel asked it to
        stop (the worker hands it back: not one more page), or it is no longer this worker's (``clearance`` None).
        ``waited``: the seconds the page waited before it was asked."""
        why = "it is no longer this worker's" if clearance is None else clearance.held_back
        if why is not None:
            self._log.info("%s: its page was not requested: %s", job.describe(), why)
            raise PageNotSent(f"{job.describe()}: {why}", waited=waited)

    @staticmethod
    def _worker_of(job: Job) -> str:
        """The worker holding the job, which every check of it is fenced on."""
        assert job.leased_by is not None, "a job about to be paged is leased"
        return job.leased_by
