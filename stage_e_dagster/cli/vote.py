"""``stage-e vote``: cast a person's printing vote and show the card's consensus afterwards."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..catalog.engine import session_scope
from ..stage_d.human import VoteError, cast_human_vote, resolve_card, resolve_printing
from .context import catalog_engine
from .errors import CliError
from .output import percent


def vote(
    card: Annotated[str, typer.Argument(
        help="The card: its identifier (tried first) or its numeric id.")],
    printing: Annotated[str | None, typer.Argument(
        help="The printing it shows: a printing id, or SET:NUMBER (e.g. dmu:41), or SET:NUMBER:LANG.")] = None,
    no_match: Annotated[bool, typer.Option(
        "--no-match", help="Vote that the card shows no catalogued printing.")] = False,
    user: Annotated[str, typer.Option("--user", help="Who votes (required); one vote per person per card.")] = "",
    admin: Annotated[bool, typer.Option("--admin", help="Cast as an admin (weight 5 instead of 1).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Cast a human printing vote (PRINTING or --no-match) and recompute the card's consensus."""
    if (printing is None) == (not no_match):
        raise CliError("give exactly one of PRINTING or --no-match")
    if not user.strip():
        raise CliError("--user NAME is required")
    engine = catalog_engine()
    try:
        with session_scope(engine) as session:
            card_id = resolve_card(session, card)
            printing_id = None if no_match else resolve_printing(session, printing or "")
        outcome = cast_human_vote(engine, card_id, printing_id, user=user, admin=admin)
    except VoteError as exc:
        raise CliError(str(exc)) from None
    result = {
        "card_id": card_id, "voted_printing_id": printing_id, "no_match": no_match, "user": user.strip(),
        "source": "admin" if admin else "user", "status": outcome.status,
        "inferred_printing_id": outcome.printing_id, "winner_weight": outcome.weight,
        "winner_share": round(outcome.share, 4),
    }
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    voted = "no match" if no_match else f"printing {printing_id}"
    verdict = f"resolved to printing {outcome.printing_id}" if outcome.status == "resolved" else outcome.status
    typer.echo(
        f"card {card_id}: {user.strip()} ({result['source']}) voted {voted}; consensus {verdict} "
        f"(leading weight {outcome.weight:g}, share {percent(outcome.share)})"
    )
