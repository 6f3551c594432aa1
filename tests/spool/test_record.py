"""The pure byte layout: headers, slots, and where a batch lands in the ring."""
from __future__ import annotations

from spool.record import (
    DATA_START,
    END,
    EPOCH_SHIFT,
    HDR,
    PAD,
    RECORD,
    Slot,
    choose_slot,
    decode_header,
    decode_slot,
    encode_batch,
    encode_marker,
    encode_record,
    encode_slot,
    lost_between,
    place_batch,
    record_size,
)

SIZE = 64 * 1024


def test_record_header_round_trips_and_rejects_every_single_byte_flip() -> None:
    """Any one damaged byte in a header makes it unreadable rather than wrong."""
    raw = encode_record(7, 1234, b"payload")
    h = decode_header(raw[:HDR])
    assert h is not None and (h.kind, h.seq, h.ts_ms, h.length) == (RECORD, 7, 1234, 7)
    for i in range(HDR):
        flipped = bytearray(raw[:HDR])
        flipped[i] ^= 0x01
        assert decode_header(bytes(flipped)) is None, i


def test_records_are_padded_to_eight_bytes() -> None:
    """Every record starts aligned, so a resync scan only tests one offset in eight."""
    for n in range(20):
        assert len(encode_record(1, 0, b"x" * n)) == record_size(n)
        assert record_size(n) % 8 == 0


def test_marker_kind_is_covered_by_the_checksum() -> None:
    """An end marker cannot turn into a record by a flipped kind byte."""
    raw = bytearray(encode_marker(END, 5))
    raw[3] = ord("R")
    assert decode_header(bytes(raw)) is None


def test_newest_valid_slot_wins_and_a_torn_one_falls_back() -> None:
    """Generations alternate slots; a torn newest slot leaves the previous one in charge."""
    old = Slot(4, SIZE, DATA_START, 10, 1)
    new = Slot(5, SIZE, DATA_START + 64, 11, 1)
    assert choose_slot(old, new) == (new, False)
    torn = bytearray(encode_slot(new))
    torn[40] ^= 0xFF
    assert decode_slot(bytes(torn)) is None
    assert choose_slot(old, decode_slot(bytes(torn))) == (old, True)
    assert choose_slot(None, Slot(1, SIZE, DATA_START, 0, 1)) == (Slot(1, SIZE, DATA_START, 0, 1), False)


def test_slot_with_head_outside_the_ring_is_rejected() -> None:
    """A checksummed but impossible header is treated as lost, not trusted."""
    assert decode_slot(encode_slot(Slot(1, SIZE, SIZE + 8, 0, 1))) is None
    assert decode_slot(encode_slot(Slot(1, SIZE, DATA_START + 3, 0, 1))) is None


def test_batch_that_does_not_fit_before_the_end_gets_a_pad_and_wraps() -> None:
    """A record never straddles the end: a pad marks the jump back to the start."""
    tail = SIZE - 100
    plan = place_batch(tail, SIZE, [64, 64])
    assert plan.positions == (tail, DATA_START)
    assert plan.pads == (tail + 64,)
    assert plan.tail == DATA_START + 64
    assert plan.consumed == 100 + 64


def test_fewer_than_a_header_of_bytes_left_wraps_without_a_pad() -> None:
    """The last few bytes cannot hold a pad, so readers skip them by rule."""
    plan = place_batch(SIZE - 88, SIZE, [64])
    assert plan.positions == (SIZE - 88,)
    assert plan.pads == ()
    assert plan.tail == DATA_START        # 24 bytes left: the tail moves to the start
    assert plan.consumed == 88


def test_seq_gap_counts_losses_within_an_epoch_only() -> None:
    """A new epoch starts at counter 0; jumping there loses nothing."""
    e1, e2 = 1 << EPOCH_SHIFT, 2 << EPOCH_SHIFT
    assert lost_between(e1 + 5, e1 + 8) == 3
    assert lost_between(e1 + 5, e2) == 0
    assert lost_between(e1 + 5, e2 + 2) == 2
    assert lost_between(e1 + 5, e1 + 5) == 0


def test_batch_encoding_writes_pad_then_wraps_and_ends_with_an_end_marker() -> None:
    """Two writes at a wrap: records + pad up to the end, then records + end marker from the start."""
    tail = SIZE - 100
    payloads = [b"a" * 30, b"b" * 30]   # 64 bytes each on disk
    plan = place_batch(tail, SIZE, [record_size(30)] * 2)
    writes = encode_batch(plan, tail, 7, 0, payloads)
    assert [pos for pos, _ in writes] == [tail, DATA_START]
    first, second = writes[0][1], writes[1][1]

    def kind_seq(raw: bytes) -> tuple[bytes, int]:
        h = decode_header(raw)
        assert h is not None
        return h.kind, h.seq

    assert kind_seq(first[:HDR]) == (RECORD, 7)
    assert kind_seq(first[64:64 + HDR]) == (PAD, 8)
    assert kind_seq(second[:HDR]) == (RECORD, 8)
    assert kind_seq(second[64:64 + HDR]) == (END, 9)
