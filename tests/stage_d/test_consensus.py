"""The weighted consensus rule and the pooling of byte-identical cards."""

from __future__ import annotations

from stage_e_dagster.stage_d.consensus import NO_MATCH, VoteRecord, pool_votes, tally


def m(agent: str, outcome: int | str) -> VoteRecord:
    return VoteRecord(agent, "ocr", outcome)


def u(agent: str, outcome: int | str) -> VoteRecord:
    return VoteRecord(agent, "user", outcome)


def a(agent: str, outcome: int | str) -> VoteRecord:
    return VoteRecord(agent, "admin", outcome)


def test_machine_votes_alone_never_resolve() -> None:
    outcome = tally([m(f"engine-{i}", 7) for i in range(10)])
    assert (outcome.status, outcome.weight) == ("unresolved", 5.0)
    assert tally([m("e1", NO_MATCH), m("e2", NO_MATCH), m("e3", NO_MATCH), m("e4", NO_MATCH)]).status == "unresolved"


def test_a_user_needs_machine_support_to_reach_weight_two() -> None:
    assert tally([u("ann", 7), m("e1", 7)]).status == "unresolved"           # 1.5
    outcome = tally([u("ann", 7), m("e1", 7), m("e2", 7)])                    # 2.0
    assert (outcome.status, outcome.printing_id, outcome.weight) == ("resolved", 7, 2.0)


def test_admin_alone_resolves_and_no_match_is_an_outcome() -> None:
    assert tally([a("root", 7)]).as_fields == ("resolved", 7)
    assert tally([a("root", NO_MATCH), m("e1", 7)]).as_fields == ("no_match", None)


def test_share_below_sixty_percent_stays_unresolved() -> None:
    # Two humans disagree, so machine weight is left out: 2 vs 1 is a 0.67 share...
    assert tally([u("ann", 7), u("bob", 7), u("cy", 8), m("e1", 8), m("e2", 8)]).as_fields == ("resolved", 7)
    # ...and 2 vs 2 is not.
    assert tally([u("ann", 7), u("bob", 7), u("cy", 8), u("dee", 8)]).status == "unresolved"


def test_winner_needs_a_human_in_its_group() -> None:
    # Without exclusion the machines' outcome leads, but it has no human vote.
    outcome = tally([u("ann", 7), m("e1", 8), m("e2", 8), m("e3", 8), m("e4", 8), m("e5", 8), m("e6", 8)])
    assert outcome.status == "unresolved"


def test_pooling_counts_an_agent_once_and_drops_a_contradicting_one() -> None:
    pooled = pool_votes([m("e1", 7), m("e1", 7), u("ann", 7), u("bob", 7), u("bob", 8)])
    assert sorted(v.agent_id for v in pooled) == ["ann", "e1"]
    # Same engine voting on three identical uploads still weighs 0.5 in total.
    assert tally([u("ann", 7), m("e1", 7), m("e1", 7), m("e1", 7)]).status == "unresolved"
