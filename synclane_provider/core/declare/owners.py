"""Who a queue syncs for, and in which lane: the owner source is the one authority on both.

A lane stands for a rate limit shared by several accounts. A job put in the wrong lane would run beside its
neighbours and break that limit, so every job -- planned or enqueued by hand -- takes its lane from the
owner source; a caller may name a lane only for an owner the source does not list.
"""

from __future__ import annotations

from synclane_provider.core.declare.declarations import Owner, Queue
from synclane_provider.core.declare.ratelimit import Limits, describe_limits, limits
from synclane_provider.core.errors import DeclarationError, OwnerSourceError, UnknownOwnerError


def owners_of(queue: Queue) -> list[Owner]:
    """Ask the queue's owner source who is connected; strings are owners with their own lane.

    An owner listed twice keeps its first entry. Owners sharing a lane must name one rate and one width: the
    lane is one API account, with one rate budget and one concurrency limit, so which rate or width holds would
    otherwise depend on which job ran (two widths would let its jobs take slots up to the larger one). Such a
    source is refused with both owners named, as is an owner whose own periods the queue cannot plan
    (:meth:`Queue.check_owner`).
    """
    owners: dict[str, Owner] = {}
    lanes: dict[str, Owner] = {}  # each lane's first owner, whose rate and width the lane's other owners must name
    for item in queue.owners(queue.name):
        owner = Owner(item) if isinstance(item, str) else item
        if not isinstance(owner, Owner):
            raise OwnerSourceError(
                f"owner source of queue {queue.name!r} returned {item!r}; expected an Owner or a string"
            )
        if owners.setdefault(owner.id, owner) is not owner:
            continue
        if owner.every:  # the only thing check_owner looks at: most owners have no periods of their own
            try:
                queue.check_owner(owner)
            except DeclarationError as exc:
                raise OwnerSourceError(f"owner source of queue {queue.name!r}: {exc}") from None
        lane = owner.lane if owner.lane is not None else owner.id
        first = lanes.setdefault(lane, owner)
        if first is owner:
            continue
        if first.rate != owner.rate:
            raise OwnerSourceError(
                f"owner source of queue {queue.name!r}: owners {first.id!r} and {owner.id!r} share lane "
                f"{lane!r} but name different rates ({_rate(first)} and {_rate(owner)}); a lane has one "
                f"rate budget"
            )
        if first.lane_width != owner.lane_width:
            raise OwnerSourceError(
                f"owner source of queue {queue.name!r} gives lane {lane!r} two widths: "
                f"lane_width={first.lane_width} for owner {first.id!r} and lane_width={owner.lane_width} for "
                f"owner {owner.id!r}; owners sharing a lane share its width"
            )
    return list(owners.values())


def lane_limits(queue: Queue, lane: str) -> Limits:
    """The rates of ``lane``: those its owners name (the owner source is asked), else the queue's. Refused with
    :class:`UnknownOwnerError` naming it when the source lists no owner in the lane."""
    in_lane = [owner for owner in owners_of(queue) if (owner.lane if owner.lane is not None else owner.id) == lane]
    if not in_lane:
        raise UnknownOwnerError(f"no owner the source of queue {queue.name!r} lists is in lane {lane!r}")
    return limits(in_lane[0].rate) or limits(queue.rate)


def _rate(owner: Owner) -> str:
    return describe_limits(limits(owner.rate))


def listed_owner(queue: Queue, owner: str) -> Owner:
    """The owner the queue's source lists as ``owner``, with its lane: what may be paused, planned, re-synced or
    given credentials, which only make sense for a connected account.

    Refused (``UnknownOwnerError``) when the source does not list it, naming the owners it does list (the first
    five), so that a mistyped or guessed name shows the right one.
    """
    Owner(owner)  # refuses a bad name
    listed_owners = owners_of(queue)
    for listed in listed_owners:
        if listed.id == owner:
            return listed
    raise UnknownOwnerError(
        f"owner {owner!r} is not listed by the owner source of queue {queue.name!r}, {_which(listed_owners)}"
    )


def _which(listed: list[Owner], shown: int = 5) -> str:
    """What the source lists, in a few words: its owners, or the first ``shown`` of them and how many more."""
    if not listed:
        return "which lists no owner"
    names = ", ".join(owner.id for owner in listed[:shown])
    more = len(listed) - shown
    return f"which lists {names}" + (f" and {more:,} more" if more > 0 else "")


def resolve_owner(queue: Queue, owner: str | Owner, *, lane: str | None = None) -> Owner:
    """``owner`` with the lane its jobs must run in.

    An owner the source lists gets the source's lane; naming another lane is refused, since its jobs would
    then run beside the owners it shares a rate limit with. An owner the source does not list is refused,
    unless the caller names its lane (``lane=``, or an :class:`Owner` with a lane): a job for an account
    that is not connected yet, say.
    """
    owner_id, named_lane = (owner.id, owner.lane) if isinstance(owner, Owner) else (owner, lane)
    if isinstance(owner, Owner) and lane is not None and lane != owner.lane:
        raise DeclarationError(f"owner {owner_id!r} is given with lane {owner.lane!r} and lane={lane!r}: name one")
    checked = owner if isinstance(owner, Owner) else Owner(owner_id, named_lane)  # refuses bad names
    listed_owners = owners_of(queue)
    for listed in listed_owners:
        if listed.id != owner_id:
            continue
        if named_lane is not None and named_lane != listed.lane_or_id:
            raise DeclarationError(
                f"owner {owner_id!r} is in lane {listed.lane_or_id!r} according to the owner source of queue "
                f"{queue.name!r}, not {named_lane!r}: its jobs would run beside the owners sharing its rate limit"
            )
        return listed
    if named_lane is None:
        raise UnknownOwnerError(
            f"owner {owner_id!r} is not listed by the owner source of queue {queue.name!r}; "
            f"to add a job for it anyway, name its lane (lane={owner_id!r} for a lane of its own)"
        )
    queue.check_owner(checked)
    for neighbour in listed_owners:  # a lane the source knows keeps the source's width
        if neighbour.lane_or_id == checked.lane_or_id and neighbour.lane_width != checked.lane_width:
            return Owner(checked.id, checked.lane, lane_width=neighbour.lane_width)
    return checked
