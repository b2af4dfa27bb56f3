"""Run the pretend shop: ``python -m synclane_demo.shop [--port 8081] [--latency 0.3] ...``.

Every option can also come from the environment (``SHOP_PORT``, ``SHOP_LATENCY``,
``SHOP_RATE_429``, ...), which is how the demo command and docker-compose set it.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import TypeVar

from synclane_demo.shop.catalogue import SELLERS, Catalogue
from synclane_demo.shop.faults import Faults
from synclane_demo.shop.limits import Limits, parse_limit_changes, parse_limits
from synclane_demo.shop.oauth import DEFAULT_LIFETIME, OAuth
from synclane_demo.shop.server import Shop, ShopServer

T = TypeVar("T")

DEMO_LIMIT_CHANGES = "acme=1@5m,acme=2@10m"
"""The demo's run: acme's limit halves 5 minutes in and is back 5 minutes later, announced in the shop's
``X-RateLimit-*`` headers, for the engine to learn from what the shop says rather than from its configuration."""


def _env(name: str, default: str) -> str:
    return os.environ.get(f"SHOP_{name.upper()}", default)


def _argument(parse: Callable[[str], T]) -> Callable[[str], T]:
    """``parse`` for argparse, whose message for a ValueError is only "invalid value": its own message instead
    (argparse parses a text default too, so a bad ``SHOP_…`` value is named the same way)."""

    @functools.wraps(parse)
    def parsed(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parsed


def _optional_seconds(value: str) -> float | None:
    return None if value.strip().lower() in ("", "never", "none") else float(value)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m synclane_demo.shop", description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--host", default=_env("host", "127.0.0.1"))
    add("--port", type=int, default=int(_env("port", "8081")))
    add("--latency", type=float, default=float(_env("latency", "0.3")), help="seconds per data request")
    add("--rate-429", type=float, default=float(_env("rate_429", "0.03")))
    add("--rate-503", type=float, default=float(_env("rate_503", "0.03")))
    add(
        "--rate-limits",
        type=_argument(parse_limits),
        default=_env("rate_limits", "acme=2"),
        help="requests a second per seller, e.g. 'acme=2,globex=5' ('' for none); more get 429",
    )
    add(
        "--limit-changes",
        type=_argument(parse_limit_changes),
        default=_env("limit_changes", DEMO_LIMIT_CHANGES),
        help=f"changes of a seller's limit at a moment of the shop's life, SELLER=N@T: from T (90s, 5m, 1.5h) after "
        f"the start, N requests a second ('none' for none; default {DEMO_LIMIT_CHANGES!r})",
    )
    add("--retry-after", type=int, default=int(_env("retry_after", "3")), help="seconds named by a 429")
    add("--seed", type=int, default=int(_env("seed", "7")))
    add("--broken-account", default=_env("broken_account", "globex"), help="empty: nothing is broken")
    add("--broken-days-ago", type=int, default=int(_env("broken_days_ago", "45")))
    add(
        "--heal-after",
        type=_optional_seconds,
        default=_optional_seconds(_env("heal_after", "600")),
        help="seconds until the broken page heals by itself; 'never' to heal only when told",
    )
    add(
        "--revoke-account",
        default=_env("revoke_account", "umbrella"),
        help="the account whose grant the shop revokes on its own after its first pages; empty: none",
    )
    add("--revoke-after-pages", type=int, default=int(_env("revoke_after_pages", "2")))
    add(
        "--token-lifetime",
        type=float,
        default=float(_env("token_lifetime", str(DEFAULT_LIFETIME))),
        help="seconds an access token is good for (refresh tokens rotate at each refresh)",
    )
    add("--history-days", type=int, default=int(_env("history_days", "730")))
    add("--orders-per-day", default=_env("orders_per_day", "2-8"), help="LOW-HIGH orders per account and day")
    args = parser.parse_args(argv)
    unknown = sorted({change.seller for change in args.limit_changes} - SELLERS)
    if unknown:
        parser.error(f"--limit-changes names no seller of the shop's: {unknown} (its sellers: {sorted(SELLERS)})")
    return args


def build(args: argparse.Namespace) -> ShopServer:
    low, _, high = args.orders_per_day.partition("-")
    catalogue = Catalogue(history_days=args.history_days, orders_per_day=(int(low), int(high or low)))
    faults = Faults(
        latency=args.latency,
        rate_429=args.rate_429,
        rate_503=args.rate_503,
        retry_after=args.retry_after,
        seed=args.seed,
        broken_account=args.broken_account or None,
        broken_days_ago=args.broken_days_ago,
        heal_after=args.heal_after,
        revoke_account=args.revoke_account or None,
        revoke_after_pages=args.revoke_after_pages,
    )
    oauth = OAuth(lifetime=args.token_lifetime)
    return ShopServer(
        (args.host, args.port), Shop(catalogue, faults, Limits(args.rate_limits, changes=args.limit_changes), oauth)
    )


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s shop %(levelname)s %(message)s")
    server = build(parse(argv))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    faults = server.shop.faults
    logging.info(
        "shop listening on %s (latency %.2fs, rate limits %s, changing %s, 429 %.0f%%, 503 %.0f%%; %s's orders page 2 around %s "
        "broken, heals %s; %s's grant revoked after %d page(s); access tokens last %.0fs)",
        server.url,
        faults.latency,
        ", ".join(f"{seller} {n}/s" for seller, n in server.shop.limits.per_second.items()) or "none",
        ", ".join(map(str, server.shop.limits.changes)) or "never",
        faults.rate_429 * 100,
        faults.rate_503 * 100,
        faults.broken_account,
        faults.broken_at.date(),
        f"after {faults.heal_after:.0f}s" if faults.heal_after is not None else "when told",
        faults.revoke_account,
        faults.revoke_after_pages,
        server.shop.oauth.lifetime,
    )
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
