"""Never-store screening scored on the labelled corpus (``secret_corpus.py``): recall ≥ 0.98 and
false-positive rate ≤ 0.02, overall and per kind, with each sample placed where an agent would
put it (a component's text, a locator, the evidence reference, a key of a nested object).
``docs/admission.md`` reports the same table; ``bench/screening_bench.py`` prints it."""

from __future__ import annotations

import time

import pytest

from admission_worker.screening import screen
from admission_worker.screening.library import _KEYWORD_STEMS
from tests.admission.secret_corpus import BENIGN_KINDS, PER_KIND, POSITIVE_KINDS, KindScore, samples, score

RECALL_FLOOR = 0.98
FALSE_POSITIVE_CEILING = 0.02
DRAWS = 3


def test_the_corpus_is_as_large_as_the_issue_asks() -> None:
    corpus = samples()
    positives = [s for s in corpus if s.secret]
    benign = [s for s in corpus if not s.secret]
    assert len(positives) >= 120 and len(POSITIVE_KINDS) >= 20
    assert len(benign) >= 120
    assert len({s.text for s in corpus}) >= len(corpus) - PER_KIND  # fixed-text benign kinds aside, all distinct
    assert {s.place for s in corpus} == {"text", "locator", "evidence", "key"}
    assert samples() == samples()  # seeded: the same corpus every run
    assert samples(1) != samples()


@pytest.fixture(scope="module")
def scores() -> list[KindScore]:
    return score(screen, draws=DRAWS)


def _rate(scores: list[KindScore], secret: bool) -> float:
    chosen = [s for s in scores if s.secret is secret]
    return sum(s.flagged for s in chosen) / sum(s.total for s in chosen)


def test_recall_and_false_positive_rate_overall(scores: list[KindScore]) -> None:
    assert _rate(scores, True) >= RECALL_FLOOR
    assert _rate(scores, False) <= FALSE_POSITIVE_CEILING


@pytest.mark.parametrize("kind", sorted(POSITIVE_KINDS))
def test_recall_per_kind(scores: list[KindScore], kind: str) -> None:
    (row,) = [s for s in scores if s.kind == kind]
    # One miss in a kind's 18 samples is allowed (0.94); the overall floor still holds.
    assert row.flagged >= row.total - 1


@pytest.mark.parametrize("kind", sorted(BENIGN_KINDS))
def test_false_positives_per_kind(scores: list[KindScore], kind: str) -> None:
    (row,) = [s for s in scores if s.kind == kind]
    assert row.flagged <= 1


def test_the_scorer_can_fail() -> None:
    flag_all = score(lambda *values: "x")
    assert _rate(flag_all, False) == 1.0
    flag_none = score(lambda *values: None)
    assert _rate(flag_none, True) == 0.0


def test_the_keyword_gate_covers_the_librarys_keywords() -> None:
    from detect_secrets.plugins import keyword

    for word in keyword.DENYLIST:
        assert any(stem in word.replace("_?", "_").lower() for stem in _KEYWORD_STEMS), word


# Inputs that made a quadratic pattern take seconds (ours or a plugin's) before the rules were
# bounded and the plugins windowed. A guard against catastrophic backtracking, not a speed
# claim: each is 64 KiB, and the ceiling is far above what a linear scan needs here.
ADVERSARIAL = ["sk-", "sk-a", "eyJ", "a://", "a://b:", "sess", "?sv=2020-01-01&", "PuTTY-User-Key-File-1:",
               "password ", "a\n", "%41", '"', "xoxb-", "-----BEGIN ", "Cookie: a=", "secret=", "A_TOKEN="]


@pytest.mark.parametrize("unit", ADVERSARIAL)
def test_no_input_makes_screening_quadratic(unit: str) -> None:
    text = (unit * (65_000 // len(unit) + 1))[:65_000]
    started = time.monotonic()
    screen({"t": text}, budget_seconds=60)
    assert time.monotonic() - started < 10.0
