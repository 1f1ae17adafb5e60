"""Human printing votes: a person says which printing a card shows (or that it shows none).

A person holds at most one printing vote per card: a new vote replaces their earlier one. The
vote is written insert-or-ignore, and consensus is recomputed for the card's whole target.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.collector_line import normalize_collector_number
from ..catalog.models import Card, Expansion, Printing, PrintingVote
from .agents import MACHINE_AGENT_PREFIX
from .consensus import ConsensusOutcome, recompute_consensus
from .writes import insert_ignore


class VoteError(ValueError):
    """A human vote that cannot be cast: unknown card or printing, or a bad voter name."""


class UnknownCardError(VoteError):
    pass


class UnknownPrintingError(VoteError):
    pass


def cast_human_vote(
    engine: sa.Engine, card_id: int, printing_id: int | None, *, user: str, admin: bool = False
) -> ConsensusOutcome:
    """Record ``user``'s vote (``printing_id`` None = no match) and return the card's new consensus."""
    name = (user or "").strip()
    if not name:
        raise VoteError("a vote needs the voter's name")
    if name.lower().startswith(MACHINE_AGENT_PREFIX) or len(name) > 64:
        raise VoteError(f"{name!r} is not a usable voter name (reserved prefix or longer than 64 characters)")
    with Session(engine, expire_on_commit=False) as session, session.begin():
        if session.get(Card, card_id) is None:
            raise UnknownCardError(f"no card with id {card_id}")
        if printing_id is not None and session.get(Printing, printing_id) is None:
            raise UnknownPrintingError(f"no printing with id {printing_id}")
        session.execute(
            sa.delete(PrintingVote).where(
                PrintingVote.card_id == card_id,
                PrintingVote.agent_id == name,
                PrintingVote.source.in_(("user", "admin")),
            ),
            execution_options={"synchronize_session": False},
        )
        insert_ignore(session, PrintingVote.__table__, [{
            "card_id": card_id, "printing_id": printing_id, "is_no_match": printing_id is None,
            "agent_id": name, "source": "admin" if admin else "user", "confidence": None, "run_id": None,
        }])
        outcomes, _ = recompute_consensus(session, [card_id])
    return outcomes[card_id]


def resolve_card(session: Session, text: str) -> int:
    """A card id from its identifier (tried first) or its numeric id."""
    text = text.strip()
    found = session.execute(sa.select(Card.id).where(Card.identifier == text)).scalar_one_or_none()
    if found is not None:
        return found
    if text.isdigit() and session.get(Card, int(text)) is not None:
        return int(text)
    raise UnknownCardError(f"no card with identifier or id {text!r}")


def resolve_printing(session: Session, text: str) -> int:
    """A printing id from ``ID`` or ``SET:NUMBER[:LANG]`` (English preferred when the language is left out)."""
    text = text.strip()
    if text.isdigit():
        if session.get(Printing, int(text)) is None:
            raise UnknownPrintingError(f"no printing with id {text}")
        return int(text)
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise UnknownPrintingError(f"{text!r} is neither a printing id nor SET:NUMBER[:LANG]")
    code, number = parts[0].lower(), normalize_collector_number(parts[1])
    lang = parts[2].lower() if len(parts) == 3 else None
    rows = session.execute(
        sa.select(Printing.id, Printing.collector_number, Printing.lang)
        .join(Expansion, Expansion.id == Printing.expansion_id)
        .where(sa.func.lower(Expansion.code) == code)
    ).all()
    hits = [r for r in rows if normalize_collector_number(r.collector_number) == number
            and (lang is None or (r.lang or "en").lower() == lang)]
    if len(hits) > 1 and lang is None:
        hits = [r for r in hits if (r.lang or "en").lower() == "en"] or hits
    if not hits:
        raise UnknownPrintingError(f"no printing {text!r} in the catalogue")
    if len(hits) > 1:
        raise UnknownPrintingError(f"{text!r} matches {len(hits)} printings; add the language (SET:NUMBER:LANG)")
    return hits[0].id
