"""The search leg's and the block's tuned rules, each behind one named switch (issue 50).

Every rule here was kept because it won on LoCoMo. To measure each one on conversations
it was not tuned on (`make eval ARGS=--folds`, eval/folds.py), the eval turns one off at a
time in process. Production never changes these: the defaults are today's behaviour, and
the code reads `current()` where each rule lives, so a default run is byte-for-byte the same.

A plain module-level value, not a context variable: search runs in a worker thread of its
own (recall's time budget), which a context variable would not reach.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace

# RRF's usual constant, what `legs_k` goes back to with the rule off.
USUAL_RRF_K = 60


@dataclass(frozen=True)
class SearchRules:
    """One switch per rule; True (or the tuned value) is today's behaviour."""

    # keywords.query_terms: the question's framing words ("kind", "many") left out.
    question_frame: bool = True
    # sqlite_index / postgres_index: the second keyword pass widened by feedback words.
    feedback_pass: bool = True
    # recall: the query's dates as time spans (SearchQuery.during): the dated pass.
    dated_pass: bool = True
    # recall.dates: the Chinese, Japanese and Korean date forms (2023年11月16日, 11월 16일).
    cjk_dates: bool = True
    # embeddings.question_for_vectors: names out of the vector query ...
    names_out_of_vectors: bool = True
    # ... except in German, whose nouns are capitalized.
    german_exception: bool = True
    # fusion.LEGS_K: RRF's k between the legs and the keyword passes (10, the usual 60).
    legs_k: int = 10
    # search_leg.named_first: what someone the query names said moved up (the said-by rule).
    said_by: bool = True
    # named_first: what was said on a date the query names moved up.
    said_on: bool = True
    # named_first: with a "when" question, messages that place things in time moved up.
    asking_when: bool = True
    # query_snippet: a long message shown as the sentences sharing the query's words.
    snippets: bool = True
    # rank_facts: a fact repeating a better one (FACT_REPEAT_SHARE) left out.
    fact_repeats_out: bool = True
    # rank_facts / rank_episodes: a subject's name does not make a fact or episode relevant.
    relevance_without_names: bool = True
    # rank_facts / rank_episodes: facts and episodes the query is not about wait for the
    # room the passages leave, rather than taking their sections' own room first.
    unrelated_wait_for_room: bool = True
    # assemble: the room facts and episodes leave unused goes to the passages.
    passages_take_spare: bool = True

    def without(self, rule: str) -> SearchRules:
        """These rules with `rule` off (a switch set False; `legs_k` the usual 60)."""
        if rule == "legs_k":
            return replace(self, legs_k=USUAL_RRF_K)
        if rule not in RULE_NAMES:
            raise ValueError(f"no search rule named {rule!r}")
        return replace(self, **{rule: False})


TODAY = SearchRules()
RULE_NAMES = tuple(f.name for f in fields(SearchRules))

_current = TODAY


def current() -> SearchRules:
    """The rules in force: TODAY, unless the eval has set others."""
    return _current


@contextmanager
def applied(rules: SearchRules) -> Iterator[SearchRules]:
    """`rules` in force for the block's duration (the eval, one variant at a time)."""
    global _current
    before, _current = _current, rules
    try:
        yield rules
    finally:
        _current = before
