import random

import pytest

from engram_core.canonical import canonicalize
from engram_core.errors import Code, EngramError
from search_service.budget import (
    CURSOR_FIELD,
    DIGEST_PLACEHOLDER,
    canonical_size,
    cursor_placeholder,
    fit_packets,
)
from search_service.cursors import MAX_TOKEN_LENGTH, CursorCodec, CursorState


def skeleton() -> dict:
    return {
        "records": [],
        "rank_receipt": {"profile": "engram-hybrid/v2", "candidate_count": 3,
                         "receipt_digest": "sha256:" + "7" * 64},
        "response_digest": DIGEST_PLACEHOLDER,
        CURSOR_FIELD: cursor_placeholder(MAX_TOKEN_LENGTH),
    }


def packet(i: int, pad: int) -> dict:
    return {
        "record": {"record_id": f"mem_{i:03d}", "text": "é" * (pad // 2) + "x" * (pad % 2)},
        "redacted_fields": ["/retention"],
        "redaction_receipt_digest": "sha256:" + "3" * 64,
        "score": 0.123456789012,
        "rank": i,
    }


def value(included: list[dict], with_cursor: bool) -> dict:
    out = dict(skeleton(), records=included)
    if not with_cursor:
        del out[CURSOR_FIELD]
    return out


def size(included: list[dict], with_cursor: bool) -> int:
    return len(canonicalize(value(included, with_cursor)))


def code_of(call) -> Code:
    with pytest.raises(EngramError) as info:
        call()
    return info.value.code


PACKETS = [packet(1, 300), packet(2, 501), packet(3, 40)]


def test_everything_fits_exactly_without_cursor():
    exact = size(PACKETS, with_cursor=False)
    fit = fit_packets(skeleton(), PACKETS, exact, 10, False)
    assert (fit.included, fit.cut, fit.has_more) == (PACKETS, False, False)
    # one byte less: the page is cut and needs a cursor
    fit = fit_packets(skeleton(), PACKETS, exact - 1, 10, False)
    assert fit.cut and fit.has_more
    assert fit.included == PACKETS[: len(fit.included)] and fit.included
    assert size(fit.included, True) <= exact - 1
    assert size(PACKETS[: len(fit.included) + 1], True) > exact - 1


def test_cut_boundary_with_cursor():
    two = size(PACKETS[:2], with_cursor=True)
    fit = fit_packets(skeleton(), PACKETS, two, 10, True)
    assert (fit.included, fit.cut, fit.has_more) == (PACKETS[:2], True, True)
    fit = fit_packets(skeleton(), PACKETS, two - 1, 10, True)
    assert (fit.included, fit.cut, fit.has_more) == (PACKETS[:1], True, True)


def test_first_packet_alone():
    only = [PACKETS[0]]
    exact = size(only, with_cursor=False)
    assert fit_packets(skeleton(), only, exact, 10, False).included == only
    assert code_of(lambda: fit_packets(skeleton(), only, exact - 1, 10, False)) is \
        Code.PROJECTION_OVERSIZED
    # when more hits follow, the first packet must fit beside the cursor
    exact = size(only, with_cursor=True)
    fit = fit_packets(skeleton(), PACKETS, exact, 10, False)
    assert (fit.included, fit.cut, fit.has_more) == (only, True, True)
    assert code_of(lambda: fit_packets(skeleton(), PACKETS, exact - 1, 10, False)) is \
        Code.PROJECTION_OVERSIZED


def test_skeleton_boundaries():
    bare = size([], with_cursor=False)
    fit = fit_packets(skeleton(), [], bare, 10, False)
    assert (fit.included, fit.cut, fit.has_more) == ([], False, False)
    assert code_of(lambda: fit_packets(skeleton(), [], bare - 1, 10, False)) is Code.RESULT_TOO_LARGE
    assert code_of(lambda: fit_packets(skeleton(), PACKETS, bare - 1, 10, False)) is \
        Code.RESULT_TOO_LARGE
    with_cursor = size([], with_cursor=True)
    assert code_of(lambda: fit_packets(skeleton(), PACKETS, with_cursor - 1, 10, True)) is \
        Code.RESULT_TOO_LARGE
    assert code_of(lambda: fit_packets(skeleton(), PACKETS, with_cursor, 10, True)) is \
        Code.PROJECTION_OVERSIZED


def test_limit():
    big = 1_048_576
    fit = fit_packets(skeleton(), PACKETS, big, 2, False)
    assert (fit.included, fit.cut, fit.has_more) == (PACKETS[:2], False, True)
    fit = fit_packets(skeleton(), PACKETS, big, 3, False)
    assert (fit.included, fit.cut, fit.has_more) == (PACKETS, False, False)
    fit = fit_packets(skeleton(), PACKETS, big, 3, True)
    assert (fit.included, fit.cut, fit.has_more) == (PACKETS, False, True)
    fit = fit_packets(skeleton(), PACKETS[:1], big, 1, True)
    assert (fit.included, fit.cut, fit.has_more) == (PACKETS[:1], False, True)


def test_caller_errors():
    with pytest.raises(ValueError):
        fit_packets(skeleton(), PACKETS, 65536, 0, False)
    with pytest.raises(ValueError):
        fit_packets(dict(skeleton(), records=[PACKETS[0]]), PACKETS, 65536, 10, False)
    with pytest.raises(ValueError):
        fit_packets(skeleton(), [], 65536, 10, True)
    no_cursor = value([], with_cursor=False)
    assert fit_packets(no_cursor, PACKETS, 65536, 10, False).included == PACKETS
    with pytest.raises(ValueError):
        fit_packets(no_cursor, PACKETS, 65536, 2, False)


def test_canonical_size():
    assert canonical_size({"b": "é", "a": [1, 2.5]}) == len('{"a":[1,2.5],"b":"é"}'.encode())


def test_random_pages_are_exact():
    rng = random.Random(2027)
    for _ in range(3000):
        packets = [packet(i, rng.choice([0, 1, 5, 80, 400, 1500, 5000])) for i in range(1, rng.randint(0, 8))]
        limit = rng.randint(1, 8)
        more_hits = bool(packets) and rng.random() < 0.5
        page = packets[:limit]
        beyond = more_hits or len(packets) > limit
        needs_cursor_alone = beyond or len(page) > 1
        lo = size([], False) - 2
        hi = size(page, needs_cursor_alone) + 2
        max_bytes = rng.randint(lo, max(lo, hi))
        try:
            fit = fit_packets(skeleton(), packets, max_bytes, limit, more_hits)
        except EngramError as error:
            if error.code is Code.RESULT_TOO_LARGE:
                assert size([], needs_cursor_alone and bool(page)) > max_bytes \
                    or size([], False) > max_bytes
            else:
                assert error.code is Code.PROJECTION_OVERSIZED
                assert size(page[:1], beyond or len(page) > 1) > max_bytes
            continue
        n = len(fit.included)
        assert fit.included == page[:n]
        assert fit.has_more == (n < len(page) or beyond)
        assert fit.cut == (n < len(page))
        assert not (fit.has_more and n == 0), "never an empty page with a cursor"
        assert size(fit.included, fit.has_more) <= max_bytes
        if fit.cut:
            assert size(page[: n + 1], True) > max_bytes


def test_real_cursor_never_longer_than_placeholder():
    codec = CursorCodec(b"k" * 32)
    token = codec.encode(CursorState("sha256:" + "a" * 64, "sha256:" + "b" * 64,
                                     "sha256:" + "c" * 64, "123456789", 1_800_000_000_000, 10,
                                     "sha256:" + "d" * 64, 1_800_000_000_000))
    real = dict(value(PACKETS, True), next_page_cursor=token)
    assert canonical_size(real) <= size(PACKETS, True)
